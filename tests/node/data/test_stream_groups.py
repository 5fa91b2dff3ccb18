"""Consumer groups: a state machine of a stream with groups against a plain model, and Redis's cases.

The model keeps nodes as lists of ``[id, pairs, deleted]`` and PELs as dicts, the obvious way; the stream
under test uses nodes of 3 so that splitting, freeing and node-granular trimming happen all the time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from node.data.streams import (
    MAX_ID,
    ConsumerGroup,
    Stream,
    StreamError,
    Trim,
    group_infos,
    make_id,
    parse_add_id,
)

NODE = 3
NAMES = [b"alice", b"bob", b"carol"]
PAIRS = [[b"a", b"1"], [b"a", b"22", b"b", b"x"], [b"z", b""]]


class ModelGroup:
    def __init__(self, last_id: int) -> None:
        self.last_id = last_id
        self.pel: dict[int, list[Any]] = {}  # id -> [consumer, delivery_time, delivery_count]
        self.consumers: dict[bytes, list[int]] = {}  # name -> [seen_time, active_time]

    def touch(self, name: bytes, now: int) -> None:
        self.consumers.setdefault(name, [now, -1])[0] = now


class Model:
    def __init__(self) -> None:
        self.nodes: list[list[list[Any]]] = []
        self.last_id = 0
        self.max_deleted = 0
        self.entries_added = 0
        self.groups: dict[bytes, ModelGroup] = {}

    def live(self) -> list[tuple[int, list[bytes]]]:
        return [(e[0], e[1]) for node in self.nodes for e in node if not e[2]]

    def get(self, entry_id: int) -> list[bytes] | None:
        return dict(self.live()).get(entry_id)

    def add(self, entry_id: int, pairs: list[bytes]) -> None:
        if not self.nodes or len(self.nodes[-1]) >= NODE:
            self.nodes.append([])
        self.nodes[-1].append([entry_id, pairs, False])
        self.last_id = entry_id
        self.entries_added += 1

    def delete(self, ids: list[int]) -> int:
        n = 0
        for entry_id in ids:
            for node in self.nodes:
                hit = [e for e in node if e[0] == entry_id and not e[2]]
                if hit:
                    hit[0][2] = True
                    n += 1
                    self.max_deleted = max(self.max_deleted, entry_id)
                    if all(e[2] for e in node):
                        self.nodes.remove(node)
                    break
        return n

    def trim(self, trim: Trim) -> int:
        limit = (100 * NODE if trim.limit is None else trim.limit) if trim.approximate else 0
        deleted = 0
        while self.nodes:
            length = len(self.live())
            node = self.nodes[0]
            live = sum(not e[2] for e in node)
            if trim.strategy == "maxlen" and length <= trim.threshold:
                break
            if limit and deleted + live > limit:
                break
            if (trim.strategy == "maxlen" and length - live >= trim.threshold) or (
                trim.strategy == "minid" and node[-1][0] < trim.threshold
            ):
                self.nodes.pop(0)
                deleted += live
                continue
            if not trim.approximate:
                for e in node:
                    done = (
                        len(self.live()) <= trim.threshold
                        if trim.strategy == "maxlen"
                        else (e[0] >= trim.threshold)
                    )
                    if done:
                        break
                    if not e[2]:
                        e[2] = True
                        deleted += 1
            break
        return deleted


class StreamMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.stream = Stream(node_max_entries=NODE, node_max_bytes=1 << 20)
        self.model = Model()
        self.now = 1000

    def known_ids(self) -> list[int]:
        return [e[0] for node in self.model.nodes for e in node] + [make_id(1, 0), MAX_ID]

    # ----------------------------------------------------------------- stream rules

    @rule(step=st.integers(0, 3))
    def tick(self, step: int) -> None:
        self.now += step

    @rule(
        kind=st.sampled_from(["*", "ms-*", "ms-seq", "bad"]),
        gap=st.integers(0, 2),
        seq=st.integers(0, 3),
        pairs=st.sampled_from(PAIRS),
    )
    def add(self, kind: str, gap: int, seq: int, pairs: list[bytes]) -> None:
        ms = (self.model.last_id >> 64) + gap
        text = {"*": b"*", "ms-*": b"%d-*" % ms, "ms-seq": b"%d-%d" % (ms, seq), "bad": b"%d-x" % ms}[
            kind
        ]
        try:
            new = parse_add_id(text, self.stream, self.now)
        except StreamError:
            assert kind != "*" or self.model.last_id == MAX_ID
            return
        assert make_id(*new) > self.model.last_id
        self.stream.add(new, pairs)
        self.model.add(make_id(*new), pairs)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from(self.known_ids()), max_size=3))
        assert self.stream.delete(ids) == self.model.delete(ids)

    @rule(
        data=st.data(),
        maxlen=st.integers(0, 8),
        approx=st.booleans(),
        limit=st.sampled_from([None, 0, 2, 3, 4]),
        by_len=st.booleans(),
    )
    def trim(
        self, data: st.DataObject, maxlen: int, approx: bool, limit: int | None, by_len: bool
    ) -> None:
        if by_len:
            trim = Trim("maxlen", maxlen, approx, limit if approx else None)
        else:
            trim = Trim(
                "minid", data.draw(st.sampled_from(self.known_ids())), approx, limit if approx else None
            )
        assert self.stream.trim(trim) == self.model.trim(trim)

    @rule(data=st.data(), count=st.sampled_from([None, 1, 2, 5]), reverse=st.booleans())
    def range(self, data: st.DataObject, count: int | None, reverse: bool) -> None:
        a, b = sorted(
            data.draw(st.lists(st.sampled_from([*self.known_ids(), 0]), min_size=2, max_size=2))
        )
        a += data.draw(st.sampled_from([0, 1]))
        expected = [e for e in self.model.live() if a <= e[0] <= b]
        if reverse:
            expected.reverse()
        assert self.stream.range(a, b, count, reverse=reverse) == expected[:count]
        assert self.stream.after(a, count) == [e for e in self.model.live() if e[0] > a][:count]
        assert self.stream.get(a) == self.model.get(a)

    @rule(data=st.data(), with_added=st.booleans(), with_deleted=st.booleans())
    def set_stream_id(self, data: st.DataObject, with_added: bool, with_deleted: bool) -> None:
        target = data.draw(st.sampled_from(self.known_ids()))
        added = data.draw(st.integers(0, 20)) if with_added else None
        max_deleted = data.draw(st.sampled_from(self.known_ids())) if with_deleted else None
        m = self.model
        live = m.live()
        if (max_deleted is not None and target < max_deleted) or target < m.max_deleted:
            expected_ok = False
        else:
            expected_ok = not live or (target >= live[-1][0] and (added is None or added >= len(live)))
        try:
            self.stream.set_id(target, added, max_deleted)
        except StreamError:
            assert not expected_ok
            return
        assert expected_ok
        m.last_id = target
        m.entries_added = m.entries_added if added is None else added
        m.max_deleted = max_deleted or m.max_deleted

    # ----------------------------------------------------------------- group rules

    def pick_group(self, data: st.DataObject) -> tuple[ConsumerGroup, ModelGroup]:
        name = data.draw(st.sampled_from(sorted(self.model.groups)))
        return self.stream.groups[name], self.model.groups[name]

    @rule(name=st.sampled_from([b"g1", b"g2"]), data=st.data())
    def create_group(self, name: bytes, data: st.DataObject) -> None:
        start = data.draw(st.sampled_from([*self.known_ids(), 0, self.model.last_id]))
        created = self.stream.create_group(name, start, None)
        assert created == (name not in self.model.groups)
        if created:
            self.model.groups[name] = ModelGroup(start)

    @precondition(lambda self: self.model.groups)
    @rule(data=st.data())
    def set_group_id(self, data: st.DataObject) -> None:
        group, model = self.pick_group(data)
        target = data.draw(st.sampled_from([*self.known_ids(), 0]))
        group.set_id(target, None)
        model.last_id = target

    @precondition(lambda self: self.model.groups)
    @rule(
        data=st.data(),
        who=st.sampled_from(NAMES),
        count=st.sampled_from([None, 0, 1, 2]),
        noack=st.booleans(),
    )
    def read_new(self, data: st.DataObject, who: bytes, count: int | None, noack: bool) -> None:
        group, model = self.pick_group(data)
        got = group.read_new(self.stream, group.consumer(who, self.now), count, noack, self.now)
        model.touch(who, self.now)
        expected = [e for e in self.model.live() if e[0] > model.last_id][: count or None]
        assert got == expected
        for entry_id, _ in expected:
            model.last_id = entry_id
            if not noack:
                model.pel[entry_id] = [who, self.now, 1]
                model.consumers[who][1] = self.now

    @precondition(lambda self: self.model.groups)
    @rule(data=st.data(), who=st.sampled_from(NAMES), count=st.sampled_from([None, 1, 2]))
    def read_history(self, data: st.DataObject, who: bytes, count: int | None) -> None:
        group, model = self.pick_group(data)
        after = data.draw(st.sampled_from([0, *self.known_ids()[:-1]]))
        got = group.read_history(self.stream, who, after, count, self.now)
        model.touch(who, self.now)
        mine = sorted(i for i, n in model.pel.items() if n[0] == who and i > after)[: count or None]
        assert got == [(i, self.model.get(i)) for i in mine]
        for i in mine:
            if self.model.get(i) is not None:
                model.pel[i][1] = self.now
                model.pel[i][2] += 1

    @precondition(lambda self: self.model.groups)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        group, model = self.pick_group(data)
        ids = data.draw(st.lists(st.sampled_from([*model.pel, *self.known_ids()]), max_size=3))
        expected = 0
        for i in ids:
            expected += model.pel.pop(i, None) is not None
        assert group.ack(ids) == expected

    @precondition(lambda self: self.model.groups)
    @rule(
        data=st.data(),
        who=st.sampled_from(NAMES),
        min_idle=st.sampled_from([0, 2, 5]),
        force=st.booleans(),
        justid=st.booleans(),
        retry=st.sampled_from([None, -1, 7]),
        idle=st.sampled_from([None, 1, 10**9]),
    )
    def claim(
        self,
        data: st.DataObject,
        who: bytes,
        min_idle: int,
        force: bool,
        justid: bool,
        retry: int | None,
        idle: int | None,
    ) -> None:
        group, model = self.pick_group(data)
        ids = data.draw(st.lists(st.sampled_from([*model.pel, *self.known_ids()]), max_size=3))
        got = group.claim(
            self.stream,
            who,
            min_idle,
            ids,
            self.now,
            force=force,
            justid=justid,
            retrycount=retry,
            idle=idle,
        )
        model.touch(who, self.now)
        delivery = self.now if idle is None or idle > self.now else self.now - idle
        expected: list[Any] = []
        for i in ids:
            pairs = self.model.get(i)
            if pairs is None:
                model.pel.pop(i, None)
                continue
            nack = model.pel.get(i)
            if nack is None:
                if not force:
                    continue
                nack = model.pel[i] = [who, self.now, 1]
            elif min_idle and self.now - nack[1] < min_idle:
                continue
            nack[0], nack[1] = who, delivery
            nack[2] = retry if retry is not None and retry >= 0 else nack[2] + (not justid)
            model.consumers[who][1] = self.now
            expected.append(i if justid else (i, pairs))
        assert got == expected

    @precondition(lambda self: self.model.groups)
    @rule(
        data=st.data(),
        who=st.sampled_from(NAMES),
        min_idle=st.sampled_from([0, 3]),
        count=st.integers(1, 4),
        justid=st.booleans(),
    )
    def autoclaim(
        self, data: st.DataObject, who: bytes, min_idle: int, count: int, justid: bool
    ) -> None:
        group, model = self.pick_group(data)
        start = data.draw(st.sampled_from([0, *model.pel, *self.known_ids()]))
        cursor, got, deleted = group.autoclaim(
            self.stream, who, min_idle, start, count, self.now, justid=justid
        )
        model.touch(who, self.now)
        scan = sorted(i for i in model.pel if i >= start)
        expected: list[Any] = []
        gone: list[int] = []
        attempts, left, pos = count * 10, count, 0
        while attempts and left and pos < len(scan):
            attempts -= 1
            i = scan[pos]
            pos += 1
            pairs = self.model.get(i)
            if pairs is None:
                del model.pel[i]
                gone.append(i)
                left -= 1
                continue
            if min_idle and self.now - model.pel[i][1] < min_idle:
                continue
            model.pel[i] = [who, self.now, model.pel[i][2] + (not justid)]
            model.consumers[who][1] = self.now
            expected.append(i if justid else (i, pairs))
            left -= 1
        assert (cursor, got, deleted) == (scan[pos] if pos < len(scan) else 0, expected, gone)

    @precondition(lambda self: self.model.groups)
    @rule(data=st.data(), who=st.sampled_from(NAMES))
    def delete_consumer(self, data: st.DataObject, who: bytes) -> None:
        group, model = self.pick_group(data)
        mine = [i for i, n in model.pel.items() if n[0] == who]
        assert group.delete_consumer(who) == len(mine)
        for i in mine:
            del model.pel[i]
        model.consumers.pop(who, None)

    @precondition(lambda self: self.model.groups)
    @rule(data=st.data(), who=st.sampled_from(NAMES))
    def create_consumer(self, data: st.DataObject, who: bytes) -> None:
        group, model = self.pick_group(data)
        assert group.create_consumer(who, self.now) == (who not in model.consumers)
        model.consumers.setdefault(who, [self.now, -1])

    # ----------------------------------------------------------------- agreement

    @invariant()
    def same_stream(self) -> None:
        s, m = self.stream, self.model
        live = m.live()
        assert s.range(0, MAX_ID) == live
        assert s.range(0, MAX_ID, reverse=True) == live[::-1]
        assert s.length == len(live)
        assert s.first_id == (live[0][0] if live else 0)
        assert s.first_entry() == (live[0] if live else None)
        assert s.last_entry() == (live[-1] if live else None)
        assert (s.last_id, s.max_deleted_id, s.entries_added) == (
            m.last_id,
            m.max_deleted,
            m.entries_added,
        )
        assert s.node_count == len(m.nodes)

    @invariant()
    def same_groups(self) -> None:
        assert [g.name for g in group_infos(self.stream)] == sorted(self.model.groups)
        for name, model in self.model.groups.items():
            group = self.stream.groups[name]
            assert group.last_id == model.last_id
            pel = {i: [n.consumer.name, n.delivery_time, n.delivery_count] for i, n in group.pel.items()}
            assert pel == model.pel
            assert {
                c.name: [c.seen_time, c.active_time] for c in group.consumers.values()
            } == model.consumers
            for consumer in group.consumers.values():
                assert list(consumer.pending) == sorted(
                    i for i, n in model.pel.items() if n[0] == consumer.name
                )
                for i, nack in consumer.pending.items():
                    assert group.pel[i] is nack  # one NACK shared by both PELs
            count, lo, hi, per = group.pending_summary()
            assert (count, lo, hi) == (len(pel), min(pel, default=None), max(pel, default=None))
            assert sum(n for _, n in per) == count


TestStreamMachine = StreamMachine.TestCase
TestStreamMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestStreamMachine = pytest.mark.slow(pytest.mark.timeout(300)(TestStreamMachine))


# --------------------------------------------------------------------- Redis's cases by hand


def stream_of(*ms: int, node: int = 100) -> Stream:
    stream = Stream(node_max_entries=node)
    for m in ms:
        stream.add((m, 0), [b"data", b"%d" % m])
    return stream


def lag_of(stream: Stream, name: bytes) -> tuple[int | None, int | None]:
    group = stream.groups[name]
    return group.entries_read, group.lag(stream)


@pytest.mark.timeout(10)
def test_lag_in_empty_streams() -> None:
    stream = Stream()
    stream.create_group(b"g1", 0, None)
    assert lag_of(stream, b"g1") == (None, 0)
    stream.add((1, 0), [b"data", b"a"])
    stream.delete([make_id(1, 0)])
    assert (stream.max_deleted_id, stream.entries_added) == (make_id(1, 0), 1)
    assert lag_of(stream, b"g1") == (None, 0)


@pytest.mark.timeout(10)
def test_lag_sanity() -> None:
    stream = stream_of(1, 2, 3, 4, 5)
    stream.create_group(b"g1", 0, None)
    group = stream.groups[b"g1"]
    assert lag_of(stream, b"g1") == (None, 5)
    group.read_new(stream, b"c11", 1, False, 0)
    assert lag_of(stream, b"g1") == (1, 4)
    group.read_new(stream, b"c12", 10, False, 0)
    assert lag_of(stream, b"g1") == (5, 0)
    stream.add((6, 0), [b"data", b"f"])
    assert lag_of(stream, b"g1") == (5, 1)


@pytest.mark.timeout(10)
def test_lag_with_xdels_and_trims() -> None:
    stream = stream_of(1, 2, 3, 4, 5)
    stream.delete([make_id(3, 0)])
    stream.create_group(b"g1", 0, None)
    stream.create_group(b"g2", 0, None)
    group = stream.groups[b"g1"]
    assert lag_of(stream, b"g1") == (None, None)
    for _ in range(3):
        group.read_new(stream, b"c11", 1, False, 0)
        assert lag_of(stream, b"g1") == (None, None)  # a tombstone lies ahead
    group.read_new(stream, b"c11", 1, False, 0)
    assert lag_of(stream, b"g1") == (5, 0)  # the last entry: entries_added is exact
    stream.add((6, 0), [b"data", b"f"])
    assert lag_of(stream, b"g1") == (5, 1)
    stream.trim(Trim("minid", make_id(3, 0)))
    assert lag_of(stream, b"g1") == (5, 1)
    assert lag_of(stream, b"g2") == (None, 3)  # behind the first entry, no tombstone ahead: the length
    stream.trim(Trim("minid", make_id(5, 0)))
    assert lag_of(stream, b"g2") == (None, 2)


@pytest.mark.timeout(10)
def test_lag_after_setid_is_unknown_until_the_end() -> None:
    stream = stream_of(1, 2, 3, 4, 5)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    group.set_id(make_id(3, 0), None)  # an arbitrary position
    assert group.lag(stream) is None
    group.set_id(make_id(3, 0), 3)  # ENTRIESREAD makes it known again
    assert group.lag(stream) == 2
    group.set_id(make_id(5, 0), None)  # the last ID: entries_added
    assert group.lag(stream) == 0
    stream.create_group(b"future", make_id(9, 0), None)
    assert stream.groups[b"future"].lag(stream) is None


@pytest.mark.timeout(10)
def test_delivery_counts_times_and_history() -> None:
    stream = stream_of(1, 2, 3)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    alice = group.consumer(b"alice", 100)
    assert [i >> 64 for i, _ in group.read_new(stream, alice, None, False, 100)] == [1, 2, 3]
    assert alice.active_time == 100
    stream.delete([make_id(2, 0)])  # XDEL leaves the PEL alone
    history = group.read_history(stream, group.consumer(b"alice", 150), 0, None, 150)
    assert history == [
        (make_id(1, 0), [b"data", b"1"]),
        (make_id(2, 0), None),
        (make_id(3, 0), [b"data", b"3"]),
    ]
    assert [(n.delivery_count, n.delivery_time) for n in group.pel.values()] == [
        (2, 150),
        (1, 100),
        (2, 150),
    ]
    assert (alice.seen_time, alice.active_time) == (150, 100)  # history reads are not activity
    assert group.read_history(stream, alice, make_id(2, 0), 1, 160) == [(make_id(3, 0), [b"data", b"3"])]
    assert group.pending_range(0, MAX_ID, 10, consumer=None, min_idle=15, now=170) == [
        (make_id(1, 0), b"alice", 20, 2),
        (make_id(2, 0), b"alice", 70, 1),
    ]
    assert group.pending_range(0, MAX_ID, 10, consumer=b"nobody", min_idle=None, now=170) == []
    assert group.pending_range(0, MAX_ID, 0, consumer=None, min_idle=None, now=170) == []
    assert group.pending_summary() == (3, make_id(1, 0), make_id(3, 0), [(b"alice", 3)])


@pytest.mark.timeout(10)
def test_noack_and_redelivery_after_setid() -> None:
    stream = stream_of(1, 2)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    bob = group.consumer(b"bob", 10)
    assert len(group.read_new(stream, bob, None, True, 10)) == 2
    assert (len(group.pel), bob.active_time) == (0, -1)  # NOACK: no PEL, no activity
    group.set_id(0, None)
    alice = group.consumer(b"alice", 20)
    group.read_new(stream, alice, None, False, 20)
    group.claim(stream, b"bob", 0, [make_id(1, 0)], 30)
    assert group.pel[make_id(1, 0)].delivery_count == 2
    group.set_id(0, None)
    group.read_new(stream, alice, 1, False, 40)  # the NACK moves back to alice, its count reset to 1
    nack = group.pel[make_id(1, 0)]
    assert (nack.consumer.name, nack.delivery_count, nack.delivery_time) == (b"alice", 1, 40)
    assert list(bob.pending) == []
    assert alice.pending[make_id(1, 0)] is nack


@pytest.mark.timeout(10)
def test_claim_rules() -> None:
    stream = stream_of(1, 2, 3, 4)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    group.read_new(stream, b"alice", None, False, 1000)
    stream.delete([make_id(4, 0)])
    got = group.claim(stream, b"bob", 50, [make_id(1, 0), make_id(4, 0), make_id(9, 0)], 1040)
    assert got == []  # not idle long enough; 4-0 is gone from the stream and so leaves the PEL
    assert make_id(4, 0) not in group.pel
    assert group.consumers[b"bob"].seen_time == 1040  # 7.2 creates and marks the claimer anyway
    assert group.consumers[b"bob"].active_time == -1
    got_ids = group.claim(
        stream, b"bob", 50, [make_id(1, 0), make_id(9, 0)], 1050, justid=True, force=True
    )
    assert got_ids == [make_id(1, 0)]  # FORCE only for entries that exist
    assert group.pel[make_id(1, 0)].delivery_count == 1  # JUSTID leaves the count alone
    group.claim(stream, b"carol", 0, [make_id(2, 0)], 1060, idle=25, retrycount=9)
    nack = group.pel[make_id(2, 0)]
    assert (nack.consumer.name, nack.delivery_time, nack.delivery_count) == (b"carol", 1035, 9)
    group.claim(stream, b"carol", 0, [make_id(2, 0)], 1070, time=5000)  # the future is clamped to now
    assert nack.delivery_time == 1070
    group.ack([make_id(3, 0)])
    group.claim(stream, b"carol", 0, [make_id(3, 0)], 1080, force=True)
    assert group.pel[make_id(3, 0)].delivery_count == 2  # created at 1, then the claim's increment
    group.claim(stream, b"carol", 0, [], 1090, lastid=make_id(7, 0))
    assert group.last_id == make_id(7, 0)
    group.claim(stream, b"carol", 0, [], 1090, lastid=make_id(2, 0))
    assert group.last_id == make_id(7, 0)  # LASTID only moves forward


@pytest.mark.timeout(10)
def test_autoclaim_cursor_and_deleted() -> None:
    """Redis's live example: COUNT 1 gives the next cursor; a full scan reports a deleted entry."""
    stream = stream_of(1, 2, 3, 4)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    group.read_new(stream, b"alice", None, False, 0)
    stream.delete([make_id(2, 0)])
    assert group.autoclaim(stream, b"bob", 0, 0, 1, 10, justid=False) == (
        make_id(2, 0),
        [(make_id(1, 0), [b"data", b"1"])],
        [],
    )
    cursor, claimed, deleted = group.autoclaim(stream, b"bob", 0, 0, 100, 20, justid=True)
    assert (cursor, claimed, deleted) == (
        0,
        [make_id(1, 0), make_id(3, 0), make_id(4, 0)],
        [make_id(2, 0)],
    )
    assert group.pel[make_id(1, 0)].delivery_count == 2  # claimed once with entries, once JUSTID
    big = stream_of(*range(1, 40))
    big.create_group(b"g", 0, None)
    g = big.groups[b"g"]
    g.read_new(big, b"alice", None, False, 0)
    cursor, claimed, _ = g.autoclaim(big, b"bob", 100, 0, 2, 50, justid=True)
    assert (cursor, claimed) == (make_id(21, 0), [])  # 2 x 10 attempts, none idle enough


