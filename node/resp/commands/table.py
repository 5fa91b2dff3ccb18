"""The table of every command the Redis front door serves, assembled from the command families in
COMMAND's order; whoever makes a ``RespConnection`` hands it this table."""

from __future__ import annotations

from typing import Final

from node.resp.commands import (
    config,
    connection,
    diagnostics,
    info,
    introspection,
    keys,
    lcs,
    memory,
    objects,
    pubsub,
    scripting,
    server,
    stream_groups,
    stream_reads,
    streams,
    strings,
    transactions,
)
from node.resp.connection import RespConnection
from node.resp.dispatch import CommandTable

__all__ = ["COMMANDS"]

COMMANDS: Final[CommandTable[RespConnection]] = CommandTable(
    [
        *connection.COMMANDS,
        *introspection.COMMANDS,
        *info.COMMANDS,
        *config.COMMANDS,
        *server.COMMANDS,
        *diagnostics.COMMANDS,
        *memory.COMMANDS,
        *pubsub.COMMANDS,
        *transactions.COMMANDS,
        *keys.COMMANDS,
        *strings.COMMANDS,
        *lcs.COMMANDS,
        *objects.COMMANDS,
        *streams.COMMANDS,
        *stream_reads.COMMANDS,
        *stream_groups.COMMANDS,
        *scripting.COMMANDS,
    ]
)
