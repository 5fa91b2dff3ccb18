"""The append-only file's record format, without I/O: encoding, and a reader fed bytes in any pieces.

A record is one change to keys, as the command that repeats it, with the account and database it
ran in::

    header  u32 body length | u32 crc32(body) | u32 crc32(the first 8 header bytes)
    body    u16 account length | u8 database | u32 argument count | u32 length per argument |
            account (UTF-8) | the arguments, one after the other

(integers little-endian; the lengths come first so that a record is read with two ``unpack``
calls and slicing: reading is a fair part of what a restart costs, beside running the commands).

**Batches.** A record with an empty body (``COMMIT``) ends a batch: the records one commit wrote,
all the changes of the requests whose replies waited for it. A reader hands records on only once
their batch is complete, so a crash in the middle of a write can leave no half of anything -- not
part of a MULTI/EXEC, not an XADD without the trim that went with it, not some of the pending
entries of one XREADGROUP -- and what it drops was never acknowledged.

**Damage.** The header has its own checksum so that a damaged length is recognised as damage
rather than believed: a record is either cut short -- its header or body runs past the end of what
was written, which is what a crash in the middle of a write leaves -- or complete and checked. The
end of a file after its last complete batch is a *torn tail*, dropped; a complete record that fails
either checksum is corruption wherever it is, reported with its offset. (A zero-filled tail, as
some file systems leave after a crash, fails the header checksum: corruption, the safe side.)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import attrs

__all__ = ["COMMIT", "HEADER_SIZE", "CorruptRecord", "Record", "RecordReader", "encode"]

_HEADER = struct.Struct("<III")
_PREFIX = struct.Struct("<II")
_CRC = struct.Struct("<I")
_FIXED = struct.Struct("<HBI")
HEADER_SIZE = _HEADER.size
MAX_BODY = 1 << 31
"""The largest body a reader accepts (a larger length can only be damage)."""
COMMIT = _PREFIX.pack(0, 0) + _CRC.pack(zlib.crc32(_PREFIX.pack(0, 0)))
"""The record that ends a batch."""


@attrs.frozen
class Record:
    """One change: ``args`` run as a command in database ``db`` of ``account``."""

    account: str
    db: int
    args: list[bytes]


class CorruptRecord(ValueError):
    """A complete record that fails its checks, at ``offset`` bytes from the start of the file."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason


def encode(account: str, db: int, args: Sequence[bytes]) -> bytes:
    """One record, header included."""
    name = account.encode()
    body = b"".join(
        [
            _FIXED.pack(len(name), db, len(args)),
            struct.pack(f"<{len(args)}I", *map(len, args)),
            name,
            *args,
        ]
    )
    prefix = _PREFIX.pack(len(body), zlib.crc32(body))
    return prefix + _CRC.pack(zlib.crc32(prefix)) + body


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
        self.offset = offset
        self._next = offset  # where the next record starts
        self._batch: list[Record] = []
        self._buffer = b""

    @property
    def pending(self) -> int:
        return self._next - self.offset + len(self._buffer)

    def feed(self, data: bytes) -> list[Record]:
        """The records of the batches ``data`` completes.

        Raises:
            CorruptRecord: a complete record (or header) failed its checks.
        """
        buffer = self._buffer + data if self._buffer else bytes(data)
        done: list[Record] = []
        batch = self._batch
        pos = 0
        while len(buffer) - pos >= HEADER_SIZE:
            length, body_crc, header_crc = _HEADER.unpack_from(buffer, pos)
            if zlib.crc32(buffer[pos : pos + 8]) != header_crc or length > MAX_BODY:
                raise CorruptRecord(self._next, "damaged record header")
            end = pos + HEADER_SIZE + length
            if end > len(buffer):
                break
            if length:
                body = buffer[pos + HEADER_SIZE : end]
                if zlib.crc32(body) != body_crc:
                    raise CorruptRecord(self._next, "record checksum mismatch")
                batch.append(_decode(body, self._next))
                self._next += HEADER_SIZE + length
            else:
                self._next += HEADER_SIZE
                self.offset = self._next
                done += batch
                batch.clear()
            pos = end
        self._buffer = buffer[pos:]
        return done
