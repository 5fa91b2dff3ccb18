"""Redis streams: compact entry storage, ID rules and consumer groups (pure, synchronous, no I/O)."""

from node.data.streams.entries import Entries, Entry, Trim
from node.data.streams.groups import (
    Consumer,
    ConsumerGroup,
    ConsumerInfo,
    GroupInfo,
    HistoryEntry,
    Nack,
)
from node.data.streams.ids import (
    MAX_ID,
    IdParts,
    StreamError,
    format_id,
    format_parts,
    make_id,
    parse_bound,
    parse_id,
)
from node.data.streams.stream import Stream, check_setid_args, group_infos, parse_add_id

__all__ = [
    "MAX_ID",
    "Consumer",
    "ConsumerGroup",
    "ConsumerInfo",
    "Entries",
    "Entry",
    "GroupInfo",
    "HistoryEntry",
    "IdParts",
    "Nack",
    "Stream",
    "StreamError",
    "Trim",
    "check_setid_args",
    "format_id",
    "format_parts",
    "group_infos",
    "make_id",
    "parse_add_id",
    "parse_bound",
    "parse_id",
]
