"""Driving single ``Raft`` nodes by hand: build one, feed it, carry out its ``Ready``."""

from __future__ import annotations

import random
from typing import TypeVar

from cluster.raft import Message, Persisted, Raft, RaftConfig, Ready, Role
from cluster.raft.messages import AppendResponse, Entry, VoteResponse

T = TypeVar("T")

VOTERS = ("a", "b", "c")


def node(
    name: str = "a",
    voters: tuple[str, ...] = VOTERS,
    persisted: Persisted | None = None,
    *,
    seed: int = 0,
    pre_vote: bool = True,
    check_quorum: bool = True,
) -> Raft:
    config = RaftConfig(
        id=name,
        voters=voters,
        rng=random.Random(seed),
        election_ticks=10,
        pre_vote=pre_vote,
        check_quorum=check_quorum,
    )
    return Raft(config, persisted)


def flush(raft: Raft) -> list[Message]:
    """Carry out every pending ``Ready`` (storage is assumed durable): the messages it sent."""
    sent: list[Message] = []
    while ready := raft.ready():
        sent.extend(ready.then_send)
        raft.advance(ready)
    return sent


def take(raft: Raft) -> Ready:
    """One ``Ready``, carried out."""
    ready = raft.ready()
    raft.advance(ready)
    return ready


def ticks(raft: Raft, count: int) -> None:
    for _ in range(count):
        raft.tick()


def elect(raft: Raft) -> list[Message]:
    """Tick ``raft`` until it campaigns; the vote requests (pre-votes if enabled) it sent."""
    for _ in range(2 * raft.config.election_ticks):
        raft.tick()
        sent = flush(raft)
        if sent:
            return sent
    raise AssertionError("never campaigned")


def entries(*terms: int, start: int = 1) -> tuple[Entry, ...]:
    """Entries with these terms from index ``start`` on, each holding its own index as data."""
    return tuple(Entry(start + i, term, str(start + i).encode()) for i, term in enumerate(terms))


def of_type(messages: list[Message], kind: type[T]) -> list[T]:
    return [message for message in messages if isinstance(message, kind)]


def leader_of(persisted: Persisted | None = None, voters: tuple[str, ...] = VOTERS) -> Raft:
    """Node "a" elected leader by "b"'s vote (without pre-vote), its first appends sent."""
    raft = node(voters=voters, persisted=persisted, pre_vote=False)
    elect(raft)
    raft.step(VoteResponse(sender="b", to="a", term=raft.term, granted=True))
    assert raft.role is Role.LEADER
    flush(raft)
    return raft


def ack(raft: Raft, sender: str, index: int) -> list[Message]:
    raft.step(AppendResponse(sender=sender, to=raft.id, term=raft.term, index=index))
    return flush(raft)


def pump(rafts: dict[str, Raft], messages: list[Message], *, drop: str = "") -> list[Message]:
    """Deliver messages (and their answers) until quiet, except to ``drop``: everything delivered."""
    delivered = []
    while messages:
        message = messages.pop(0)
        if message.to == drop or message.to not in rafts:
            continue
        delivered.append(message)
        rafts[message.to].step(message)
        messages.extend(flush(rafts[message.to]))
    return delivered
