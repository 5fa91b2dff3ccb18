"""A state machine for tests: it records every entry applied, in order, and answers with its index
(an entry ``boom`` it cannot apply: it raises)."""

from __future__ import annotations

import msgpack


class Recorder:
    """Applies entries by recording them; a snapshot is the whole record."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []
        self.restores = 0
        self.terms = 0
        """Leaders' first entries committed (``term_began``)."""

    def apply(self, data: bytes) -> object:
        if data == b"boom":
            raise ValueError("cannot apply")
        self.applied.append(data)
        return len(self.applied)

    def term_began(self) -> None:
        self.terms += 1

    def snapshot(self) -> bytes:
        data: bytes = msgpack.packb(self.applied)
        return data

    def restore(self, data: bytes) -> None:
        self.applied = list(msgpack.unpackb(data))
        self.restores += 1
