"""Lock and rate-limit libraries against a node: pottery's ``Redlock`` (``SET NX PX``, scripts to
extend and release) and ``limits``' fixed and sliding window counters (scripts calling ``INCRBY``,
``EXPIRE``, ``GET``, ``SET``, ``PTTL``, ``RENAME``, and ``KEYS`` to reset), each compared in
behaviour with what redis-server does."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import pytest
import redis
import trio
from limits import parse, storage, strategies
from pottery import Redlock

from pipeline.local import redis_server
from tests.support import start_redis_node

pytestmark = pytest.mark.timeout(30)

AUTO_RELEASE = 0.3
"""Seconds a Redlock holds its key unless released or extended."""


def _redlock(client: redis.Redis, key: str) -> Redlock:
    return Redlock(key=key, masters={client}, auto_release_time=AUTO_RELEASE)


def _locks(port: int) -> list[object]:
    seen: list[object] = []
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as client:
        client.flushall()
        first, second = _redlock(client, "printer"), _redlock(client, "printer")
        seen.append(first.acquire(blocking=False))
        seen.append(second.acquire(blocking=False))  # (held)
        seen.append((0 < first.locked() <= AUTO_RELEASE, second.locked()))
        first.extend()
        first.release()
        seen.append(second.acquire(blocking=False))
        time.sleep(AUTO_RELEASE + 0.1)  # (not released: it lapses)
        seen.append((second.locked(), first.acquire(blocking=False)))
        first.release()
        with _redlock(client, "scanner") as held:
            seen.append(0 < held.locked() <= AUTO_RELEASE)
        seen.append(client.exists("redlock:scanner"))
    return seen


def _limits(port: int) -> list[object]:
    seen: list[object] = []
    url = f"redis://127.0.0.1:{port}"
    rate = parse("3/minute")
    for kind in (strategies.FixedWindowRateLimiter, strategies.SlidingWindowCounterRateLimiter):
        limiter = kind(storage.RedisStorage(url))
        limiter.storage.reset()
        seen.append([limiter.hit(rate, "user", "a") for _ in range(5)])
        seen.append(limiter.hit(rate, "user", "b"))
        seen.append(limiter.get_window_stats(rate, "user", "a").remaining)
        seen.append(limiter.test(rate, "user", "b"))
    return seen


WINDOW = [[True, True, True, False, False], True, 0, True]
"""Per limiter: five hits of one user against 3/minute, a hit of another, what the first has
left, and whether the other may go on."""


@pytest.mark.parametrize(
    ("use", "expected"),
    [
        (_locks, [True, False, (True, 0), True, (0, True), True, 0]),
        (_limits, WINDOW + WINDOW),
    ],
    ids=["pottery-redlock", "limits"],
)
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
async def test_library_behaves_as_on_redis_server(
    nursery: trio.Nursery, use: Callable[[int], list[object]], expected: list[object]
) -> None:
    node = await start_redis_node(nursery)

    def both() -> tuple[list[object], list[object]]:
        with redis_server() as port:
            theirs = use(port)
        return theirs, use(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert theirs == expected
    assert ours == theirs
