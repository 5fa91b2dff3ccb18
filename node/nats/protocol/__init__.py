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
from node.nats.protocol.parser import ClientOpParser, ServerOpParser

__all__ = [
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
