"""Blocked readers and watchers of ``node.data.keyspace``: who is woken by a write, in what order, and
who is not even looked at."""

from __future__ import annotations

import pytest

from node.data.keyspace import Database
from node.data.keyspaces import Keyspaces
from node.data.streams import Stream
from node.data.streams.ids import split_id

pytestmark = pytest.mark.timeout(10)


class Level:
    """A condition met once the key's value holds at least ``need`` entries; counts its checks."""

    checks = 0

    def __init__(self, need: int) -> None:
        self.need = need

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Level) and other.need == self.need

    def __hash__(self) -> int:
        return hash(self.need)

    def met(self, db: Database, key: bytes) -> bool:
        Level.checks += 1
        stream = db.keys.get(key)
        return isinstance(stream, Stream) and stream.length >= self.need


class Reader:
    """A waiter that records its wake-ups and, like a blocked read, may act when woken."""

    def __init__(self, name: str, woken: list[str], then: object = None) -> None:
        self.name = name
        self.woken = woken
        self.then = then

    def wake(self) -> None:
        self.woken.append(self.name)
        if callable(self.then):
            self.then()


def add(db: Database, key: bytes, n: int = 1) -> None:
    stream = db.stream(key, 0)
    if stream is None:
        stream = Stream()
        db.put(key, stream)
    for _ in range(n):
        stream.add(split_id(stream.last_id + 1), [b"f", b"v"])
    db.touch(key)


@pytest.fixture
def db() -> Database:
    return Keyspaces().database("$G", 0)


def test_waiters_are_served_after_the_write_in_the_order_they_blocked(db: Database) -> None:
    woken: list[str] = []
    for name, need in [("a", 1), ("b", 2), ("c", 1), ("d", 2), ("e", 3)]:
        db.block(b"k", Reader(name, woken), Level(need))
    add(db, b"k", 2)
    assert woken == []  # (not inside the write)
    db.keyspaces.serve_ready()
    assert woken == ["a", "b", "c", "d"]
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["a", "b", "c", "d", "e"]


def test_a_queue_whose_first_waiter_cannot_be_served_is_not_looked_at_further(db: Database) -> None:
    woken: list[str] = []
    for i in range(1000):
        db.block(b"k", Reader(f"r{i}", woken), Level(5))
    add(db, b"k")
    Level.checks = 0
    db.keyspaces.serve_ready()
    assert woken == []
    assert Level.checks == 1


def test_a_waiter_left_blocked_keeps_its_place(db: Database) -> None:
    woken: list[str] = []
    first = Reader("first", woken)
    db.block(b"k", first, Level(2))
    db.block(b"k", Reader("second", woken), Level(1))
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["second"]
    db.block(b"k", Reader("third", woken), Level(2))
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["second", "first", "third"]


def test_a_waiter_that_blocks_while_others_are_served_waits_for_the_next_write(db: Database) -> None:
    woken: list[str] = []
    again = Reader("again", woken)
    db.block(b"k", Reader("a", woken, lambda: db.block(b"k", again, Level(1))), Level(1))
    db.block(b"k", Reader("b", woken), Level(1))
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["a", "b"]
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["a", "b", "again"]


def test_a_waiter_that_leaves_while_others_are_served_is_not_woken(db: Database) -> None:
    woken: list[str] = []
    gone = Reader("gone", woken)
    db.block(b"k", Reader("a", woken, lambda: db.unblock(b"k", gone)), Level(1))
    db.block(b"k", gone, Level(1))
    db.block(b"k", Reader("c", woken), Level(1))
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["a", "c"]


def test_a_write_by_a_woken_waiter_serves_others_in_the_same_round(db: Database) -> None:
    woken: list[str] = []
    db.block(b"k", Reader("a", woken, lambda: add(db, b"j")), Level(1))
    db.block(b"j", Reader("b", woken), Level(1))
    add(db, b"k")
    db.keyspaces.serve_ready()
    assert woken == ["a", "b"]
    assert not db.keyspaces.ready


def test_a_waiter_on_two_keys_is_woken_once(db: Database) -> None:
    woken: list[str] = []

    def leave() -> None:  # (as a woken connection leaves every key it waited on)
        db.unblock(b"j", both)

    both = Reader("both", woken, leave)
    db.block(b"k", both, Level(1))
    db.block(b"j", both, Level(1))
    add(db, b"k")
    add(db, b"j")
    db.keyspaces.serve_ready()
    assert woken == ["both"]


def test_deleting_the_key_wakes_those_whose_condition_says_so(db: Database) -> None:
    woken: list[str] = []
    add(db, b"k")
    db.block(b"k", Reader("any", woken))  # (no condition: any write)
    db.block(b"k", Reader("level", woken), Level(1))
    db.delete(b"k")
    db.keyspaces.serve_ready()
    assert woken == ["any"]


def test_watchers_are_spoiled_by_every_write(db: Database) -> None:
    class Watcher:
        dirty = False

    watcher = Watcher()
    db.watch(b"k", watcher)
    db.block(b"k", Reader("r", []), Level(9))
    add(db, b"k")
    assert watcher.dirty
