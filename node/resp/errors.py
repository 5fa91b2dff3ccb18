"""The one error type of the RESP codec: what went wrong, and what to tell the client."""

from __future__ import annotations

__all__ = ["RespProtocolError"]


class RespProtocolError(Exception):
    """A client broke the request protocol; the connection answers and closes.

    Attributes:
        message: the text after ``-ERR Protocol error: `` exactly as redis-server words it
            (``writer.protocol_error`` makes the line); None when redis-server closes without a
            word, as it does for a request larger than its query buffer limit.
    """

    def __init__(self, message: str | None, *, reason: str | None = None) -> None:
        super().__init__(reason or message or "protocol violation")
        self.message = message
