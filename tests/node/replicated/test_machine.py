"""A replica group's keys as a state machine: replicas that apply the same entries hold the same keys."""

from __future__ import annotations

import contextlib
from functools import partial
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.config import ReplicationConfig
from cluster.frames import RaftFrame
from cluster.placement import SLOTS, hash_slot, layout
from cluster.raft.messages import VoteRequest
from cluster.replication.replicas import Replicas
from node.broker import Broker
from node.config.options import Config
from node.data.store import CommandRefused, encode
from node.replicated.capture import Capture
from node.replicated.machine import KeyspaceMachine, MachineError, entry
from node.replicated.path import KeyRouter
from node.resp.executor import CommandExecutor


class Replica:
    """A node's keys, a group's machine over them, and a way to run commands as a client would."""

    def __init__(self, name: str, first: int = 0, end: int = SLOTS) -> None:
        self.broker = Broker(Config())
        self.capture = Capture()
        self.broker.keyspaces.journal = self.capture
        self.run = CommandExecutor(self.broker, self.broker.keyspaces)
        self.machine = KeyspaceMachine(
            name, self.broker.keyspaces, partial(CommandExecutor, self.broker), first, end
        )

    def command(self, *args: bytes, account: str = "$G", db: int = 0) -> bytes:
        """Run a command here as the group's leader: the entry its changes make (b"" if none)."""
        with contextlib.suppress(CommandRefused):
            self.run(account, db, list(args))
        records = self.capture.take()
        return self.machine.begin(records)[1] if records else b""


COMMANDS = [
    (b"XADD", b"s", b"*", b"f", b"v"),
    (b"XADD", b"{s}2", b"MAXLEN", b"2", b"*", b"a", b"b"),
    (b"XGROUP", b"CREATE", b"s", b"g", b"0"),
    (b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"1", b"STREAMS", b"s", b">"),
    (b"XAUTOCLAIM", b"s", b"g", b"c2", b"0", b"0"),
    (b"XTRIM", b"s", b"MAXLEN", b"1"),
    (b"SET", b"k", b"v", b"EX", b"100"),
    (b"INCR", b"n"),
    (b"APPEND", b"k", b"x"),
    (b"DEL", b"s"),
    (b"PERSIST", b"k"),
    (b"SET", b"other", b"1", b"PX", b"1000000"),
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(COMMANDS), max_size=25), st.integers(0, 2))
def test_replicas_applying_the_same_entries_hold_the_same_keys(
    commands: list[tuple[bytes, ...]], db: int
) -> None:
    leader, follower = Replica("a"), Replica("b")
    for args in commands:
        data = leader.command(*args, db=db)
        if data:
            leader.machine.apply(data)  # (the leader's own entry: already carried out)
            follower.machine.apply(data)
    assert snap(follower) == snap(leader)
    fresh = Replica("c")
    fresh.machine.restore(snap(leader))
    assert snap(fresh) == snap(leader)
    assert leader.machine.applied == follower.machine.applied