@pytest.mark.timeout(10)
def test_consumers_seen_active_and_deletion() -> None:
    stream = stream_of(1, 2, 3)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    assert group.create_consumer(b"zed", 5)
    assert not group.create_consumer(b"zed", 6)
    group.read_new(stream, group.consumer(b"amy", 10), 2, False, 10)
    infos = group.consumer_infos(30)
    assert [(c.name, c.pending, c.idle, c.inactive) for c in infos] == [
        (b"amy", 2, 20, 20),
        (b"zed", 0, 25, -1),
    ]
    assert group.delete_consumer(b"amy") == 2
    assert len(group.pel) == 0  # the pending entries are lost with the consumer
    assert group.delete_consumer(b"amy") == 0
    info = group.info(stream)
    assert (info.consumers, info.pending, info.last_id, info.entries_read) == (1, 0, make_id(2, 0), 2)
    assert stream.destroy_group(b"g")
    assert not stream.destroy_group(b"g")


@pytest.mark.timeout(10)
def test_history_count_not_positive_is_unlimited() -> None:
    stream = stream_of(1, 2, 3)
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    group.read_new(stream, b"a", -1, False, 0)
    assert len(group.read_history(stream, b"a", 0, -1, 0)) == 3
    assert len(group.read_history(stream, b"a", 0, 0, 0)) == 3
    assert group.read_history(stream, b"a", MAX_ID, None, 0) == []


