"""The append-only file that keeps a node's keys across restarts (``--store_dir``).

**Appending.** Every change arrives as a record (``append``) and waits in memory; ``commit``, which
runs after each batch of a client's requests and before any of their replies can leave, writes the
batch with one ``write``, ended by a commit record (``records.COMMIT``: a batch is replayed whole
or not at all). The fsync policy decides what "written" promises:

* ``always``: ``commit`` also fsyncs before it returns, so a client is told of nothing that a crash
  of the machine could take back. One fsync covers the whole batch (group commit).
* ``everysec``: a background task fsyncs once a second (in a worker thread, so the event loop does
  not wait on the disk); a process crash loses nothing written, a machine crash about a second.
* ``no``: the operating system writes back when it likes.

**When the disk fails** (full, or an I/O error), a batch is in the file whole or not at all: what a
short write left is cut off again before anything else is written (until that succeeds, nothing
is). The batch's changes are already in memory, so they are taken back -- the keys are rebuilt from
the file, which holds every change up to the failed batch, and take the place of the live ones --
and ``commit`` raises ``CommitFailed``: the requests are answered with an error, and readers never
see what was not kept. From then on the store refuses writes (``refusal``: redis-server's
``-MISCONF Errors writing to the AOF file`` wording) while reads, pub/sub and connections go on; a
background task tries again with backoff, and once a probe write and fsync succeed (with room left
on the device) writes are accepted again. An fsync that fails under ``everysec`` concerns changes
already acknowledged: writes are refused likewise until an fsync succeeds, and the file is then
rewritten from memory, so that what the kernel may have dropped is on disk again. Keys that expire
meanwhile are removed as usual; their DELs (``expire``) wait for the file to take them, since
losing one only means the key expires again after a restart.

**Starting.** ``load`` replays the file through the command handlers (``node.data.store.replay``,
with the ``Executor`` the store is given). A batch cut short at the very end -- a crash in the
middle of a write -- is dropped with a log line and cut off the file; damage anywhere else stops
the start with ``StoreError`` naming the file and the offset, as continuing would silently lose or
invent data.

**Rewriting.** The file grows with every change, so it is rewritten as the commands that build the
current state (``node.data.store.snapshot``) when it has grown by ``rewrite_percentage`` since the last
rewrite (and is at least ``rewrite_min_size``), or on BGREWRITEAOF. The snapshot must be of one
instant while clients keep writing; like redis-server, this forks: the child process holds the
keys as they were at the fork (the kernel copies pages only as the parent changes them), writes
them to a temporary file, fsyncs it and exits, while the parent serves on. Clients stall only for
the fork itself (``latest_fork_usec`` in INFO). A copy-on-write of the streams in process would
have to hook every mutation of every stream, group and pending entry; the fork gets the same
guarantee from the kernel. Records appended after the fork go to the old file as usual and are also
kept aside; once the child is done the parent appends them to the new file (in rounds while more
arrive, fsyncing in a worker thread), then, in one step no client can interleave with, appends the
last few, fsyncs, renames the new file over the old one and switches to it. The old file stays
whole and current until that rename, so a crash at any moment leaves one complete file, and every
change lands in the new file exactly once: before the fork it is in the snapshot, after it in what
was kept aside. (``aof_last_switch_usec`` in INFO is how long that last step held clients up.)

A lock file in the directory keeps the store to one process at a time.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from pathlib import Path

import trio

from node.config.options import FSYNC_POLICIES
from node.data.durability import CommitFailed
from node.data.keyspaces import Keyspaces
from node.data.store import snapshot
from node.data.store.records import COMMIT, CorruptRecord, encode
from node.data.store.replay import Executor, ReplayRefused, replay_file
from transport.records import DISK, Disk, fsync_dir, lock_directory, write_all

__all__ = ["FILE_NAME", "Disk", "Store", "StoreError"]

log = logging.getLogger("pubmesh")

FILE_NAME = "appendonly.log"
_WRITE_CHUNK = 1 << 20
_LAST_ROUND = 1 << 16
"""Records kept aside during a rewrite are copied in rounds until fewer bytes than this are left;
those are copied in the final step that clients wait for."""


_RESUME_ROOM = 1 << 20
"""Free bytes the device must have before writes are accepted again after a failure."""
_RETRY_FIRST, _RETRY_MOST = 0.05, 2.0
"""Seconds between tries to write again after a failure: the first, doubling up to the most."""


class StoreError(Exception):
    """The store cannot be opened: in use, unreadable, or damaged other than by a torn tail."""


class Store:
    """One node's append-only file: the keyspaces' journal, and its replay and rewriting.

    Args:
        directory: where the file lives (created if missing).
        executor: runs the file's records through the command handlers (``replay.Executor``).
        appendfsync: ``always``, ``everysec`` or ``no``.
        rewrite_percentage: rewrite when the file has grown by this many percent since the last
            rewrite (0: never automatically).
        rewrite_min_size: ... and is at least this many bytes.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        executor: Executor,
        appendfsync: str = "everysec",
        rewrite_percentage: int = 100,
        rewrite_min_size: int = 64 << 20,
        disk: Disk = DISK,
    ) -> None:
        if appendfsync not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {FSYNC_POLICIES}, not {appendfsync!r}")
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self._executor = executor
        self._temporary = self.directory / (FILE_NAME + ".rewrite")
        self._policy = appendfsync
        self.rewrite_percentage = rewrite_percentage
        self.rewrite_min_size = rewrite_min_size
        self._fd = -1
        self._lock = -1
        """The directory's lock file, held while the store is open: one process per store."""
        self.disk = disk
        self._buffer = bytearray()
        self._expiries = bytearray()
        """Expiry DELs waiting while the file cannot be written."""
        self._kept: bytearray | None = None
        """Batches committed since a rewrite forked (None when no rewrite runs)."""
        self._failure: str | None = None
        """Why writes are refused (None: they are not)."""
        self._torn = False
        """The file may hold bytes past ``size`` (cutting off a failed write failed too)."""
        self._resume = trio.Event()
        self._rewrite_after_resume = False
        self.discards = 0
        """Batches taken back since start because they could not be written."""
        self._unsynced = False
        self._unsynced_since = -1.0  # (monotonic time of the oldest write not yet fsynced)
        self._fd_lock = trio.Lock()
        self._wanted = trio.Event()
        self._keyspaces: Keyspaces | None = None
        self.size = 0
        """Bytes in the file."""
        self.base_size = 0
        """Bytes in the file after the last rewrite (or at start)."""
        self.rewriting = False
        self.rewrites = 0
        self.last_rewrite_status = "ok"
        self.last_rewrite_seconds = -1
        self._rewrite_started = 0.0
        self.last_fork_usec = 0
        self.last_switch_usec = 0
        self.last_write_status = "ok"
        self.load_seconds = 0.0
        self.last_save = 0
        """When SAVE last made every change durable (Unix seconds; 0: never)."""

    @property
    def appendfsync(self) -> str:
        return self._policy

    @appendfsync.setter
    def appendfsync(self, policy: str) -> None:
        """A new policy (CONFIG SET), from the next commit on: ``always`` then fsyncs what the
        earlier ones left unsynced too."""
        if policy not in FSYNC_POLICIES:
            raise ValueError(f"appendfsync must be one of {FSYNC_POLICIES}, not {policy!r}")
        self._policy = policy

    # -- starting --------------------------------------------------------------------------------

    def load(self, keyspaces: Keyspaces) -> int:
        """Replay the file into ``keyspaces`` (the node's keys) and become their journal; return
        the records replayed.

        Raises:
            StoreError: the file is damaged (other than a torn tail), unreadable or in use.
        """
        started = time.monotonic()
        try:
            try:
                self._lock = lock_directory(self.directory)
            except BlockingIOError:
                raise StoreError(f"{self.directory}: in use by another process") from None
            self._temporary.unlink(missing_ok=True)  # (a rewrite the last run did not finish)
            replayed = self._replay(keyspaces) if self.path.exists() else 0
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            self._unlock()
            raise StoreError(f"{self.path}: {exc.strerror or exc}") from exc
        except StoreError:
            self._unlock()
            raise
        self.size = self.base_size = os.fstat(self._fd).st_size
        self._keyspaces = keyspaces
        keyspaces.journal = self
        keyspaces.store = self
        self.load_seconds = time.monotonic() - started
        log.info(
            "Loaded %d records from %s (%d bytes) in %.3f s",
            replayed,
            self.path,
            self.size,
            self.load_seconds,
        )
        return replayed

    def _replay(self, keyspaces: Keyspaces) -> int:
        try:
            replayed = replay_file(self.path, keyspaces, self._executor)
        except CorruptRecord as exc:
            raise StoreError(
                f"{self.path}: {exc.reason} at offset {exc.offset}: the file is damaged "
                "(repair or remove it to start)"
            ) from exc
        except ReplayRefused as exc:
            raise StoreError(f"{exc}: the file is damaged (repair or remove it to start)") from exc
        if replayed.torn:
            log.warning(
                "%s: dropped a torn tail at offset %d (%d bytes): the last writes before a crash, "
                "never acknowledged",
                self.path,
                replayed.end,
                replayed.torn,
            )
            os.truncate(self.path, replayed.end)
        return replayed.records

    # -- the journal -----------------------------------------------------------------------------

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        self._buffer += encode(account, db, args)

    def expire(self, account: str, db: int, key: bytes) -> None:
        record = encode(account, db, [b"DEL", key])
        if self._failure is None:
            self._buffer += record
        else:
            self._expiries += record

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def refusal(self) -> str | None:
        return self._failure

    def commit(self) -> None:
        """Write what was appended; with ``always``, fsync it before returning.

        Raises:
            CommitFailed: the write or fsync failed, or writes are refused: the batch's changes
                were taken back, and the store refuses writes until it can write again.
        """
        if not self._buffer:
            return
        if self._failure is not None:
            self._take_back(self._failure)
            raise CommitFailed(self._failure)
        self._buffer += COMMIT
        try:
            write_all(self.disk.write, self._fd, self._buffer)
            if self._policy == "always":
                self.disk.fsync(self._fd)
        except OSError as exc:
            self._suspend(exc)
            self._cut_back()
            self._take_back(f"writing {self.path} failed: {exc}")
            raise CommitFailed(self._failure) from exc
        self.last_write_status = "ok"
        self.size += len(self._buffer)
        if self._kept is not None:
            self._kept += self._buffer
        self._buffer.clear()
        self._unsynced = self._policy != "always"
        if self._unsynced and self._unsynced_since < 0:
            self._unsynced_since = time.monotonic()

    def save(self) -> None:
        """Make every change made so far durable at once (SAVE): write what is buffered and
        fsync the file, whatever the fsync policy.

        Raises:
            CommitFailed: as ``commit`` raises it.
            OSError: the fsync failed: writes are refused until the file can be written again.
        """
        self.commit()
        try:
            self.disk.fsync(self._fd)
        except OSError as exc:
            self._suspend(exc)
            self._rewrite_after_resume = True
            raise
        self._unsynced = False
        self._unsynced_since = -1.0
        self.last_save = int(time.time())

    def _suspend(self, exc: OSError) -> None:
        """Refuse writes from now on, until ``_resume_writes`` succeeds."""
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if self._failure is None:
            log.error("Writing %s failed: %s: writes are refused until it works", self.path, exc)
        self._failure = f"-MISCONF Errors writing to the AOF file: {reason}"
        self.last_write_status = "err"
        self._resume.set()

    def _cut_back(self) -> None:
        """Cut the file back to its last whole batch (what a failed write left goes)."""
        try:
            self.disk.ftruncate(self._fd, self.size)
        except OSError as exc:
            log.error("Cutting %s back to %d bytes failed: %s", self.path, self.size, exc)
            self._torn = True
        else:
            self._torn = False

    def _take_back(self, why: str) -> None:
        """Drop the buffered batch and put the keys back as the file has them."""
        self._buffer = bytearray()
        self.discards += 1
        assert self._keyspaces is not None
        scratch = Keyspaces()
        started = time.perf_counter()
        try:
            replay_file(self.path, scratch, self._executor, limit=self.size)
        except Exception:  # pragma: no cover (the file, written by this process, cannot be read)
            log.critical("%s: changes could not be taken back (%s): stopping", self.path, why)
            logging.shutdown()
            os._exit(1)
        self._keyspaces.take_keys(scratch)
        log.warning(
            "%s: a batch of changes was not written (%s); keys rebuilt from the file in %.3f s",
            self.path,
            why,
            time.perf_counter() - started,
        )

    async def _resumes(self) -> None:
        """After a failure, try to write again with backoff until it works."""
        while True:
            await self._resume.wait()
            pause = _RETRY_FIRST
            while not self._resume_writes():
                await trio.sleep(pause)
                pause = min(pause * 2, _RETRY_MOST)
            self._resume = trio.Event()

    def _resume_writes(self) -> bool:
        """One try: cut off what a failed write left, check for room, write what waited (at least
        an empty batch) and fsync it. Whether writes are accepted again."""
        disk = self.disk
        try:
            if self._torn:
                disk.ftruncate(self._fd, self.size)
                self._torn = False
            if disk.free_bytes(self._fd) < _RESUME_ROOM:
                return False
            batch = self._expiries + COMMIT
            write_all(disk.write, self._fd, batch)
            disk.fsync(self._fd)
        except OSError:
            self._cut_back()
            return False
        self.size += len(batch)
        if self._kept is not None:
            self._kept += batch
        self._expiries = bytearray()
        self._unsynced = False
        self._unsynced_since = -1.0
        self._failure = None
        self.last_write_status = "ok"
        if self._rewrite_after_resume:
            self._rewrite_after_resume = False
            self.rewrite()
        log.info("Writing %s works again: writes are accepted", self.path)
        return True

    def close(self) -> None:
        """Write and fsync what is left, and close the file (the node is stopping)."""
        if self._fd < 0:
            return
        try:
            with contextlib.suppress(CommitFailed):
                self.commit()
            if self._failure is None:
                os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
            self._unlock()
            if self._keyspaces is not None:
                self._keyspaces.journal = None

    def _unlock(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    # -- background work -------------------------------------------------------------------------

    async def run(self) -> None:
        """The fsync clock (``everysec``) and the rewrites; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._rewrites)
            nursery.start_soon(self._resumes)
            while True:
                await trio.sleep(1.0)
                with contextlib.suppress(CommitFailed):  # (logged; taken back)
                    self.commit()  # (changes no client waits on: expiries found by the sweep)
                if self._policy == "everysec" and self._unsynced:
                    await self._fsync()
                if self._due():
                    self._wanted.set()

    async def _fsync(self) -> None:
        async with self._fd_lock:
            self._unsynced = False
            since, self._unsynced_since = self._unsynced_since, -1.0
            try:
                await trio.to_thread.run_sync(self.disk.fsync, self._fd)
            except OSError as exc:
                log.error("fsync of %s failed: %s", self.path, exc)
                self._suspend(exc)
                self._rewrite_after_resume = True
                self._unsynced = True
                if self._unsynced_since < 0 or since < self._unsynced_since:
                    self._unsynced_since = since

    @property
    def size_bytes(self) -> int:
        """The log's size on disk, in bytes."""
        return self.size

    @property
    def fsync_lag_seconds(self) -> float:
        """Seconds since the oldest write not yet fsynced (``everysec``); 0 when all is, with
        ``always``, and with ``no``, where the system decides."""
        if self._policy != "everysec" or self._unsynced_since < 0:
            return 0.0
        return time.monotonic() - self._unsynced_since

    def _due(self) -> bool:
        if self.rewriting or not self.rewrite_percentage or self.size < self.rewrite_min_size:
            return False
        if self.last_rewrite_status == "err" and time.monotonic() < self._rewrite_started + 60:
            return False  # (as redis-server, not again at once after a failure)
        return self.size * 100 >= self.base_size * (100 + self.rewrite_percentage)

    def rewrite(self) -> bool:
        if self.rewriting or self._wanted.is_set():
            return False
        self._wanted.set()
        return True

    async def _rewrites(self) -> None:
        while True:
            await self._wanted.wait()
            self.rewriting = True
            self._rewrite_started = time.monotonic()
            try:
                await self._rewrite()
            except Exception as exc:  # (a failed rewrite leaves the old file: the node goes on)
                log.error(
                    "Rewriting %s failed: %s", self.path, exc, exc_info=not isinstance(exc, OSError)
                )
                self.last_rewrite_status = "err"
            else:
                self.last_rewrite_status = "ok"
                self.rewrites += 1
            finally:
                self.rewriting = False
                self._kept = None
                self._wanted = trio.Event()
                self.last_rewrite_seconds = int(time.monotonic() - self._rewrite_started)
                self._temporary.unlink(missing_ok=True)

    async def _rewrite(self) -> None:
        assert self._keyspaces is not None
        self.commit()  # (what was appended before the fork is in the snapshot: it goes no further)
        ready, done = os.pipe()
        parent = os.getpid()
        forked = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child: coverage does not follow it)
            _child(self._keyspaces, self._temporary, done, parent=parent)
        self.last_fork_usec = int((time.perf_counter() - forked) * 1e6)
        self._kept = bytearray()
        os.close(done)
        try:
            said = b""
            while chunk := await _read(ready):  # (to the end: the child has exited by then, and
                said += chunk  # collecting it does not wait while its memory is torn down)
            finished = said == b"\x01"
        except BaseException:
            os.kill(pid, signal.SIGKILL)
            raise
        finally:
            os.close(ready)
            _reap(pid)
        if not finished:
            raise RewriteFailed("the rewriting process failed")
        fd = os.open(self._temporary, os.O_WRONLY | os.O_APPEND)
        try:
            while self._kept is not None and len(self._kept) > _LAST_ROUND:
                kept, self._kept = self._kept, bytearray()
                write_all(self.disk.write, fd, kept)
                await trio.to_thread.run_sync(self.disk.fsync, fd)
            async with self._fd_lock:  # (not while the everysec fsync uses the old file)
                switching = time.perf_counter()
                old = self._switch(fd)
                self.last_switch_usec = int((time.perf_counter() - switching) * 1e6)
        except BaseException:
            os.close(fd)
            raise
        # Closing the replaced file frees its blocks, which can take a while for a large one.
        await trio.to_thread.run_sync(os.close, old)
        log.info(
            "Rewrote %s: %d bytes in %.1f s (fork %d us, switch %d us)",
            self.path,
            self.size,
            time.monotonic() - self._rewrite_started,
            self.last_fork_usec,
            self.last_switch_usec,
        )

    def _switch(self, fd: int) -> int:
        """The last step of a rewrite, in one go: the batches kept aside since the last round go
        to the new file, which replaces the old one. Buffered records (appended since the last
        commit) go to the new file only, as a batch of their own: they are whole units (a
        client's batch is appended and committed without a pause), so they may be committed
        here. Returns the old file's descriptor, to be closed."""
        assert self._kept is not None
        if self._buffer:
            self._kept += self._buffer + COMMIT
        write_all(self.disk.write, fd, self._kept)
        self.disk.fsync(fd)
        os.replace(self._temporary, self.path)
        fsync_dir(self.directory)
        old, self._fd = self._fd, fd
        self._buffer.clear()
        self._kept = None
        self._unsynced = False
        self.size = self.base_size = os.fstat(fd).st_size
        return old

    # -- INFO --------------------------------------------------------------------------------------

    def info(self) -> list[tuple[str, int | str]]:
        current = int(time.monotonic() - self._rewrite_started) if self.rewriting else -1
        return [
            ("aof_rewrite_in_progress", int(self.rewriting)),
            ("aof_rewrite_scheduled", int(self._wanted.is_set() and not self.rewriting)),
            ("aof_last_rewrite_time_sec", self.last_rewrite_seconds),
            ("aof_current_rewrite_time_sec", current),
            ("aof_last_bgrewrite_status", self.last_rewrite_status),
            ("aof_rewrites", self.rewrites),
            ("aof_last_write_status", self.last_write_status),
            ("aof_current_size", self.size),
            ("aof_base_size", self.base_size),
            ("aof_buffer_length", len(self._buffer)),
            ("aof_fsync_policy", self._policy),
            ("aof_load_time_sec", f"{self.load_seconds:.3f}"),
            ("latest_fork_usec", self.last_fork_usec),
            ("aof_last_switch_usec", self.last_switch_usec),
        ]


