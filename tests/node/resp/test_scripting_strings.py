"""Scripts on strings beside a live redis-server (SET's status, GET of a missing key, arithmetic,
WRONGTYPE raised inside ``redis.call`` and caught by ``redis.pcall``), and redis-py's ``Lock``,
which takes a lock with ``SET NX PX`` and extends and releases it with scripts."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import redis
import trio

from node.run.launch import NodeHandle
from pipeline.local import redis_server
from tests.support import start_redis_node

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

SCRIPTS: list[tuple[str, list[str], list[str]]] = [
    ("return redis.call('SET', KEYS[1], ARGV[1])", ["s"], ["v"]),
    ("return redis.call('GET', KEYS[1])", ["s"], []),
    ("return redis.call('GET', KEYS[1])", ["missing"], []),
    ("return redis.call('GET', KEYS[1]) == false", ["missing"], []),
    ("return redis.call('INCRBY', KEYS[1], ARGV[1])", ["n"], ["41"]),
    ("return redis.call('INCRBYFLOAT', KEYS[1], ARGV[1])", ["n"], ["0.5"]),
    ("return tonumber(redis.call('INCR', KEYS[1]))", ["i"], []),
    ("redis.call('XADD', KEYS[1], '1-1', 'f', 'v'); return redis.call('GET', KEYS[1])", ["x"], []),
    ("local r = redis.pcall('GET', KEYS[1]); return r['err']", ["x"], []),
    ("return redis.pcall('INCR', KEYS[1])", ["s"], []),
    ("return {redis.call('SET', KEYS[1], 'a', 'GET'), redis.call('STRLEN', KEYS[1])}", ["s"], []),
    ("return redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])", ["s", "missing", "n"], []),
]


def _run(port: int) -> list[Any]:
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5) as client:
        client.response_callbacks.clear()  # (raw replies)
        client.execute_command("FLUSHALL")
        replies: list[Any] = []
        for body, keys, argv in SCRIPTS:
            try:
                replies.append(client.eval(body, len(keys), *keys, *argv))
            except redis.ResponseError as exc:
                replies.append(f"error: {str(exc).split(' script: ')[0]}")
        return replies


async def test_scripts_on_strings_answer_as_redis_server(nursery: trio.Nursery) -> None:
    node: NodeHandle = await start_redis_node(nursery)

    def both() -> tuple[list[Any], list[Any]]:
        with redis_server() as port:
            theirs = _run(port)
        return theirs, _run(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert theirs[0] == b"OK"
    assert theirs[2] is None
    assert ours == theirs


async def test_redis_py_lock(nursery: trio.Nursery) -> None:
    node: NodeHandle = await start_redis_node(nursery)

    def use_locks() -> None:
        with redis.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=5) as client:
            first = client.lock("jobs", timeout=5)
            second = client.lock("jobs", timeout=5, blocking=False)
            assert first.acquire(blocking=False)
            assert not second.acquire()  # (held)
            assert first.owned()
            assert not second.owned()
            ttl = client.pttl("jobs")
            assert 0 < ttl <= 5000
            assert first.extend(10)
            assert client.pttl("jobs") > 5000
            assert first.reacquire()
            first.release()
            assert client.get("jobs") is None
            assert second.acquire()
            with pytest.raises(redis.exceptions.LockNotOwnedError):
                first.do_release(b"stale")  # (not the holder's token: the release script refuses)
            assert second.owned()
            second.release()

    await trio.to_thread.run_sync(use_locks)
