"""Checksummed records in batches for append-only files, without I/O; the disk calls to write them.

A record frames one body of bytes::

    header  u32 body length | u32 crc32(body) | u32 crc32(the first 8 header bytes)
    body    the bytes

(integers little-endian). What a body holds is the caller's business: the Redis journal's
commands (``node.data.store.records``), a Raft group's log (``cluster.replication.storage``).

**Batches.** A record with an empty body (``COMMIT``) ends a batch: what one write of the file
added. A reader hands bodies on only once their batch is complete, so a crash in the middle of a
write leaves no half of anything.

**Damage.** The header has its own checksum so that a damaged length is recognised as damage rather
than believed: a record is either cut short -- its header or body runs past the end of what was
written, which is what a crash in the middle of a write leaves -- or complete and checked. The end
of a file after its last complete batch is a *torn tail*, to be dropped; a complete record that
fails either checksum is corruption wherever it is (``CorruptRecord``, with its offset). A
zero-filled tail, as some file systems leave after a crash, fails the header checksum: corruption,
the safe side.

``Disk`` names the system calls a file of records is written with, so that tests can hand in ones
that fail on purpose (a full disk, an I/O error).
"""

from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import attrs

__all__ = [
    "COMMIT",
    "DISK",
    "HEADER_SIZE",
    "MAX_BODY",
    "BatchReader",
    "CorruptRecord",
    "Disk",
    "frame",
    "fsync_dir",
    "lock_directory",
    "write_all",
]

_HEADER = struct.Struct("<III")
_PREFIX = struct.Struct("<II")
_CRC = struct.Struct("<I")
HEADER_SIZE = _HEADER.size
MAX_BODY = 1 << 31
"""The largest body a reader accepts (a larger length can only be damage)."""
COMMIT = _PREFIX.pack(0, 0) + _CRC.pack(zlib.crc32(_PREFIX.pack(0, 0)))
"""The record that ends a batch."""


class CorruptRecord(ValueError):
    """A complete record that fails its checks, at ``offset`` bytes from the start of the file."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} at offset {offset}")
        self.offset = offset
        self.reason = reason


def frame(body: bytes) -> bytes:
    """One record holding ``body`` (not empty: an empty body is ``COMMIT``), header included."""
    prefix = _PREFIX.pack(len(body), zlib.crc32(body))
    return prefix + _CRC.pack(zlib.crc32(prefix)) + body


class BatchReader:
    """Record bodies from a file's bytes, fed in pieces of any size, handed on a batch at a time.

    ``offset`` is where the next batch starts (every byte before it belonged to complete, checked
    batches); ``pending`` counts the bytes after it: an incomplete batch, if the input has ended.
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self._next = offset  # where the next record starts
        self._batch: list[tuple[int, bytes]] = []
        self._buffer = b""

    @property
    def pending(self) -> int:
        return self._next - self.offset + len(self._buffer)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The bodies of the batches ``data`` completes, each with the offset of its record.

        Raises:
            CorruptRecord: a complete record (or header) failed its checks.
        """
        buffer = self._buffer + data if self._buffer else bytes(data)
        done: list[tuple[int, bytes]] = []
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
                batch.append((self._next, body))
                self._next += HEADER_SIZE + length
            else:
                self._next += HEADER_SIZE
                self.offset = self._next
                done += batch
                batch.clear()
            pos = end
        self._buffer = buffer[pos:]
        return done


def _free_bytes(fd: int) -> int:
    stats = os.fstatvfs(fd)
    return stats.f_bavail * stats.f_frsize


@attrs.frozen
class Disk:
    """The system calls a file of records is written with (tests hand in ones that fail on purpose)."""

    write: Callable[[int, memoryview], int] = os.write
    fsync: Callable[[int], None] = os.fsync
    ftruncate: Callable[[int, int], None] = os.ftruncate
    free_bytes: Callable[[int], int] = _free_bytes


DISK = Disk()
"""The real system calls."""


def write_all(write: Callable[[int, memoryview], int], fd: int, data: bytes | bytearray) -> None:
    """Write all of ``data``. (On failure, views of ``data`` may live on in the traceback: a
    bytearray written here is replaced afterwards, never resized.)"""
    view = memoryview(data)
    while view:
        view = view[write(fd, view) :]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a rename or a new file in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_directory(directory: Path) -> int:
    """Create ``directory`` if need be and take its ``LOCK`` file for this process alone; return
    the lock's file descriptor (closing it lets go).

    Raises:
        BlockingIOError: another process holds the lock.
        OSError: the directory or its lock file cannot be made or opened.
    """
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd
