"""A replica group's stable storage: its Raft hard state, log and snapshot, in one directory.

``RaftStorage`` carries out ``Ready.must_persist`` (``cluster.raft.ready``) and reads it all back
after a restart (``load`` -> ``Persisted``). Everything written is fsynced before ``save`` returns,
whatever the node's journal policy: a vote granted or an append acknowledged is a promise that it
is on disk, and the group's driver sends nothing of a ``Ready`` until ``save`` has returned.

**Files.** ``log`` is an append-only file of checksummed records in batches
(``transport.records``), one batch per ``save``, so a save is on disk whole or not at all. Each
record's body is a msgpack array:

* ``["E", index, term, kind, data]``: a log entry; it replaces the stored entry at its index and
  every one after it (how a conflicting tail is truncated);
* ``["H", term, vote, commit]``, ``["H", term, vote, commit, recovering]`` while the node
  recovers from an empty store (``cluster.raft.recovery``), or ``["H", term, vote, commit,
  recovering, recovered]`` once a recovery is over (``recovering`` then 0 unless another began):
  the hard state (the last one wins);
* ``["S", index, term]``: the snapshot at (index, term) is now the log's base: entries after it
  stay only if the entry at its index has its term, otherwise the whole log goes.

``snapshot`` holds the newest snapshot as one record (``["SNAP", index, term, voters, data]``),
replaced by writing a temporary file, fsyncing it and renaming it over the old one. Saving a
snapshot also compacts the log on disk: the log is rewritten the same way as the snapshot's
marker, the hard state and the entries after the snapshot, so the prefix it covers is gone. A crash
between the two renames leaves a newer snapshot beside an older log, which ``load`` reconciles by
the marker rule above.

**Damage.** A batch cut short at the end of ``log`` (a crash in the middle of a write) is dropped
with a log line and cut off the file; anything else that fails its checks -- in either file, or a
log that contradicts itself (entries out of order, a marker without its snapshot) -- refuses to
start with ``StorageError`` naming the file, as carrying on could forget a vote or a committed
entry.

**When the disk fails** (full, or an I/O error), ``save`` cuts the log back to its last whole batch
and raises ``StorageFailed``; nothing it was given counts as saved, and the caller must not send or
apply anything that depended on it. The caller tries the same ``save`` again later: once the device
has room and the write and fsync work, it succeeds. A lock file keeps the directory to one user.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import msgpack
import trio

from cluster.raft import Entry, EntryKind, HardState, Persist, Persisted, Snapshot
from transport.records import (
    COMMIT,
    DISK,
    BatchReader,
    CorruptRecord,
    Disk,
    frame,
    fsync_dir,
    lock_directory,
    write_all,
)

__all__ = ["RESUME_ROOM", "RaftStorage", "StorageError", "StorageFailed"]

log = logging.getLogger("pubmesh")

LOG_FILE = "log"
SNAPSHOT_FILE = "snapshot"
RESUME_ROOM = 1 << 20
"""Free bytes the device must have before a save is tried again after a failure."""
_READ_CHUNK = 1 << 20
_KINDS = {EntryKind.COMMAND: "c", EntryKind.NOOP: "n", EntryKind.CONFIG: "m"}
_KIND_OF = {code: kind for kind, code in _KINDS.items()}


class StorageError(Exception):
    """The group's storage cannot be opened: in use, unreadable, or damaged other than by a torn
    tail."""


class StorageFailed(Exception):
    """A save did not reach the disk (full, or an I/O error): nothing of it counts."""


def _pack(obj: list[Any]) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def _entry_record(entry: Entry) -> bytes:
    return frame(_pack(["E", entry.index, entry.term, _KINDS[entry.kind], entry.data]))


def _hard_record(hard: HardState) -> bytes:
    recovery = [hard.recovering, hard.recovered] if hard.recovered else [hard.recovering]
    recovery = recovery if any(recovery) else []
    return frame(_pack(["H", hard.term, hard.vote, hard.commit, *recovery]))


def _marker_record(snapshot: Snapshot) -> bytes:
    return frame(_pack(["S", snapshot.index, snapshot.term]))


def _snapshot_record(snapshot: Snapshot) -> bytes:
    voters = sorted(snapshot.voters)
    return frame(_pack(["SNAP", snapshot.index, snapshot.term, voters, snapshot.data])) + COMMIT


def _after_snapshot(base: tuple[int, int], entries: list[Entry], index: int, term: int) -> list[Entry]:
    """What is left of a log (``entries`` after ``base``, an (index, term)) once the snapshot at
    (``index``, ``term``) becomes its base: the entries after it if the log has that entry, else
    nothing."""
    if index == base[0]:
        matches = term == base[1]
    else:
        position = index - base[0] - 1
        matches = 0 <= position < len(entries) and entries[position].term == term
    return entries[index - base[0] :] if matches else []


class _Replay:
    """The log as ``load`` rebuilds it, record by record, checking that it makes sense."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hard = HardState()
        self.base: tuple[int, int] = (0, 0)
        self.entries: list[Entry] = []

    def damaged(self, offset: int, reason: str) -> StorageError:
        return StorageError(
            f"{self.path}: {reason} at offset {offset}: the file is damaged "
            "(repair or remove it to start)"
        )

    def record(self, offset: int, body: bytes) -> None:
        try:
            obj = msgpack.unpackb(body, raw=False)
            if not isinstance(obj, list) or not obj:
                raise ValueError("not a record")
            op = obj[0]
            if op == "E":
                _, index, term, kind, data = obj
                self._entry(offset, Entry(int(index), int(term), bytes(data), _KIND_OF[kind]))
            elif op == "H":
                _, term, vote, commit, *recovering = obj
                self.hard = HardState(
                    int(term), None if vote is None else str(vote), int(commit), *map(int, recovering)
                )
            elif op == "S":
                _, index, term = obj
                self.rebase(int(index), int(term))
            else:
                raise ValueError(f"unknown record {op!r}")
        except StorageError:
            raise
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as exc:
            raise self.damaged(offset, f"malformed record ({exc})") from None

    def _entry(self, offset: int, entry: Entry) -> None:
        first = self.base[0] + 1
        last = first + len(self.entries) - 1
        if not first <= entry.index <= last + 1:
            raise self.damaged(offset, f"entry {entry.index} out of order (log {first}..{last})")
        del self.entries[entry.index - first :]
        self.entries.append(entry)

    def rebase(self, index: int, term: int) -> None:
        """The snapshot at (index, term) became the log's base."""
        self.entries = _after_snapshot(self.base, self.entries, index, term)
        self.base = (index, term)


