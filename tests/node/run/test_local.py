"""``pubmesh local`` (``make run``): two clusters of real processes, joined by gateways, that a
nats-py client can use across the clusters, stopped cleanly by SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys

import nats
import pytest
from nats.aio.msg import Msg

from node.run.local import REDIS_OFFSET, parse_clusters, plan
from pubmesh_testing.processes import free_base

pytestmark = pytest.mark.timeout(60)

W = 20.0


def test_the_plan_numbers_ports_from_the_base_across_clusters() -> None:
    nodes = plan(parse_clusters("east:2,west"), 4222)
    assert [n.name for n in nodes] == ["east1", "east2", "west1"]
    assert [n.cluster for n in nodes] == ["east", "east", "west"]
    ports = [(n.client_port, n.route_port, n.gateway_port, n.http_port, n.redis_port) for n in nodes]
    assert ports == [
        (4222, 6222, 7222, 8222, 6379),
        (4223, 6223, 7223, 8223, 6380),
        (4224, 6224, 7224, 8224, 6381),
    ]
    east2 = nodes[1].command(nodes)
    assert east2[east2.index("--routes") + 1] == "nats://127.0.0.1:6222"  # its cluster's seed
    assert east2[east2.index("--gateways") + 1] == "west=nats://127.0.0.1:7224"
    assert "--routes" not in nodes[2].command(nodes)  # the first of its cluster
    solo = plan(parse_clusters("solo:2"), 4222)
    assert "--gateways" not in solo[1].command(solo)  # one cluster: routes only


@pytest.mark.parametrize("text", ["", "east:0", "east:x", "east,east", ":3"])
def test_bad_cluster_lists_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected|twice"):
        parse_clusters(text)


@pytest.mark.slow
def test_make_run_starts_two_clusters_that_carry_messages_across() -> None:
    base = free_base(3)
    command = [sys.executable, "-m", "node.run.cli", "local", "--clusters", "east:2,west:1"]
    with subprocess.Popen(
        [*command, "--base-port", str(base)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as process:
        try:
            assert asyncio.run(across(base)) == [b"hello from east"]
            with socket.create_connection(("127.0.0.1", base + REDIS_OFFSET + 2), timeout=W) as redis:
                redis.sendall(b"PING\r\n")  # west1's Redis port
                assert redis.recv(64) == b"+PONG\r\n"
            process.send_signal(signal.SIGTERM)
            table, _ = process.communicate(timeout=W)
            assert process.returncode == 0
        finally:
            process.kill()
    assert b"3 nodes in 2 clusters" in table
    assert b"nats://127.0.0.1:%d" % (base + 3000 + 2) in table  # west1's gateway port
    assert b"redis://127.0.0.1:%d" % (base + REDIS_OFFSET + 2) in table


async def across(base: int) -> list[bytes]:
    """Subscribe at west1, publish at east2 until west's interest has come over the gateway."""
    async with asyncio.timeout(W):
        while True:
            try:
                west = await nats.connect(f"nats://127.0.0.1:{base + 2}", allow_reconnect=False)
                east = await nats.connect(f"nats://127.0.0.1:{base + 1}", allow_reconnect=False)
                break
            except Exception:  # not listening yet
                await asyncio.sleep(0.1)
        got: list[bytes] = []

        async def take(msg: Msg) -> None:
            got.append(msg.data)

        await west.subscribe("greetings", cb=take)
        await west.flush()
        while not got:
            await east.publish("greetings", b"hello from east")
            await east.flush()
            await asyncio.sleep(0.05)
        await east.close()
        await west.close()
        return got[:1]