def test_the_leaders_own_entries_are_skipped_others_run() -> None:
    leader, other = Replica("a"), Replica("b")
    data = leader.command(b"XADD", b"s", b"1-1", b"f", b"v")
    leader.machine.apply(data)  # (carried out already, when the command ran)
    other.machine.apply(data)
    for replica in (leader, other):
        assert replica.run("$G", 0, [b"XRANGE", b"s", b"-", b"+"]) == (
            b"*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        )
    with pytest.raises(MachineError, match="XADD was refused"):
        leader.machine.apply(data)  # (no longer pending here: it runs, and repeats the ID)


def test_entries_made_here_run_once_the_keys_were_cleared_or_restored() -> None:
    """A rebuild (or a leader's snapshot) replaces the keys: this node's own pending changes are
    gone from them, so their entries must be carried out, not skipped, when they commit."""
    leader, other = Replica("a"), Replica("b")
    pending = leader.command(b"XADD", b"s", b"1-1", b"f", b"v")
    leader.machine.clear()
    leader.machine.apply(pending)
    assert leader.run("$G", 0, [b"XRANGE", b"s", b"-", b"+"]) == _entry(b"1-1", b"v")
    more = leader.command(b"XADD", b"s", b"2-1", b"f", b"w")
    leader.machine.restore(snap(other))
    leader.machine.apply(more)
    assert leader.run("$G", 0, [b"XRANGE", b"s", b"-", b"+"]) == _entry(b"2-1", b"w")


def _entry(entry_id: bytes, value: bytes) -> bytes:
    """XRANGE's reply of one entry ``f value``."""
    return b"*1\r\n*2\r\n$3\r\n%s\r\n*2\r\n$1\r\nf\r\n$1\r\n%s\r\n" % (entry_id, value)


def snap(replica: Replica) -> bytes:
    """The replica's snapshot (it must be able to take one)."""
    data = replica.machine.snapshot()
    assert data is not None
    return data


def test_no_snapshot_holds_changes_not_committed() -> None:
    """A leader's keys hold its pending writes (and, once a write failed, ones that never will
    be committed): a snapshot then would make them the group's; it waits for a clean moment."""
    leader = Replica("a")
    pending = leader.command(b"XADD", b"s", b"1-1", b"f", b"v")
    assert leader.machine.snapshot() is None
    leader.machine.apply(pending)  # (committed: the keys are the log's again)
    assert b"1-1" in snap(leader)
    lost = leader.command(b"XADD", b"s", b"2-1", b"f", b"v")
    assert leader.machine.forget(int.from_bytes(lost[3:11], "little"))
    assert leader.machine.snapshot() is None  # (dirty: only a rebuild makes them the log's again)
    leader.machine.clear()
    leader.machine.apply(pending)
    assert b"2-1" not in snap(leader)


def quieting(replica: Replica) -> bool:
    return replica.machine.quieting


def test_a_snapshot_asked_for_while_writes_are_pending_quiets_the_leader_until_taken() -> None:
    """Writes that never stop would keep a leader from ever finding a clean moment: asked for a
    snapshot while some are pending, the machine is ``quieting`` (its node runs no new command on
    the group's keys) until those are applied and the snapshot is taken, or the keys cleared."""
    leader = Replica("a")
    quieted: list[bool] = []
    leader.machine.quieted = lambda: quieted.append(True)
    first = leader.command(b"XADD", b"s", b"1-1", b"f", b"v")
    second = leader.command(b"XADD", b"s", b"2-1", b"f", b"v")
    assert leader.machine.snapshot() is None
    assert quieting(leader)
    assert not quieted
    leader.machine.apply(first)
    assert leader.machine.snapshot() is None  # (the second is still pending)
    leader.machine.apply(second)
    data = leader.machine.snapshot()
    assert data is not None
    assert b"2-1" in data
    assert not quieting(leader)
    assert quieted == [True]
    leader.machine.snapshot()
    assert quieted == [True]  # (once per quiet spell)

    leader.command(b"XADD", b"s", b"3-1", b"f", b"v")
    assert leader.machine.snapshot() is None
    assert quieting(leader)
    leader.machine.clear()  # (the keys are rebuilt: nothing is pending any more)
    assert not quieting(leader)
    assert quieted == [True, True]


def test_a_failed_proposal_asks_for_a_rebuild() -> None:
    leader = Replica("a")
    leader.run("$G", 0, [b"SET", b"k", b"v"])
    sequence, _ = leader.machine.begin(leader.capture.take())
    assert not leader.machine.dirty
    assert leader.machine.forget(sequence)
    assert leader.machine.forget(sequence)  # (until the keys are rebuilt)
    leader.machine.clear()
    assert not leader.machine.forget(sequence)


def test_another_leaders_entry_in_place_of_ours_spoils_the_keys_until_rebuilt() -> None:
    """A deposed leader applying its successor's entries where its own pending ones were: its
    keys hold changes the log will never have. It carries on (an entry its keys refuse is not a
    failure then), says it must be rebuilt, and a rebuild from the log agrees with the others."""
    old, new = Replica("a"), Replica("b")
    told: list[bool] = []
    old.machine.spoiled = lambda: told.append(True)
    mine = old.command(b"XADD", b"s", b"5-1", b"f", b"v")  # (never committed)
    theirs = new.command(b"XADD", b"s", b"3-1", b"f", b"w")
    new.machine.apply(theirs)
    old.machine.apply(theirs)  # (refused by old's keys, which hold 5-1)
    sequence = int.from_bytes(mine[3:11], "little")
    assert old.machine.dirty
    assert told == [True], "the node rebuilds even if no one awaits the lost proposal's answer"
    assert old.machine.forget(sequence)  # (its proposal is lost: rebuild)
    old.machine.clear()
    old.machine.apply(theirs)
    assert snap(old) == snap(new)
    assert not old.machine.dirty


def test_a_new_leaders_first_entry_in_place_of_ours_spoils_the_keys() -> None:
    """A deposed leader whose pending change was replaced by its successor's first (empty) entry,
    with no write after it: the keys hold a change the log will never have, and the node is told
    at once (no later entry of another leader would tell it). Without pending changes, a new
    term's first entry changes nothing."""
    old = Replica("a")
    told: list[bool] = []
    old.machine.spoiled = lambda: told.append(True)
    old.machine.term_began()
    assert (told, old.machine.dirty) == ([], False)
    old.command(b"XADD", b"s", b"5-1", b"f", b"v")  # (never committed)
    old.machine.term_began()
    assert old.machine.dirty
    assert told == [True]
    old.machine.clear()
    assert snap(old) == snap(Replica("b"))


def test_snapshot_holds_only_the_groups_slots() -> None:
    low = Replica("a", 0, SLOTS // 2)
    for key in [b"a", b"b", b"c", b"d", b"e", b"{a}x"]:
        low.run("$G", 0, [b"SET", key, key])
        low.run("acct", 3, [b"SET", key, key])
    copy = Replica("b", 0, SLOTS // 2)
    copy.run("$G", 0, [b"SET", b"{b}stale", b"1"])  # (the group's: the snapshot lacks it)
    copy.run("$G", 0, [b"SET", b"stale", b"1"])  # (another group's: left alone)
    assert hash_slot(b"stale") >= SLOTS // 2
    copy.machine.restore(snap(low))
    held = {k for k in [b"a", b"b", b"c", b"d", b"e", b"{a}x"] if hash_slot(k) < SLOTS // 2}
    assert held  # (the test means something)
    assert set(copy.broker.keyspaces.database("$G", 0).keys) == held | {b"stale"}
    assert set(copy.broker.keyspaces.database("acct", 3).keys) == held
    copy.machine.clear()
    assert set(copy.broker.keyspaces.database("$G", 0).keys) == {b"stale"}


def test_damaged_or_refused_entries_raise() -> None:
    replica = Replica("a")
    with pytest.raises(MachineError):
        replica.machine.apply(b"\x05")
    with pytest.raises(MachineError):
        replica.machine.apply(entry("b", 1, b"garbage")[:-1])
    wrong = Replica("b")
    wrong.run("$G", 0, [b"XADD", b"k", b"1-1", b"f", b"v"])
    with pytest.raises(MachineError, match="refused"):
        wrong.machine.apply(entry("a", 1, encode("$G", 0, [b"INCR", b"k"])))


def test_raft_frames_of_another_key_layout_are_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ours, theirs = layout(["a", "b", "c"], 3), layout(["a", "b", "c"], 2)
    replicas = Replicas("a", tmp_path, ReplicationConfig(), lambda to, frame: True)
    broker = Broker(Config())
    router = KeyRouter(
        "a", ours, replicas, broker.keyspaces, partial(CommandExecutor, broker), lambda to, f: True
    )
    replicas.on_unknown = router.refused
    vote = VoteRequest(sender="b", to="a", term=1, last_index=0, last_term=0)
    for _ in range(3):
        replicas.receive("b", RaftFrame(theirs.groups[0].name, vote))
    refusals = [r.getMessage() for r in caplog.records if "Refused Raft messages" in r.getMessage()]
    assert len(refusals) == 1  # (once per peer and group)
    assert theirs.fingerprint in refusals[0]
    assert ours.fingerprint in refusals[0]
    assert not replicas.groups