async def _read(fd: int) -> bytes:
    await trio.lowlevel.wait_readable(fd)
    return os.read(fd, 16)


def _reap(pid: int) -> None:
    """Collect the child, which has closed its end of the pipe or been killed: it is exiting."""
    os.waitpid(pid, 0)


class RewriteFailed(Exception):
    """The rewriting process did not finish its file."""


def _child(keyspaces: Keyspaces, path: Path, done: int, *, parent: int) -> None:  # pragma: no cover
    """The forked process: write the snapshot, fsync it, say so, and exit (never returning into
    the parent's event loop).

    It first closes every descriptor it inherited but ``done`` and the standard streams: the
    listening sockets and client connections (a restart after the parent died must find its ports
    free, and no client may reach a process that will never serve it), the store's lock (a
    restart need not wait for this process) and the event loop's own. It dies with the parent."""
    status = 1
    try:
        _die_with_parent(parent)
        signal.set_wakeup_fd(-1)  # (signals must not wake the parent's event loop)
        os.closerange(3, done)
        os.closerange(done + 1, os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.nice(10)  # (the parent, serving clients, comes first for the CPU)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for chunk in snapshot.chunks(keyspaces, _WRITE_CHUNK):
            write_all(os.write, fd, chunk)
        os.fsync(fd)
        os.close(fd)
        os.write(done, b"\x01")
        status = 0
    finally:
        os._exit(status)


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:  # pragma: no cover (runs in the child)
    """Have the kernel kill this process when its parent dies (Linux), and exit if it already
    has: a snapshot nobody will take is not worth the disk it fills."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
