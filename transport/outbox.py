"""Bytes queued for one peer, shared by client connections (node) and links between nodes (cluster).

The protocol side appends; the I/O side takes everything queued in one piece, writes it, and says how
much got out. ``wake`` tells the I/O side there is something to write, once per piece taken, so a
burst of a thousand messages costs one wake-up. What was handed out and not yet confirmed counts as
pending, since the socket has not taken it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Outbox"]


class Outbox:
    """An outbound byte queue with a wake-up for whoever writes it.

    Args:
        wake: called when the queue gains data (or the owner starts closing), at most once until
            the next ``take_output``.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self.outbound = bytearray()
        self.closing: str | None = None
        """Why the owner is closing, once it is; the I/O side then flushes and hangs up."""
        self._wake = wake
        self._woken = False
        self._writing = 0  # bytes handed to the I/O side and not yet confirmed written

    def _send(self, data: bytes) -> None:
        self.outbound += data
        if not self._woken:
            self._woken = True
            self._wake()

    def _notify(self) -> None:
        if not self._woken:
            self._woken = True
            self._wake()

    def take_output(self) -> bytearray:
        """Everything queued so far; the I/O side writes it, then calls ``output_sent``."""
        data = self.outbound
        self.outbound = bytearray()  # a fresh buffer rather than a copy of the old one
        self._woken = False
        self._writing = len(data)
        return data

    def output_sent(self, data: bytearray, written: int) -> None:
        """The I/O side wrote ``written`` bytes of what ``take_output`` gave it; the rest goes back
        to the front of the queue."""
        self._writing = 0
        if written < len(data):
            rest = data[written:]
            rest += self.outbound
            self.outbound = rest

    def close(self, reason: str, *, flush: bool = True) -> None:
        """Start closing: the owner says what that means; the I/O side ends once flushed."""
        if self.closing is None:
            self.closing = reason
            if not flush:
                self.outbound.clear()
            self._notify()

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet written to the socket."""
        return len(self.outbound) + self._writing
