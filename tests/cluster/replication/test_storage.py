"""A replica group's storage: what is saved comes back after a restart, truncation and compaction
hold on disk, a torn tail is dropped, other damage refuses to start, and a failing disk makes a
save fail (nothing counts) until it works again."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import shutil
from pathlib import Path

import pytest

from cluster.raft import (
    AddVoter,
    ChangeEntry,
    Entry,
    EntryKind,
    HardState,
    Persist,
    Persisted,
    Raft,
    RaftConfig,
    Snapshot,
)
from cluster.replication.storage import LOG_FILE, SNAPSHOT_FILE, RaftStorage, StorageError, StorageFailed
from tests.node.data.test_store_full_disk import tmpfs
from transport.records import Disk

VOTERS = frozenset({"a", "b", "c"})


def entries(first: int, last: int, term: int) -> tuple[Entry, ...]:
    return tuple(Entry(i, term, b"e%d" % i) for i in range(first, last + 1))


def reopen(path: Path) -> Persisted:
    storage = RaftStorage(path)
    try:
        return storage.load()
    finally:
        storage.close()


async def test_a_save_survives_a_crash_before_anything_was_sent(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    assert storage.load() == Persisted(HardState(), None, (), fresh=True)
    hard = HardState(term=3, vote="b", commit=0)
    await storage.save(Persist(hard_state=hard, entries=entries(1, 3, 2)))
    # The process dies here, before the vote's message leaves: the disk as it is now.
    assert crash_copy(tmp_path) == Persisted(hard, None, entries(1, 3, 2))
    storage.close()


async def test_a_store_is_fresh_until_something_is_saved_and_a_recovery_survives_restarts(
    tmp_path: Path,
) -> None:
    storage = RaftStorage(tmp_path)
    assert storage.load().fresh
    storage.close()
    assert reopen(tmp_path).fresh, "an empty log file is nothing stored"
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(hard_state=HardState(recovering=5)))
    storage.close()
    assert reopen(tmp_path) == Persisted(HardState(recovering=5), None, ())
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(hard_state=HardState(term=2, vote="a")))
    storage.close()
    assert reopen(tmp_path).hard_state == HardState(term=2, vote="a"), "the recovery ended"
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(hard_state=HardState(term=2, vote="a", recovered=5)))
    storage.close()
    assert reopen(tmp_path).hard_state == HardState(term=2, vote="a", recovered=5)


async def test_a_conflicting_tail_is_truncated_on_disk(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=(*entries(1, 5, 1), Entry(6, 1, kind=EntryKind.NOOP))))
    await storage.save(Persist(entries=entries(4, 4, 2), hard_state=HardState(2, None, 3)))
    storage.close()
    loaded = reopen(tmp_path)
    assert loaded.entries == entries(1, 3, 1) + entries(4, 4, 2)
    assert loaded.hard_state == HardState(2, None, 3)


async def test_a_membership_change_survives_a_restart(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    change = ChangeEntry(AddVoter("d"), VOTERS | {"d"}).encode()
    await storage.save(Persist(entries=(*entries(1, 2, 1), Entry(3, 1, change, EntryKind.CONFIG))))
    storage.close()
    loaded = reopen(tmp_path)
    assert loaded.entries[-1] == Entry(3, 1, change, EntryKind.CONFIG)
    config = RaftConfig(id="a", voters=VOTERS, rng=random.Random(0))
    assert Raft(config, loaded).voters == VOTERS | {"d"}


async def test_compaction_drops_the_prefix_on_disk_and_across_restarts(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=entries(1, 10, 1), hard_state=HardState(1, "a", 8)))
    size = (tmp_path / LOG_FILE).stat().st_size
    snapshot = Snapshot(8, 1, VOTERS, b"state at 8")
    await storage.save(Persist(snapshot=snapshot))
    assert (tmp_path / LOG_FILE).stat().st_size < size
    await storage.save(Persist(entries=entries(11, 12, 1)))
    storage.close()
    loaded = reopen(tmp_path)
    assert loaded.snapshot == snapshot
    assert loaded.entries == entries(9, 12, 1)
    assert loaded.hard_state == HardState(1, "a", 8)


async def test_an_installed_snapshot_replaces_a_log_that_does_not_match(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=entries(1, 6, 1)))
    snapshot = Snapshot(20, 4, VOTERS, b"leader's state")
    await storage.save(Persist(snapshot=snapshot, hard_state=HardState(4, None, 20)))
    await storage.save(Persist(entries=entries(21, 22, 4)))
    storage.close()
    assert reopen(tmp_path) == Persisted(HardState(4, None, 20), snapshot, entries(21, 22, 4))


async def test_a_crash_between_the_snapshot_and_the_log_rewrite_is_reconciled(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=entries(1, 10, 1), hard_state=HardState(1, None, 10)))
    storage.close()
    log_before = (tmp_path / LOG_FILE).read_bytes()
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(snapshot=Snapshot(7, 1, VOTERS, b"s")))
    storage.close()
    (tmp_path / LOG_FILE).write_bytes(log_before)  # (as if the rewrite never happened)
    loaded = reopen(tmp_path)
    assert loaded.snapshot == Snapshot(7, 1, VOTERS, b"s")
    assert loaded.entries == entries(8, 10, 1)


async def test_a_torn_tail_is_cut_off_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=entries(1, 3, 1)))
    whole = (tmp_path / LOG_FILE).stat().st_size
    await storage.save(Persist(entries=entries(4, 6, 1)))
    storage.close()
    path = tmp_path / LOG_FILE
    for cut in (whole + 1, whole + 13, path.stat().st_size - 1):
        os.truncate(path, cut)
        with caplog.at_level(logging.WARNING, logger="pubmesh"):
            assert reopen(tmp_path).entries == entries(1, 3, 1)
        assert "torn tail" in caplog.text
        assert path.stat().st_size == whole
        caplog.clear()
        storage = RaftStorage(tmp_path)
        storage.load()
        await storage.save(Persist(entries=entries(4, 6, 1)))
        storage.close()


@pytest.mark.parametrize("where", ["middle", "snapshot", "snapshot-truncated"])
async def test_damage_elsewhere_refuses_to_start(tmp_path: Path, where: str) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    await storage.save(Persist(entries=entries(1, 5, 1)))
    await storage.save(Persist(snapshot=Snapshot(3, 1, VOTERS, b"snapshot data")))
    await storage.save(Persist(entries=entries(6, 8, 1)))
    storage.close()
    path = tmp_path / (LOG_FILE if where == "middle" else SNAPSHOT_FILE)
    data = bytearray(path.read_bytes())
    if where == "snapshot-truncated":
        del data[-5:]
    else:
        data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="damaged"):
        reopen(tmp_path)


async def test_the_directory_is_one_users(tmp_path: Path) -> None:
    storage = RaftStorage(tmp_path)
    storage.load()
    with pytest.raises(StorageError, match="in use"):
        reopen(tmp_path)
    storage.close()


class FailingDisk:
    """Writes that fail (ENOSPC) while ``full``, and a device with no room meanwhile."""

    def __init__(self) -> None:
        self.full = False

    def write(self, fd: int, data: memoryview) -> int:
        if self.full:
            os.write(fd, data[: len(data) // 2])  # (a short write, then the error)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)

    def free_bytes(self, fd: int) -> int:
        return 0 if self.full else 1 << 30

    def disk(self) -> Disk:
        return Disk(write=self.write, free_bytes=self.free_bytes)


async def test_a_full_disk_fails_the_save_until_there_is_room(tmp_path: Path) -> None:
    failing = FailingDisk()
    storage = RaftStorage(tmp_path, disk=failing.disk())
    storage.load()
    await storage.save(Persist(entries=entries(1, 2, 1)))
    failing.full = True
    with pytest.raises(StorageFailed):
        await storage.save(Persist(entries=entries(3, 4, 1), hard_state=HardState(1, "a", 2)))
    assert failure(storage) is not None
    with pytest.raises(StorageFailed):  # (no room yet: not even tried)
        await storage.save(Persist(entries=entries(3, 4, 1), hard_state=HardState(1, "a", 2)))
    # Nothing of the failed saves is on disk: the half-written batch was cut off.
    assert crash_copy(tmp_path) == Persisted(HardState(), None, entries(1, 2, 1))
    failing.full = False
    await storage.save(Persist(entries=entries(3, 4, 1), hard_state=HardState(1, "a", 2)))
    assert failure(storage) is None
    storage.close()
    assert reopen(tmp_path) == Persisted(HardState(1, "a", 2), None, entries(1, 4, 1))


def failure(storage: RaftStorage) -> str | None:
    return storage.failure


def crash_copy(path: Path) -> Persisted:
    """What a restart would find if the process died now (read from a copy of the directory)."""
    copy = path.parent / (path.name + "-crashed")
    shutil.copytree(path, copy)
    try:
        return reopen(copy)
    finally:
        shutil.rmtree(copy)


def fill(directory: Path) -> Path:
    """Take every byte left on the device with one file (unbuffered, to the last block)."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return path


async def test_a_real_full_device_fails_saves_until_room_is_made() -> None:
    """On a small tmpfs filled to the last byte: saves fail and nothing half-written stays; once a
    file is removed, the same save succeeds, and a restart finds exactly what was saved."""
    with tmpfs(4) as device:
        storage = RaftStorage(device / "g")
        storage.load()
        await storage.save(Persist(entries=entries(1, 2, 1), hard_state=HardState(1, "a", 0)))
        filler = fill(device)
        big = tuple(Entry(i, 1, b"x" * 65536) for i in range(3, 40))
        with pytest.raises(StorageFailed):
            await storage.save(Persist(entries=big))
        storage.close()  # (closing writes nothing: what a restart finds is on the device now)
        assert reopen(device / "g") == Persisted(HardState(1, "a", 0), None, entries(1, 2, 1))
        storage = RaftStorage(device / "g")
        storage.load()
        with pytest.raises(StorageFailed):
            await storage.save(Persist(entries=big))
        filler.unlink()
        await storage.save(Persist(entries=big))
        storage.close()
        assert reopen(device / "g").entries == (*entries(1, 2, 1), *big)
