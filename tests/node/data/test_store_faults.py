"""The journal under disk faults, injected through its ``Disk`` (short writes, a full device, I/O
errors from fsync): a batch is in the file whole or not at all, what was not written is taken back
and answered with the journal's error, nothing unwritten is served, writes are refused until the
file can be written again, and the file loads at every moment. (``test_store_tmpfs`` fills a real
device under a node process.)"""

from __future__ import annotations

import errno
import os
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from node.broker import Broker
from node.config.options import Config, StreamConfig
from node.data.capture import Captures
from node.data.store import FILE_NAME, Store, StoreError
from node.data.store.journal import Disk
from node.data.store.records import COMMIT, encode
from node.resp.executor import CommandExecutor
from tests.node.resp.test_resp_connection import Peer
from tests.support import until

pytestmark = pytest.mark.timeout(60)

MISCONF = b"-MISCONF Errors writing to the AOF file: "
FULL = MISCONF + os.strerror(errno.ENOSPC).encode() + b"\r\n"


class Faults:
    """A disk that works until told to fail: writes stop after ``room`` more bytes (a short
    write, then ENOSPC), fsync raises ``fsync_error`` while it is set, and free space is what
    ``room`` says."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.fsync_error: int | None = None
        self.fsyncs_left: int | None = None
        """Fsyncs that succeed before ``fsync_error`` applies (None: it applies at once)."""

    def write(self, fd: int, data: memoryview) -> int:
        if self.room is not None:
            if self.room == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = data[: self.room]
            self.room -= len(data)
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.fsync_error is not None:
            if not self.fsyncs_left:
                raise OSError(self.fsync_error, os.strerror(self.fsync_error))
            self.fsyncs_left -= 1
        os.fsync(fd)

    def free_bytes(self, fd: int) -> int:
        return 1 << 30 if self.room is None else self.room

    def disk(self) -> Disk:
        return Disk(write=self.write, fsync=self.fsync, free_bytes=self.free_bytes)


def _open(directory: Path, policy: str, faults: Faults | None = None) -> tuple[Broker, Store]:
    broker = Broker(Config())
    store = Store(
        directory,
        executor=partial(CommandExecutor, broker),
        appendfsync=policy,
        disk=(faults or Faults()).disk(),
    )
    store.load(broker.keyspaces)
    return broker, store


def _reloaded(directory: Path) -> list[bytes]:
    """The entries of stream ``s`` after a start on the file as it is now."""
    broker, store = _open(directory, "no")
    try:
        reply = Peer(broker).send("XRANGE", "s", "-", "+")
        return [line for line in reply.split(b"\r\n") if line.startswith(b"v")]
    finally:
        store.close()


def _on_disk(directory: Path) -> bytes:
    return (directory / FILE_NAME).read_bytes()


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_a_short_write_leaves_no_fragment_and_the_batch_is_taken_back(
    tmp_path: Path, policy: str
) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, policy, faults)
    writer, reader = Peer(broker), Peer(broker)
    assert writer.send("XADD", "s", "1-1", "f", "v1") == b"$3\r\n1-1\r\n"
    assert writer.send("XADD", "t", "1-1", "f", "v1") == b"$3\r\n1-1\r\n"
    assert writer.send("EXPIRE", "t", "1000") == b":1\r\n"
    before = _on_disk(tmp_path)
    faults.room = 10  # (part of the next batch fits)
    pipeline = b"".join(
        b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n%d-1\r\n$1\r\nf\r\n$2\r\nv%d\r\n" % (n, n) for n in (2, 3)
    )
    assert writer.raw(pipeline) == FULL * 2
    assert _on_disk(tmp_path) == before  # (the fragment was cut off again)
    assert reader.send("XLEN", "s") == b":1\r\n"  # (taken back: never served)
    assert reader.send("TTL", "t") in (b":1000\r\n", b":999\r\n")  # (rebuilt with its expiry)
    assert reader.send("TTL", "s") == b":-1\r\n"
    assert writer.send("XADD", "s", "4-1", "f", "v4") == FULL  # (refused: still failing)
    assert writer.send("PING") == b"+PONG\r\n"
    assert store.info()[6] == ("aof_last_write_status", "err")
    store.close()
    assert _reloaded(tmp_path) == [b"v1"]


def test_a_transaction_whose_commit_fails_is_answered_with_one_error(tmp_path: Path) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "always", faults)
    peer = Peer(broker)
    assert peer.send("MULTI") == b"+OK\r\n"
    assert peer.send("XADD", "s", "1-1", "f", "v1") == b"+QUEUED\r\n"
    assert peer.send("XADD", "s", "2-1", "f", "v2") == b"+QUEUED\r\n"
    faults.fsync_error = errno.EIO
    assert peer.send("EXEC") == MISCONF + b"Input/output error\r\n"
    assert peer.send("EXISTS", "s") == b":0\r\n"
    store.close()
    assert _reloaded(tmp_path) == []


def test_while_refusing_writes_a_transaction_with_a_write_is_discarded(tmp_path: Path) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "always", faults)
    peer = Peer(broker)
    faults.room = 0
    assert peer.send("XADD", "s", "1-1", "f", "v1") == FULL
    assert peer.send("MULTI") == b"+OK\r\n"
    assert peer.send("XLEN", "s") == b"+QUEUED\r\n"
    assert peer.send("XADD", "s", "2-1", "f", "v2") == FULL
    assert peer.send("EXEC") == (b"-EXECABORT Transaction discarded because of previous errors.\r\n")
    store.close()


def test_replies_before_the_first_write_of_a_failed_batch_stand(tmp_path: Path) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "always", faults)
    peer = Peer(broker)
    assert peer.send("XADD", "s", "1-1", "f", "v1") == b"$3\r\n1-1\r\n"
    faults.fsync_error = errno.EIO
    pipeline = [
        b"*2\r\n$4\r\nXLEN\r\n$1\r\ns\r\n",  # (reads what is durable: stands)
        b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n2-1\r\n$1\r\nf\r\n$2\r\nv2\r\n",
        b"*2\r\n$4\r\nXLEN\r\n$1\r\ns\r\n",  # (would read the write: the error instead)
        b"*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n",  # (not a key command: the journal commits first)
        b"*1\r\n$4\r\nPING\r\n",
    ]
    eio = MISCONF + b"Input/output error\r\n"
    assert peer.raw(b"".join(pipeline)) == b":1\r\n" + eio * 2 + b"+OK\r\n+PONG\r\n"
    assert peer.send("XADD", "s", "3-1", "f", "v3") == eio  # (in db 1, refused all the same)
    store.close()


def test_a_blocked_reader_is_not_handed_an_entry_that_was_not_written(tmp_path: Path) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "always", faults)
    writer, reader, group_reader = Peer(broker), Peer(broker), Peer(broker)
    assert writer.send("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == b"+OK\r\n"
    assert reader.send("XREAD", "BLOCK", "0", "STREAMS", "s", "$") == b""
    blocked = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">"]
    assert group_reader.send(*blocked) == b""
    faults.room = 0
    assert writer.send("XADD", "s", "1-1", "f", "lost") == FULL
    assert bytes(reader.conn.take_output()) == b""  # (still blocked, handed nothing)
    assert bytes(group_reader.conn.take_output()) == b""
    assert reader.conn.blocking.read is not None
    assert group_reader.conn.blocking.read is not None
    faults.room = None
    assert store._resume_writes()
    assert writer.send("XADD", "s", "2-1", "f", "kept") == b"$3\r\n2-1\r\n"
    assert b"kept" in bytes(reader.conn.take_output())
    assert b"kept" in bytes(group_reader.conn.take_output())
    store.close()
    broker, store = _open(tmp_path, "no")
    entries = Peer(broker).send("XRANGE", "s", "-", "+")
    assert b"kept" in entries
    assert b"lost" not in entries
    store.close()


def test_readers_a_write_woke_after_the_journal_failed_are_refused_not_rebuilt_for(
    tmp_path: Path,
) -> None:
    """The first reader's delivery cannot be written: it is taken back and the reader answered
    with the error; the readers after it are refused at once (a group read changes keys), so the
    keys are rebuilt once, not once per reader."""
    faults = Faults()
    broker, store = _open(tmp_path, "always", faults)
    writer = Peer(broker)
    readers = [Peer(broker) for _ in range(5)]
    assert writer.send("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == b"+OK\r\n"
    for n, reader in enumerate(readers):
        read = ["XREADGROUP", "GROUP", "g", f"c{n}", "COUNT", "1", "BLOCK", "0", "STREAMS", "s"]
        assert reader.send(*read, ">") == b""
    faults.fsync_error, faults.fsyncs_left = errno.EIO, 1  # (the XADD's fsync works)
    pipeline = b"".join(
        b"*5\r\n$4\r\nXADD\r\n$1\r\ns\r\n$3\r\n%d-1\r\n$1\r\nf\r\n$1\r\nv\r\n" % n for n in range(1, 6)
    )
    eio = MISCONF + b"Input/output error\r\n"
    assert writer.raw(pipeline) == b"$3\r\n1-1\r\n" + eio * 4  # (refused from the failure on)
    assert [bytes(reader.conn.take_output()) for reader in readers] == [eio] * 5
    assert store.discards == 1
    assert writer.send("XPENDING", "s", "g") == b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"
    store.close()


async def test_writes_resume_by_themselves_once_there_is_room(tmp_path: Path) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "everysec", faults)
    peer = Peer(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run)
        faults.room = 0
        assert peer.send("XADD", "s", "1-1", "f", "v1") == FULL
        await trio.sleep(0.3)  # (tries meanwhile fail: no room)
        assert peer.send("XADD", "s", "1-1", "f", "v1") == FULL
        assert store.refusal is not None
        faults.room = 4096  # (a little room is not enough: writes wait for more)
        await trio.sleep(0.3)
        assert store.refusal is not None
        faults.room = None
        await until(lambda: store.refusal is None)
        assert peer.send("XADD", "s", "1-1", "f", "v1") == b"$3\r\n1-1\r\n"
        nursery.cancel_scope.cancel()
    store.close()
    assert _reloaded(tmp_path) == [b"v1"]


async def test_a_failed_background_fsync_refuses_writes_then_rewrites_the_file(
    tmp_path: Path,
) -> None:
    faults = Faults()
    broker, store = _open(tmp_path, "everysec", faults)
    peer = Peer(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run)
        faults.fsync_error = errno.EIO
        assert peer.send("XADD", "s", "1-1", "f", "v1") == b"$3\r\n1-1\r\n"  # (everysec: written)
        await until(lambda: store.refusal is not None)
        assert peer.send("XADD", "s", "2-1", "f", "v2") == MISCONF + b"Input/output error\r\n"
        assert peer.send("XLEN", "s") == b":1\r\n"  # (acknowledged before: kept, and served)
        faults.fsync_error = None
        await until(lambda: store.refusal is None and store.rewrites == 1)
        assert peer.send("XADD", "s", "2-1", "f", "v2") == b"$3\r\n2-1\r\n"
        nursery.cancel_scope.cancel()
    store.close()
    assert _reloaded(tmp_path) == [b"v1", b"v2"]


def test_a_record_the_handlers_refuse_stops_the_start_naming_file_and_offset(
    tmp_path: Path,
) -> None:
    good = encode("$G", 0, [b"XADD", b"s", b"2-1", b"f", b"v"]) + COMMIT
    refused = encode("$G", 0, [b"XADD", b"s", b"1-1", b"f", b"v"]) + COMMIT  # (an ID going back)
    (tmp_path / FILE_NAME).write_bytes(good + refused)
    with pytest.raises(StoreError) as failed:
        _open(tmp_path, "no")
    where = f"{tmp_path / FILE_NAME} (batch ending at offset {len(good + refused)})"
    assert str(failed.value).startswith(f"{where}: XADD was refused: -ERR The ID specified")


def test_a_past_expiry_changed_later_replays_as_it_ended(tmp_path: Path) -> None:
    """A key whose expiry passed while the node ran was not removed if a later command took the
    expiry away first (PERSIST, a later time, a RENAME then PERSIST); replayed, the same."""
    broker, store = _open(tmp_path, "no")
    peer = Peer(broker)
    past = b"%d" % 1000  # (1970: long past when replayed)
    for key in (b"a", b"b", b"c", b"gone"):
        peer.send("XADD", key, "1-1", "f", "v")
    store.append("$G", 0, [b"PEXPIREAT", b"a", past])
    store.append("$G", 0, [b"PERSIST", b"a"])
    store.append("$G", 0, [b"PEXPIREAT", b"b", past])
    store.append("$G", 0, [b"PEXPIREAT", b"b", b"%d" % (2**50)])
    store.append("$G", 0, [b"PEXPIREAT", b"c", past])
    store.append("$G", 0, [b"RENAME", b"c", b"d"])
    store.append("$G", 0, [b"PERSIST", b"d"])
    store.append("$G", 0, [b"PEXPIREAT", b"gone", past])
    store.close()
    broker, store = _open(tmp_path, "no")
    peer = Peer(broker)
    assert peer.send("EXISTS", "a", "b", "c", "d", "gone") == b":3\r\n"
    assert peer.send("TTL", "a") == b":-1\r\n"
    assert peer.send("TTL", "d") == b":-1\r\n"
    store.close()


def test_a_publish_stands_when_the_entry_it_captured_is_taken_back(tmp_path: Path) -> None:
    """A PUBLISH reached its subscribers whatever the journal does: its reply stands, while the
    entry a capturing stream made of it is taken back (and its producer told, see test_capture)."""
    faults = Faults()
    streams = (StreamConfig("events", ("orders.>",)),)
    broker = Broker(Config(streams=streams))
    Captures(broker, streams).subscribe()
    store = Store(
        tmp_path, executor=partial(CommandExecutor, broker), appendfsync="always", disk=faults.disk()
    )
    store.load(broker.keyspaces)
    peer = Peer(broker)
    assert peer.send("PUBLISH", "orders.1", "kept") == b":1\r\n"  # (the stream counts)
    faults.room = 0
    assert peer.send("PUBLISH", "orders.2", "lost") == b":1\r\n"
    assert peer.send("XLEN", "events") == b":1\r\n"
    store.close()