@pytest.mark.timeout(10)
def test_acks_of_a_few_and_of_most_leave_the_same_pels() -> None:
    """XACK drops a few NACKs in place and rebuilds PELs it mostly empties: both read the same."""
    stream = stream_of(*range(1, 41))
    stream.create_group(b"g", 0, None)
    group = stream.groups[b"g"]
    alice = group.consumer(b"alice", 1)
    bob = group.consumer(b"bob", 1)
    group.read_new(stream, alice, 20, False, 1)
    group.read_new(stream, bob, 20, False, 2)
    assert group.ack([make_id(3, 0), make_id(3, 0), make_id(25, 0), make_id(99, 0)]) == 2  # in place
    assert group.ack([make_id(ms, 0) for ms in range(1, 21) if ms != 7]) == 18  # alice rebuilt
    assert list(alice.pending) == [make_id(7, 0)]
    assert list(bob.pending) == [make_id(ms, 0) for ms in range(21, 41) if ms != 25]
    assert list(group.pel) == [make_id(7, 0), *bob.pending]
    assert all(group.pel[i] is bob.pending[i] for i in bob.pending)
    assert group.ack(list(group.pel)) == 20
    assert (len(group.pel), len(alice.pending), len(bob.pending)) == (0, 0, 0)


@pytest.mark.timeout(10)
def test_a_consumer_makes_its_pending_list_for_its_first_entry() -> None:
    """A consumer that only waits holds no list of its own (a blocked reader per client would
    otherwise cost ~1.6 KB each); it makes one when given an entry, and gives it up once all
    are acknowledged."""
    stream = stream_of(1, 2)
    stream.create_group(b"g", make_id(2, 0), None)
    group = stream.groups[b"g"]
    waiting = [group.consumer(b"w%d" % i, 1) for i in range(3)]
    assert group.read_new(stream, waiting[0], None, False, 1) == []
    assert {id(c.pending) for c in waiting} == {id(waiting[0].pending)}  # (one shared, empty)
    stream.add((3, 0), [b"data", b"3"])
    assert len(group.read_new(stream, waiting[1], None, False, 2)) == 1
    assert list(waiting[1].pending) == [make_id(3, 0)]
    assert (len(waiting[0].pending), len(waiting[2].pending)) == (0, 0)  # (the shared one untouched)
    assert len(group.claim(stream, b"w2", 0, [make_id(3, 0)], 3)) == 1
    assert (list(waiting[1].pending), list(waiting[2].pending)) == ([], [make_id(3, 0)])
    assert group.ack([make_id(3, 0)]) == 1
    assert waiting[2].pending is waiting[0].pending  # (back to the shared empty list)
