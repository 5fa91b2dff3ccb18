"""A pipeline of writes through a node that does not lead their keys: sent to the leader at once,
run there in the order they were sent, answered in that order."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import trio

from node.data.streams import parse_id
from tests.node.replicated.test_path import NAMES, a_led_key, entries, start_nodes
from tests.support import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

ROUNDS = 600


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def pipeline(port: int, requests: list[bytes], replies: int) -> list[bytes]:
    """Send every request at once; the first line of each reply, in order."""
    lines: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"".join(requests))
        data = b""
        while len(lines) < replies:
            chunk = sock.recv(1 << 16)
            assert chunk, "the connection closed"
            data += chunk
            *whole, data = data.split(b"\r\n")
            lines += whole
    return lines


async def test_writes_pipelined_through_a_follower_run_in_order(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    counter, stream = b"{%s}n" % tag, b"{%s}s" % tag
    requests = []
    for n in range(ROUNDS):
        requests.append(command(b"INCR", counter))
        requests.append(command(b"XADD", stream, b"*", b"n", b"%d" % n))
        if n % 100 == 99:  # (a read in the pipeline sees every write before it, none after)
            requests.append(command(b"XLEN", stream))
    started = time.monotonic()
    lines = await trio.to_thread.run_sync(
        pipeline, nodes[follower].redis_port or 0, requests, 2 * ROUNDS + ROUNDS // 100 + ROUNDS
    )
    elapsed = time.monotonic() - started
    print(f"{2 * ROUNDS} writes pipelined through a follower: {2 * ROUNDS / elapsed:,.0f}/s")
    counts = [int(line[1:]) for line in lines if line.startswith(b":")]
    ids = [line for line in lines if line and line[:1] not in (b":", b"$")]
    assert counts == [x for n in range(ROUNDS) for x in ([n + 1, n + 1] if n % 100 == 99 else [n + 1])]
    assert len(ids) == ROUNDS
    assert [parse_id(i) for i in ids] == sorted(parse_id(i) for i in ids)  # (run as sent)
    for handle in nodes.values():
        await until(lambda h=handle: entries(h, stream) == [parse_id(i) for i in ids])  # type: ignore[misc]


async def test_a_pipeline_keeps_its_order_across_a_change_of_leader(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A follower's client pipelines INCRs without pause while a third node takes the group over:
    the writes in flight to the old leader are passed on to the new one, those sent after reach it
    directly, and still every INCR runs in the order sent (the replies rise, none twice)."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower, third = (name for name in NAMES if name != leader)
    counter, total = b"{%s}n" % tag, 4000

    def run() -> list[bytes]:
        lines: list[bytes] = []
        with socket.create_connection(
            ("127.0.0.1", nodes[follower].redis_port or 0), timeout=30
        ) as sock:
            sock.settimeout(30)
            data = b""
            for batch in range(total // 100):
                sock.sendall(command(b"INCR", counter) * 100)
                if batch == 10:
                    with socket.create_connection(("127.0.0.1", nodes[third].redis_port or 0)) as t:
                        t.sendall(command(b"CLUSTER", b"FAILOVER"))
                        assert t.recv(100) == b"+OK\r\n"
                time.sleep(0.005)
                while len(lines) < (batch - 5) * 100:  # (keep a few batches in flight)
                    data += sock.recv(1 << 16)
                    *whole, data = data.split(b"\r\n")
                    lines += whole
            while len(lines) < total:
                chunk = sock.recv(1 << 16)
                assert chunk
                data += chunk
                *whole, data = data.split(b"\r\n")
                lines += whole
        return lines

    lines = await trio.to_thread.run_sync(run)
    errors = [line for line in lines if line.startswith(b"-")]
    assert all(b"CLUSTERDOWN" in e for e in errors)  # (one whose leader changed: may have run)
    values = [int(line[1:]) for line in lines if line.startswith(b":")]
    assert values == sorted(set(values))  # (run in the order sent, none twice)
    assert len(values) + len(errors) == total


async def test_writes_silenced_by_client_reply_stay_silent_when_pipelined(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    key = b"{%s}quiet" % tag
    requests = [
        command(b"CLIENT", b"REPLY", b"OFF"),
        *[command(b"INCR", key)] * 50,
        command(b"CLIENT", b"REPLY", b"SKIP"),
        command(b"INCR", key),
        command(b"CLIENT", b"REPLY", b"ON"),
        command(b"GET", key),
    ]
    lines = await trio.to_thread.run_sync(pipeline, nodes[follower].redis_port or 0, requests, 3)
    assert lines == [b"+OK", b"$2", b"51"]
