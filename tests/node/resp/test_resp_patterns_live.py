"""Hostile PSUBSCRIBE patterns against a node process, through redis-py: a PUBLISH on a long channel is
answered while 1,000 of them are held, and another client's PINGs are answered meanwhile.

Each pattern is ``*``, 200 ``?``, ``b*`` and two sets; the channel is 10 KB without a ``b``. A
matcher that tries every place of the channel for every pattern takes seconds per PUBLISH and
answers nobody else meanwhile: the canary's PINGs would then outlast the test's time limit. Nothing
here is timed otherwise (the figures are ``pubmesh bench resp-stall``'s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis as redispy

from node.bench.stall import hostile_channel, hostile_pattern
from tests.live import LiveNode, live_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PATTERNS = 1000
CHANNEL = hostile_channel(10_240)
CANARY_PINGS = 20
MAX_PUBLISHES = 10_000
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def node() -> Iterator[LiveNode]:
    with live_node(redis=True) as live:
        yield live


def client(node: LiveNode) -> redispy.Redis:
    return redispy.Redis(port=node.redis_port or 0, socket_timeout=TIMEOUT)


def test_a_canary_is_answered_while_hostile_patterns_are_matched(node: LiveNode) -> None:
    holder = client(node).pubsub()
    holder.psubscribe(*[hostile_pattern(i) for i in range(PATTERNS)])
    for _ in range(PATTERNS):
        confirmed = holder.get_message(timeout=TIMEOUT)
        assert confirmed is not None
        assert confirmed["type"] == "psubscribe"
    publisher, canary = client(node), client(node)

    replies: list[int] = []
    publishing = threading.Event()
    done = threading.Event()

    def publish() -> None:
        try:
            while not done.is_set() and len(replies) < MAX_PUBLISHES:
                replies.append(publisher.publish(CHANNEL, b"x"))
                publishing.set()
        finally:
            publishing.set()

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        assert publishing.wait(TIMEOUT)
        answered = sum(bool(canary.ping()) for _ in range(CANARY_PINGS))
    finally:
        done.set()
        thread.join(TIMEOUT)
    assert answered == CANARY_PINGS
    assert replies
    assert set(replies) == {0}, "no pattern matches the channel"

    matching = b"a" * 200 + b"b" + CHANNEL  # a b past the 200th byte: every pattern matches
    assert publisher.publish(matching, b"y") == PATTERNS
    first = holder.get_message(timeout=TIMEOUT)
    assert first is not None
    assert (first["type"], first["pattern"], first["channel"]) == (
        "pmessage",
        hostile_pattern(0),
        matching,
    )
    holder.close()
