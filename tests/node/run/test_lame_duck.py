"""Lame duck mode: a node stops taking clients, tells them (``ldm``) and its route peers, then closes
its clients a few at a time and stops; ``pubmesh serve`` enters it on SIGUSR2 and exits 0.

Nodes run in the test's trio nursery on 127.0.0.1, or as a ``pubmesh serve`` process where a signal
and an exit status are what is tested; nats-py scenarios run in a worker thread.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from typing import Any

import nats
import pytest
import trio

from cluster.config import ClusterConfig
from node.config.options import Config
from node.run.launch import NodeHandle
from node.server import LAME_DUCK_MAX_PAUSE, LAME_DUCK_MIN_PAUSE, ClosingPace, closing_pace
from routing import Message
from tests.live import live_node
from tests.node.nats.infos import W, Watcher, still_served
from tests.support import Box, in_asyncio, start_node, until

pytestmark = pytest.mark.timeout(60)

ROUTES = ClusterConfig(name="ldm", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)
QUICK: dict[str, Any] = {"lame_duck_duration": 1.0, "lame_duck_grace_period": 0.2}


def url(node: NodeHandle) -> str:
    return f"127.0.0.1:{node.port}"


async def pair(nursery: trio.Nursery, **options: Any) -> tuple[NodeHandle, NodeHandle]:
    """Two nodes of a cluster, each knowing the other's client URL."""
    n1 = await start_node(nursery, Config(server_name="n1", cluster=ROUTES, **options))
    seeds = (f"nats://127.0.0.1:{n1.cluster_port}",)
    n2 = await start_node(nursery, Config(server_name="n2", cluster=ROUTES.evolve(seeds=seeds)))
    await until(lambda: len(n1.server.broker.connect_urls) == len(n2.server.broker.connect_urls) == 2)
    return n1, n2


async def refused(node: NodeHandle) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", node.port)
    except OSError:
        return True
    await trio.aclose_forcefully(stream)
    return False


def test_clients_close_one_by_one_or_in_batches_over_the_duration() -> None:
    assert closing_pace(10, 120.0, 10.0) == ClosingPace(1, LAME_DUCK_MAX_PAUSE)
    assert closing_pace(100, 12.0, 2.0) == ClosingPace(1, 0.1)
    assert closing_pace(100_000, 3.0, 2.0) == ClosingPace(100, LAME_DUCK_MIN_PAUSE)
    assert closing_pace(3, 5.0, 5.0) == ClosingPace(1, 1.0 / 3)  # (at least a second)


@pytest.mark.slow
async def test_lame_duck_moves_clients_to_the_other_node_and_stops(nursery: trio.Nursery) -> None:
    n1, n2 = await pair(nursery, **QUICK)
    watcher = await Watcher.connect(n1.port)
    await watcher.next_info()  # (the first PONG's update)
    elsewhere = await Watcher.connect(n2.port)
    await elsewhere.next_info()
    ready = trio.Event()

    async def scenario() -> list[Any]:
        lame = asyncio.Event()
        moved = asyncio.Event()

        async def on_lame_duck() -> None:
            lame.set()

        async def on_reconnect() -> None:
            moved.set()

        nc = await asyncio.wait_for(
            nats.connect(
                f"nats://{url(n1)}", lame_duck_mode_cb=on_lame_duck, reconnected_cb=on_reconnect
            ),
            W,
        )
        box = Box()
        await nc.subscribe("moved", cb=box.take)
        await nc.flush()
        trio.from_thread.run_sync(ready.set)
        await asyncio.wait_for(lame.wait(), W)
        await asyncio.wait_for(moved.wait(), W)  # closed by n1, it reconnects to n2
        return await still_served(nc, box, f"nats://{url(n2)}", "moved", b"hello again")

    async def lame_duck() -> None:
        await ready.wait()
        n1.lame_duck()

    nursery.start_soon(lame_duck)
    at, got = await in_asyncio(scenario)
    assert (at, got) == (url(n2), [b"hello again"])

    info = await watcher.info_where(lambda i: i.get("ldm"))
    assert info["connect_urls"] == [url(n2)]  # only the others: come back here no more
    assert (await elsewhere.info_where(lambda i: True))["connect_urls"] == [url(n2)]
    assert await watcher.closed()
    await watcher.aclose()
    with trio.fail_after(W):
        await n1.finished.wait()
    assert n1.server.broker.clients == {}
    assert await refused(n1)
    assert n2.server.broker.connect_urls == [url(n2)]
    await elsewhere.aclose()


