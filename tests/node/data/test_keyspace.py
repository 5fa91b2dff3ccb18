"""Keys with expiry times (``node.data.keyspace``): reading, writing and sweeping agree with a plain
dictionary of what should be there, and a sweep finds expired keys among many that are not."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.data.keyspace import Database
from node.data.keyspaces import SWEEP_SAMPLE, Keyspaces
from node.data.streams import Stream

pytestmark = pytest.mark.timeout(60)

NOW = 1_000


class Recorder:
    """A journal that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, list[bytes]]] = []
        self.size_bytes = 0
        self.fsync_lag_seconds = 0.0
        self.buffered = 0
        self.refusal: str | None = None
        self.discards = 0

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        self.records.append((account, db, args))

    def expire(self, account: str, db: int, key: bytes) -> None:
        self.records.append((account, db, [b"DEL", key]))

    def commit(self) -> None:
        pass


def fill(db: Database, names: range, when: int | None, prefix: bytes = b"k") -> None:
    for i in names:
        key = prefix + b"%d" % i
        db.put(key, Stream())
        if when is not None:
            db.set_expiry(key, when)


KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), KEYS, st.none()),
        st.tuples(st.just("expire"), KEYS, st.one_of(st.none(), st.integers(NOW - 5, NOW + 5))),
        st.tuples(st.just("delete"), KEYS, st.none()),
        st.tuples(st.just("get"), KEYS, st.none()),
        st.tuples(st.just("sweep"), st.just(b""), st.integers(1, 4)),
    ),
    max_size=60,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(OPS)
def test_operations_agree_with_a_plain_dictionary(ops: list[tuple[str, bytes, int | None]]) -> None:
    db = Keyspaces().database("$G", 0)
    model: dict[bytes, int | None] = {}  # key -> when it expires
    for op, key, n in ops:
        if op == "put":
            db.put(key, Stream())
            model[key] = None
        elif op == "expire" and key in model:
            db.set_expiry(key, n)
            model[key] = n
        elif op == "delete":
            assert db.delete(key) == (key in model)
            model.pop(key, None)
        elif op == "get":
            when = model.get(key, NOW)
            alive = key in model and (when is None or when > NOW)
            assert (db.get(key, NOW) is not None) == alive
            if not alive:
                model.pop(key, None)
        elif op == "sweep":
            assert n is not None
            expired = {k for k, when in model.items() if when is not None and when <= NOW}
            gone = db.sweep(NOW, n)
            assert gone <= min(n, len(expired))
            for k in [k for k in expired if k not in db.keys]:
                del model[k]
            assert len(expired) - len(model.keys() & expired) == gone
        assert set(db.keys) == set(model)
        assert db.access.keys() == db.keys.keys()  # (no access time outlives its key)
        assert db.expiring() == sum(1 for when in model.values() if when is not None)
        for k, when in model.items():
            assert db.expires_at(k) == when


def test_a_sweep_goes_round_every_key_with_an_expiry() -> None:
    db = Keyspaces().database("$G", 0)
    fill(db, range(100), NOW + 1)
    fill(db, range(5), NOW, prefix=b"old")
    for _ in range(105 // SWEEP_SAMPLE + 1):
        db.sweep(NOW, SWEEP_SAMPLE)
    assert len(db) == 100
    assert db.expiring() == 100


def test_expired_keys_among_many_others_all_go_and_are_journaled_as_deletes() -> None:
    keyspaces = Keyspaces()
    journal = Recorder()
    keyspaces.journal = journal
    lasting = keyspaces.database("$G", 0)
    fill(lasting, range(2_000), NOW + 60_000)
    fill(lasting, range(100), None, prefix=b"forever")
    fill(lasting, range(3_000), NOW, prefix=b"old")
    other = keyspaces.database("A", 3)
    fill(other, range(3_000), NOW)
    swept = 0
    for _ in range(10_000):
        swept += keyspaces.sweep(NOW, seconds=60.0)
        if not keyspaces.behind and swept == 6_000:
            break
    assert swept == 6_000
    assert (len(lasting), lasting.expiring(), len(other)) == (2_100, 2_000, 0)
    assert sorted(journal.records) == sorted(
        [("$G", 0, [b"DEL", b"old%d" % i]) for i in range(3_000)]
        + [("A", 3, [b"DEL", b"k%d" % i]) for i in range(3_000)]
    )


def test_long_lived_keys_along_the_list_do_not_hide_the_expired_from_a_sweep() -> None:
    """Long-lived keys given their TTL first, then as many that have expired: the first rounds
    find none expired, but the probes of the whole list say half are, so the sweep goes on."""
    random.seed(18)
    keyspaces = Keyspaces()
    db = keyspaces.database("$G", 0)
    fill(db, range(10_000), NOW + 60_000, prefix=b"long")
    fill(db, range(10_000), NOW, prefix=b"old")
    # (a sweep may stop early when its probes happen to find few expired: the next goes on)
    gone = sum(keyspaces.sweep(NOW, seconds=60.0) for _ in range(5))
    assert gone == 10_000
    assert not keyspaces.behind


def test_a_sweep_out_of_time_says_so_and_the_next_goes_on() -> None:
    keyspaces = Keyspaces()
    db = keyspaces.database("$G", 0)
    fill(db, range(1_000), NOW)
    gone = keyspaces.sweep(NOW, seconds=0.0)  # (one round, then time is up)
    assert (gone, keyspaces.behind) == (SWEEP_SAMPLE, True)
    while keyspaces.behind:
        gone += keyspaces.sweep(NOW, seconds=0.0)
    assert gone == 1_000
    assert len(db) == 0


def test_nothing_is_swept_while_the_journal_is_replayed() -> None:
    keyspaces = Keyspaces()
    db = keyspaces.database("$G", 0)
    fill(db, range(10), NOW)
    keyspaces.loading = True
    assert keyspaces.sweep(NOW) == 0
    assert db.get(b"k1", NOW) is not None
    keyspaces.loading = False
    assert keyspaces.sweep(NOW) == 10


def test_keys_this_node_may_not_remove_are_absent_but_kept_until_it_may() -> None:
    """``Shared.may_expire`` (a replica waits for its leader's DEL): a key past its time that the
    node may not remove reads as absent, stays, is neither swept nor counted as stale nor
    journaled; once the node may remove it, the next look removes it as usual."""
    random.seed(7)
    keyspaces = Keyspaces()
    journal = Recorder()
    keyspaces.journal = journal
    db = keyspaces.database("$G", 0)
    fill(db, range(50), NOW, prefix=b"kept")
    fill(db, range(50), NOW, prefix=b"gone")
    keyspaces.may_expire = lambda key: key.startswith(b"gone")
    assert db.get(b"kept1", NOW) is None
    assert db.read(b"kept2", NOW) is None
    assert b"kept1" in db.keys
    assert b"kept2" in db.keys
    assert db.stale(NOW, 1_000) < 1_000  # (only the removable ones count)
    assert keyspaces.sweep(NOW, seconds=60.0) == 50
    assert sorted(db.keys) == sorted(b"kept%d" % i for i in range(50))
    assert db.stale(NOW, 100) == 0
    assert keyspaces.sweep(NOW, seconds=60.0) == 0
    assert {args[1][:4] for _, _, args in journal.records} == {b"gone"}
    keyspaces.may_expire = None
    assert db.get(b"kept1", NOW) is None
    assert b"kept1" not in db.keys
    assert keyspaces.sweep(NOW, seconds=60.0) == 49
    assert len(db) == 0
