"""The one error type of the protocol code: what went wrong, what to tell the peer."""

from __future__ import annotations

__all__ = ["ProtocolError"]


class ProtocolError(Exception):
    """A peer broke the protocol, or asked for something it may not have.

    Attributes:
        message: the text for ``-ERR '<message>'``, as nats-server words it (clients match on it);
            None when nats-server closes without saying why (argument errors in PUB or SUB lines).
    """

    def __init__(self, message: str | None, *, reason: str | None = None) -> None:
        super().__init__(reason or message or "protocol violation")
        self.message = message
