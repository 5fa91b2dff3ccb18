"""redis-cli against a node: ``MONITOR`` shows what another client runs (its AUTH redacted), and
``--stat`` prints sane figures (keys, memory, clients, requests, connections)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import redis
import trio

from node.config.options import Config, UserConfig
from tests.support import start_redis_node

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli (redis-tools)"),
]

USER, PASSWORD = "alice", "s3cret-pw"
WAIT = 10.0
_STAT_ROW = re.compile(
    rb"^(\d+) +([\d.]+[BKMG]) +(\d+) +(\d+) +(\d+) \(\+(\d+)\) +(\d+) *$", re.MULTILINE
)
"""A data row of ``--stat``: keys, memory, clients, blocked, requests (+since the last row),
connections."""


async def _cli(port: int, *args: str) -> trio.Process:
    # (redis-cli's output to a pipe is block-buffered: line-buffer it where coreutils can)
    unbuffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    return await trio.lowlevel.open_process(
        [*unbuffered, "redis-cli", "-h", "127.0.0.1", "-p", str(port),
         "--user", USER, "--pass", PASSWORD, "--no-auth-warning", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


async def _read_until(process: trio.Process, done: re.Pattern[bytes] | bytes) -> bytes:
    """What the process printed, up to the point where ``done`` is found in it."""
    assert process.stdout is not None
    out = bytearray()
    with trio.fail_after(WAIT):
        while not (done.search(out) if isinstance(done, re.Pattern) else done in out):
            chunk = await process.stdout.receive_some()
            assert chunk, f"redis-cli ended: {bytes(out)!r}"
            out += chunk
    return bytes(out)


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, username=USER, password=PASSWORD, socket_timeout=5)


async def _users_node(nursery: trio.Nursery) -> int:
    node = await start_redis_node(nursery, Config(users=(UserConfig(user=USER, password=PASSWORD),)))
    return node.redis_port or 0


async def test_monitor_shows_another_clients_commands(nursery: trio.Nursery) -> None:
    port = await _users_node(nursery)
    monitor = await _cli(port, "MONITOR")
    try:
        await _read_until(monitor, b"OK\n")

        def work() -> None:
            with _client(port) as client:  # (signs in with HELLO 3 AUTH)
                client.execute_command("AUTH", USER, PASSWORD)
                client.set("greeting", "hello world")
                assert client.get("greeting") == b"hello world"

        await trio.to_thread.run_sync(work)
        out = await _read_until(monitor, b'"GET" "greeting"')
    finally:
        monitor.kill()
        await monitor.wait()
    lines = out.decode().splitlines()
    line = re.compile(r'^\d+\.\d{6} \[0 127\.0\.0\.1:\d+\] "(.*)"$')
    shown = [m[1].split('" "') for m in map(line.match, lines) if m]
    assert ["HELLO", "3", "AUTH", "(redacted)", "(redacted)"] in shown, lines
    assert ["AUTH", "(redacted)", "(redacted)"] in shown, lines
    assert ["SET", "greeting", "hello world"] in shown, lines
    assert ["GET", "greeting"] in shown, lines
    assert PASSWORD not in out.decode()


async def test_stat_prints_sane_figures(nursery: trio.Nursery) -> None:
    port = await _users_node(nursery)

    def fill() -> None:
        with _client(port) as client:
            client.mset({f"k{i}": i for i in range(5)})

    await trio.to_thread.run_sync(fill)
    stat = await _cli(port, "--stat", "-i", "0.1")
    try:
        out = await _read_until(stat, re.compile(rb"(?:.*\n){2}(?:(?:\d.*\n)){3}"))
    finally:
        stat.kill()
        await stat.wait()
    assert b"-9223372036854775808" not in out, out
    rows = _STAT_ROW.findall(out)
    assert len(rows) >= 3, out
    for keys, memory, clients, blocked, _, _, connections in rows:
        assert int(keys) == 5
        assert float(memory[:-1]) > 0
        assert int(clients) >= 1
        assert int(blocked) == 0
        assert int(connections) >= 2  # (the filler's and redis-cli's)
    totals = [int(row[4]) for row in rows]
    assert totals == sorted(totals), out
    assert totals[-1] > totals[0], out  # (its own INFO calls count)
