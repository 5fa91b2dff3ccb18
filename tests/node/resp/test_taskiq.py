"""taskiq with taskiq-redis against a node: a real ``taskiq worker`` process takes tasks from a
``RedisStreamBroker`` stream (``XREADGROUP``, ``XACK``, and after each batch a redis-py ``Lock``
around ``XAUTOCLAIM``: ``SET NX PX`` and scripts) and stores their results through
``RedisAsyncResultBackend`` (``SET ... EX``). Several batches run on one worker process, which must
neither die nor be replaced, nor log a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import trio

from tests.node.resp import taskiq_app
from tests.support import in_asyncio, start_redis_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

BATCHES = 4
TASKS = 25
RESULT_TIMEOUT = 20.0
STOP_TIMEOUT = 3.0
REPO = Path(__file__).resolve().parents[3]


def _worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, taskiq_app.URL_VARIABLE: url, "PYTHONPATH": str(REPO)}
    with log.open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "taskiq", "worker", "tests.node.resp.taskiq_app:broker",
             "--workers", "1", "--max-fails", "0"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """Stop the worker's process group: SIGINT, then SIGKILL for what still runs (taskiq's
    supervisor does not always exit on SIGINT, whatever the server)."""
    os.killpg(worker.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(STOP_TIMEOUT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signal.SIGKILL)
    worker.wait()


async def _batches(url: str) -> list[list[tuple[int, int]]]:
    """Kick ``TASKS`` tasks per batch and wait for every result before the next batch."""
    broker = taskiq_app.make_broker(url)
    task = broker.register_task(taskiq_app.work, task_name=taskiq_app.TASK_NAME)
    await broker.startup()
    try:
        batches = []
        for b in range(BATCHES):
            sent = [await task.kiq(b * TASKS + i) for i in range(TASKS)]
            results = [await s.wait_result(timeout=RESULT_TIMEOUT) for s in sent]
            assert not any(r.is_err for r in results), [r.error for r in results if r.is_err]
            batches.append([(int(r.return_value[0]), int(r.return_value[1])) for r in results])
        return batches
    finally:
        await broker.shutdown()


async def test_taskiq_worker_runs_batches_without_restarting(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    node = await start_redis_node(nursery)
    url = f"redis://127.0.0.1:{node.redis_port}"
    log = tmp_path / "worker.err"
    worker = _worker(url, log)
    try:
        batches = await in_asyncio(lambda: _batches(url))
        still_running = worker.poll() is None
    finally:
        await trio.to_thread.run_sync(_stop, worker)
    stderr = log.read_text(errors="replace")
    assert still_running, stderr
    assert [[value for value, _ in batch] for batch in batches] == [
        [n * n for n in range(b * TASKS, (b + 1) * TASKS)] for b in range(BATCHES)
    ]
    pids = {pid for batch in batches for _, pid in batch}
    assert len(pids) == 1, f"tasks ran in processes {pids}: the worker was restarted"
    assert worker.pid not in pids  # (the worker process, not the supervisor that started it)
    assert "Traceback" not in stderr, stderr
    assert "Error" not in stderr, stderr
    used = await trio.to_thread.run_sync(_commands_used, url)
    for name in ("xreadgroup", "xack", "xautoclaim", "evalsha", "set"):
        assert used.get(name, 0) > 0, (name, used)


def _commands_used(url: str) -> dict[str, int]:
    """Calls per command so far (``INFO commandstats``)."""
    with redis.Redis.from_url(url, socket_timeout=5) as client:
        stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
