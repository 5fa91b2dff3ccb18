"""The append-only file's record format, without I/O: encoding, and a reader fed bytes in any pieces.

A record is one change to keys, as the command that repeats it, with the account and database it
ran in, as the body of a checksummed record (``transport.records`` frames it)::

    body    u16 account length | u8 database | u32 argument count | u32 length per argument |
            account (UTF-8) | the arguments, one after the other

(integers little-endian; the lengths come first so that a record is read with two ``unpack``
calls and slicing: reading is a fair part of what a restart costs, beside running the commands).

Records come in batches ended by ``COMMIT``, written whole or cut off as a torn tail, and damage
anywhere else is ``CorruptRecord``: all of that is ``transport.records``'s framing. A batch is all the
changes of the requests whose replies waited for one commit, so a crash in the middle of a write
leaves no half of anything -- not part of a MULTI/EXEC, not an XADD without the trim that went
with it, not some of the pending entries of one XREADGROUP -- and what it drops was never
acknowledged.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import attrs

from transport.records import COMMIT, HEADER_SIZE, BatchReader, CorruptRecord, frame

__all__ = ["COMMIT", "HEADER_SIZE", "CorruptRecord", "Record", "RecordReader", "encode"]

_FIXED = struct.Struct("<HBI")


@attrs.frozen
class Record:
    """One change: ``args`` run as a command in database ``db`` of ``account``."""

    account: str
    db: int
    args: list[bytes]


def encode(account: str, db: int, args: Sequence[bytes]) -> bytes:
    """One record, header included."""
    name = account.encode()
    return frame(
        b"".join(
            [
                _FIXED.pack(len(name), db, len(args)),
                struct.pack(f"<{len(args)}I", *map(len, args)),
                name,
                *args,
            ]
        )
    )


def _decode(body: bytes, offset: int) -> Record:
    try:
        size, db, count = _FIXED.unpack_from(body, 0)
        pos = _FIXED.size + 4 * count
        lengths = struct.unpack_from(f"<{count}I", body, _FIXED.size)
        account = body[pos : pos + size].decode()
    except (struct.error, ValueError):
        raise CorruptRecord(offset, "malformed record") from None
    pos += size
    args: list[bytes] = []
    for length in lengths:
        args.append(body[pos : pos + length])
        pos += length
    if pos != len(body) or not args:
        raise CorruptRecord(offset, "malformed record")
    return Record(account, db, args)


class RecordReader:
    """Records from a file's bytes, fed in pieces of any size, handed on a batch at a time.

    ``offset`` is where the next batch starts (every byte before it belonged to complete, checked
    batches); ``pending`` counts the bytes after it: an incomplete batch, if the input has ended.
    """

    def __init__(self, offset: int = 0) -> None:
        self._batches = BatchReader(offset)

    @property
    def offset(self) -> int:
        return self._batches.offset

    @property
    def pending(self) -> int:
        return self._batches.pending

    def feed(self, data: bytes) -> list[Record]:
        """The records of the batches ``data`` completes.

        Raises:
            CorruptRecord: a complete record (or header) failed its checks.
        """
        return [_decode(body, offset) for offset, body in self._batches.feed(data)]