class RaftStorage:
    """One replica group's durable state in ``directory`` (created if missing).

    Args:
        directory: the group's own directory (under the node's ``store_dir``).
        disk: the system calls to write with (tests pass ones that fail on purpose).
    """

    def __init__(self, directory: str | Path, *, disk: Disk = DISK) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOG_FILE
        self.snapshot_path = self.directory / SNAPSHOT_FILE
        self.disk = disk
        self._fd = -1
        self._lock = -1
        self.size = 0
        """Bytes of whole batches in the log file."""
        self._torn = False
        """The log may hold bytes past ``size`` (cutting off a failed write failed too)."""
        self.failure: str | None = None
        """Why the last save failed (None: it did not)."""
        self.hard = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        """The stored log after the snapshot, as on disk (what a compaction rewrites)."""

    # -- starting ----------------------------------------------------------------------------

    def load(self) -> Persisted:
        """Open the directory and read back what was saved.

        Raises:
            StorageError: a file is damaged (other than a torn tail of the log), unreadable or in
                use.
        """
        try:
            try:
                self._lock = lock_directory(self.directory)
            except BlockingIOError:
                raise StorageError(f"{self.directory}: in use by another process") from None
            for leftover in self.directory.glob("*.tmp"):  # (a rewrite a crash interrupted)
                leftover.unlink()
            self.snapshot = self._read_snapshot() if self.snapshot_path.exists() else None
            replay = _Replay(self.path)
            if self.path.exists():
                self._replay(replay)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self.close()
            raise StorageError(f"{self.directory}: {exc.strerror or exc}") from exc
        except StorageError:
            self.close()
            raise
        snapshot_index = self.snapshot.index if self.snapshot is not None else 0
        if replay.base[0] > snapshot_index:
            self.close()
            raise StorageError(f"{self.path}: names a snapshot at {replay.base[0]} the directory lacks")
        if self.snapshot is not None and snapshot_index > replay.base[0]:
            replay.rebase(self.snapshot.index, self.snapshot.term)  # (saved just before a crash)
        self.size = os.fstat(self._fd).st_size
        self.hard, self.entries = replay.hard, replay.entries
        fresh = self.snapshot is None and not self.entries and self.hard == HardState()
        return Persisted(self.hard, self.snapshot, tuple(self.entries), fresh)

    def _read_snapshot(self) -> Snapshot:
        data = self.snapshot_path.read_bytes()
        reader = BatchReader()
        try:
            bodies = reader.feed(data)
        except CorruptRecord as exc:
            raise StorageError(f"{self.snapshot_path}: {exc}: the file is damaged") from None
        if len(bodies) != 1 or reader.pending:
            raise StorageError(f"{self.snapshot_path}: incomplete: the file is damaged")
        try:
            op, index, term, voters, blob = msgpack.unpackb(bodies[0][1], raw=False)
            if op != "SNAP":
                raise ValueError(op)
            return Snapshot(int(index), int(term), frozenset(map(str, voters)), bytes(blob))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise StorageError(f"{self.snapshot_path}: malformed ({exc}): the file is damaged") from None

    def _replay(self, replay: _Replay) -> None:
        reader = BatchReader()
        with self.path.open("rb") as file:
            while chunk := file.read(_READ_CHUNK):
                try:
                    bodies = reader.feed(chunk)
                except CorruptRecord as exc:
                    raise replay.damaged(exc.offset, exc.reason) from None
                for offset, body in bodies:
                    replay.record(offset, body)
        if reader.pending:
            log.warning(
                "%s: dropped a torn tail at offset %d (%d bytes): the last write before a crash, "
                "never acknowledged",
                self.path,
                reader.offset,
                reader.pending,
            )
            os.truncate(self.path, reader.offset)

    def close(self) -> None:
        for fd in (self._fd, self._lock):
            if fd >= 0:
                os.close(fd)
        self._fd = self._lock = -1

    # -- saving ------------------------------------------------------------------------------

    async def save(self, persist: Persist) -> None:
        """Make ``persist`` durable (snapshot, then entries, then hard state), fsynced.

        Raises:
            StorageFailed: it did not reach the disk; try the same save again later.
        """
        if not persist:
            return
        try:
            if self.failure is not None:
                self._check_room()
            if persist.snapshot is not None:
                await trio.to_thread.run_sync(self._compact, persist)
            else:
                await self._append(persist)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            if self.failure is None:
                log.error("Writing %s failed: %s: the group acknowledges nothing until it works",
                          self.directory, reason)  # fmt: skip
            self.failure = reason
            raise StorageFailed(reason) from exc
        if self.failure is not None:
            log.info("Writing %s works again", self.directory)
            self.failure = None

    def _check_room(self) -> None:
        if self._torn:
            self.disk.ftruncate(self._fd, self.size)
            self._torn = False
        if self.disk.free_bytes(self._fd) < RESUME_ROOM:
            raise OSError(28, os.strerror(28))

    async def _append(self, persist: Persist) -> None:
        batch = bytearray()
        for entry in persist.entries:
            batch += _entry_record(entry)
        if persist.hard_state is not None:
            batch += _hard_record(persist.hard_state)
        batch += COMMIT
        try:
            write_all(self.disk.write, self._fd, batch)
            await trio.to_thread.run_sync(self.disk.fsync, self._fd)
        except OSError:
            self._cut_back()
            raise
        self.size += len(batch)
        self._remember(persist)

    def _cut_back(self) -> None:
        try:
            self.disk.ftruncate(self._fd, self.size)
        except OSError as exc:
            log.error("Cutting %s back to %d bytes failed: %s", self.path, self.size, exc)
            self._torn = True

    def _remember(self, persist: Persist) -> None:
        """What is now on disk, mirrored (for the next compaction)."""
        snapshot = persist.snapshot
        if snapshot is not None:
            base = (self.snapshot.index, self.snapshot.term) if self.snapshot else (0, 0)
            self.entries = _after_snapshot(base, self.entries, snapshot.index, snapshot.term)
            self.snapshot = snapshot
        if persist.entries:
            first = persist.entries[0].index
            offset = self.snapshot.index if self.snapshot is not None else 0
            del self.entries[first - offset - 1 :]
            self.entries.extend(persist.entries)
        if persist.hard_state is not None:
            self.hard = persist.hard_state

    def _compact(self, persist: Persist) -> None:
        """Save a snapshot (in a worker thread): the snapshot file, then the log rewritten from
        it, each written aside, fsynced and renamed into place."""
        assert persist.snapshot is not None
        self._replace(self.snapshot_path, _snapshot_record(persist.snapshot))
        old = (self.hard, self.snapshot, list(self.entries))
        self._remember(persist)
        body = bytearray(_marker_record(persist.snapshot))
        for entry in self.entries:
            body += _entry_record(entry)
        body += _hard_record(self.hard) + COMMIT
        try:
            fd = self._replace(self.path, bytes(body), keep_open=True)
        except OSError:
            self.hard, self.snapshot, self.entries = old
            raise
        os.close(self._fd)
        self._fd = fd
        self.size = len(body)

    def _replace(self, path: Path, data: bytes, *, keep_open: bool = False) -> int:
        temporary = path.with_name(path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            write_all(self.disk.write, fd, data)
            self.disk.fsync(fd)
            os.replace(temporary, path)
            fsync_dir(self.directory)
        except OSError:
            os.close(fd)
            temporary.unlink(missing_ok=True)
            raise
        if keep_open:
            return fd
        os.close(fd)
        return -1
