"""The NATS client protocol, sans I/O: events, their parsers and writers, and the one error type."""

from node.nats.protocol.errors import ProtocolError
from node.nats.protocol.events import (
    ClientEvent,
    Connect,
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    PubBatch,
    ServerEvent,
    Sub,
    Unsub,
)
from node.nats.protocol.parser import MAX_CONTROL_LINE, MAX_PAYLOAD, ClientOpParser, ServerOpParser

__all__ = [
    "MAX_CONTROL_LINE",
    "MAX_PAYLOAD",
    "ClientEvent",
    "ClientOpParser",
    "Connect",
    "Err",
    "Info",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "ProtocolError",
    "PubBatch",
    "ServerEvent",
    "ServerOpParser",
    "Sub",
    "Unsub",
]
