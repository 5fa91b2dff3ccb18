"""The Redis request/reply protocol (RESP2 and RESP3), sans I/O: requests parsed into commands,
replies written as bytes, and the one error type."""

from node.resp.errors import RespProtocolError
from node.resp.inline import split_inline
from node.resp.parser import MAX_BULK_LEN, MAX_INLINE, MAX_REQUEST, Command, RequestParser
from node.resp.writer import RESP2, RESP3, Writer, writer_for

__all__ = [
    "MAX_BULK_LEN",
    "MAX_INLINE",
    "MAX_REQUEST",
    "RESP2",
    "RESP3",
    "Command",
    "RequestParser",
    "RespProtocolError",
    "Writer",
    "split_inline",
    "writer_for",
]
