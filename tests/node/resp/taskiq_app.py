"""A taskiq application on a Redis stream broker with a Redis result backend, for the worker
process ``test_taskiq`` starts (``taskiq worker tests.node.resp.taskiq_app:broker``).

The server's URL comes from ``PUBMESH_TASKIQ_URL``. The task reports the PID of the process that
ran it, so the test can tell whether the worker process was replaced between batches.
"""

from __future__ import annotations

import os

from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

__all__ = ["TASK_NAME", "broker", "make_broker", "work"]

TASK_NAME = "pubmesh.work"
URL_VARIABLE = "PUBMESH_TASKIQ_URL"
RESULT_SECONDS = 60
"""Results are kept with ``SET ... EX`` for this long."""
LOCK_SECONDS = 30.0
"""The worker's lock around reclaiming idle entries (a redis-py ``Lock``: ``SET NX PX``, scripts)."""


def make_broker(url: str) -> RedisStreamBroker:
    backend: RedisAsyncResultBackend[object] = RedisAsyncResultBackend(
        url, result_ex_time=RESULT_SECONDS
    )
    broker = RedisStreamBroker(url, unacknowledged_lock_timeout=LOCK_SECONDS, xread_block=500)
    return broker.with_result_backend(backend)


async def work(n: int) -> tuple[int, int]:
    """``n`` squared, and the PID of the process that computed it."""
    return n * n, os.getpid()


broker = make_broker(os.environ.get(URL_VARIABLE, "redis://127.0.0.1:6379"))
broker.register_task(work, task_name=TASK_NAME)