async def test_no_new_clients_during_the_grace_period(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(lame_duck_duration=30.0, lame_duck_grace_period=20.0))
    watcher = await Watcher.connect(node.port)
    await watcher.next_info()
    node.lame_duck()
    info = await watcher.next_info()
    assert info["ldm"] is True
    assert "connect_urls" not in info
    assert await refused(node)
    assert not node.finished.is_set()  # (still in its grace period, its client still served)
    await watcher.stream.send_all(b"PING\r\n")
    assert await watcher.line() == b"PONG"
    node.shutdown()  # ends the grace period early
    assert await watcher.closed()
    await watcher.aclose()
    with trio.fail_after(W):
        await node.finished.wait()


async def test_a_node_without_clients_stops_at_once(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(lame_duck_duration=60.0, lame_duck_grace_period=30.0))
    node.lame_duck()
    with trio.fail_after(W):
        await node.finished.wait()


@pytest.mark.slow
@pytest.mark.timeout(30)
async def test_sigusr2_closes_every_client_and_the_process_exits_0() -> None:
    flags = ("--lame_duck_duration", "1.5s", "--lame_duck_grace_period", "200ms")
    with live_node(*flags) as node:
        watchers = [await Watcher.connect(node.port, protocol=i % 2) for i in range(6)]
        for watcher in watchers[1::2]:
            await watcher.next_info()
        node.process.send_signal(signal.SIGUSR2)
        for watcher in watchers[1::2]:
            assert (await watcher.info_where(lambda i: True))["ldm"] is True
        with trio.fail_after(W):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", node.port)
                except OSError:
                    break
                await trio.aclose_forcefully(stream)
                await trio.sleep(0.01)
        for watcher in watchers:
            assert await watcher.closed()
            await watcher.aclose()
        with trio.fail_after(W):
            while node.process.poll() is None:  # noqa: ASYNC110 (a process announces nothing)
                await trio.sleep(0.02)
        assert node.process.returncode == 0


NODE_SCRIPT = """
const { connect, Events } = require("nats");
(async () => {
  const nc = await connect({ servers: process.argv[1], reconnectTimeWait: 100 });
  const sub = nc.subscribe("moved", { max: 1 });
  await nc.flush();
  console.log("ready");
  for await (const s of nc.status()) {
    const added = s.type === Events.Update ? s.data.added || [] : [];
    if (added.length) console.log("discovered " + added);
    if (s.type === Events.LDM) console.log("ldm");
    if (s.type === Events.Reconnect) { console.log("reconnected " + s.data); break; }
  }
  for await (const m of sub) console.log("got " + new TextDecoder().decode(m.data));
  await nc.close();
})().catch((e) => { console.log("error " + e); process.exit(1); });
"""


def node_js_nats() -> bool:
    """Whether Node.js finds npm's ``nats`` package (installed where ``NODE_PATH`` points)."""
    try:
        found = subprocess.run(["node", "-e", "require('nats')"], capture_output=True, timeout=W)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not node_js_nats(), reason="needs node and npm's nats (NODE_PATH)")
async def test_nats_js_discovers_hears_lame_duck_and_moves(nursery: trio.Nursery) -> None:
    n1 = await start_node(nursery, Config(server_name="n1", cluster=ROUTES, **QUICK))
    process = await trio.lowlevel.open_process(
        ["node", "-e", NODE_SCRIPT, f"nats://{url(n1)}"], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    lines = LineReader(process.stdout)
    try:
        assert await lines.next() == "ready"
        seeds = (f"nats://127.0.0.1:{n1.cluster_port}",)
        n2 = await start_node(nursery, Config(server_name="n2", cluster=ROUTES.evolve(seeds=seeds)))
        assert await lines.next() == f"discovered {url(n2)}"
        n1.lame_duck()
        assert await lines.next() == "ldm"
        assert await lines.next() == f"reconnected {url(n2)}"
        # (the client's subscription moves with it: publish once n2 has it, not merely the client)
        await until(lambda: bool(n2.server.broker.account("$G").sublist.match("moved").plain))
        n2.server.broker.publish(n2.server.broker.account("$G"), Message(b"moved", None, None, b"hi"))
        assert await lines.next() == "got hi"
        with trio.fail_after(W):
            assert await process.wait() == 0
    finally:
        process.kill()
        await process.wait()


class LineReader:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> str:
        with trio.fail_after(W):
            while b"\n" not in self.buffer:
                chunk = await self.stream.receive_some()
                assert chunk, f"the script ended: {self.buffer!r}"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()
