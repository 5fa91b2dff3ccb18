"""Clients learn the cluster: INFO's ``connect_urls`` lists every node's client URL, learned over
routes, and clients that take INFO updates hear of every node that comes or goes.

Nodes run in the test's trio nursery on 127.0.0.1; nats-py scenarios run in a worker thread
(``in_asyncio``), except where a node must die by SIGKILL, which takes a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import pytest
import trio

from cluster.config import ClusterConfig
from cluster.decoder import FrameDecoder
from cluster.frames import (
    MAX_CLIENT_URLS,
    ClientUrls,
    Hello,
    LinkError,
    RouteHello,
    encode,
)
from node.broker import Broker
from node.config.load import from_mapping
from node.config.options import Config, ConfigError
from node.nats.client import ClientConnection
from node.nats.discovery import MAX_CONNECT_URLS, connect_urls, interface_addresses, own_urls
from node.nats.protocol import writer as w
from node.run.cli import command_line_config
from node.run.launch import NodeHandle
from pipeline.local import free_port
from tests.cluster.impostor import Impostor, route_hello
from tests.node.monitoring.test_monitor_redis import get_json
from tests.node.nats.infos import W, Watcher, still_served
from tests.support import Box, in_asyncio, settled, start_node, until

pytestmark = pytest.mark.timeout(60)

ROUTES = ClusterConfig(name="disc", host="127.0.0.1", port=0, ping_interval=0.5, ping_max=3)


def url(node: NodeHandle) -> str:
    return f"127.0.0.1:{node.port}"


async def start_member(
    nursery: trio.Nursery, name: str, seed: NodeHandle | None = None, **cluster: Any
) -> NodeHandle:
    routes = ROUTES.evolve(**cluster)
    if seed is not None:
        routes = routes.evolve(seeds=(f"nats://127.0.0.1:{seed.cluster_port}",))
    return await start_node(nursery, Config(server_name=name, cluster=routes))


async def meshed(*nodes: NodeHandle) -> None:
    """Wait until every node sees every other's client URLs."""

    def done() -> bool:
        return all(sorted(n.server.broker.connect_urls) == sorted(url(m) for m in nodes) for n in nodes)

    await until(done)


# -- the URLs a node advertises ------------------------------------------------------------------


def test_a_node_advertises_its_listening_address_or_what_it_is_told() -> None:
    assert own_urls("127.0.0.1", 4222, None) == ("127.0.0.1:4222",)
    assert own_urls("127.0.0.1", 4222, "nats.example.com") == ("nats.example.com:4222",)
    assert own_urls("0.0.0.0", 4222, "nats.example.com:443") == ("nats.example.com:443",)
    assert own_urls("127.0.0.1", 4222, "[2001:db8::1]:5222") == ("[2001:db8::1]:5222",)


def test_listening_everywhere_advertises_the_reachable_interface_addresses() -> None:
    ipv4 = interface_addresses(ipv6=False)
    assert all(":" not in a and not a.startswith(("127.", "169.254.")) for a in ipv4)
    assert own_urls("0.0.0.0", 4222, None) == tuple(f"{a}:4222" for a in ipv4)
    both = own_urls("::", 4222, None)
    assert set(both) >= {f"{a}:4222" for a in ipv4}
    assert not any(u.startswith(("[::1]", "[fe80")) for u in both)


def test_connect_urls_put_the_node_first_each_once_and_bounded() -> None:
    assert connect_urls(["a:1"], ["b:2", "a:1", "c:3", "b:2"]) == ["a:1", "b:2", "c:3"]
    many = [f"10.0.{i // 256}.{i % 256}:4222" for i in range(MAX_CONNECT_URLS * 2)]
    assert len(connect_urls(["a:1"], many)) == MAX_CONNECT_URLS


def test_options_from_a_file_and_flags() -> None:
    config = from_mapping(
        {
            "client_advertise": "nats.example.com:4333",
            "lame_duck_duration": "30s",
            "lame_duck_grace_period": "5s",
            "cluster": {"no_advertise": True},
        }
    )
    assert config.client_advertise == "nats.example.com:4333"
    assert (config.lame_duck_duration, config.lame_duck_grace_period) == (30.0, 5.0)
    assert config.cluster is not None
    assert config.cluster.no_advertise
    assert (Config().lame_duck_duration, Config().lame_duck_grace_period) == (120.0, 10.0)
    flags = command_line_config(
        [
            *("--client_advertise", "10.1.2.3", "--lame_duck_duration", "1m"),
            *("--lame_duck_grace_period", "1.5", "--cluster", "nats://127.0.0.1:6222"),
            "--no_advertise",
        ]
    )
    assert flags.client_advertise == "10.1.2.3"
    assert (flags.lame_duck_duration, flags.lame_duck_grace_period) == (60.0, 1.5)
    assert flags.cluster is not None
    assert flags.cluster.no_advertise


@pytest.mark.parametrize(
    "options",
    [
        {"client_advertise": "host:notaport"},
        {"client_advertise": "host:70000"},
        {"client_advertise": ":4222"},
        {"client_advertise": "two words:4222"},
        {"lame_duck_duration": "10s", "lame_duck_grace_period": "10s"},
        {"lame_duck_grace_period": "-1s"},
    ],
)
def test_bad_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        from_mapping(options)


# -- the link protocol carries them, checked -----------------------------------------------------


def decode(data: bytes) -> list[Any]:
    decoder = FrameDecoder(1 << 20)
    decoder.open()
    decoder.receive_data(data)
    return list(decoder.frames())


def test_client_urls_travel_in_hello_and_clients_frames() -> None:
    urls = ("127.0.0.1:4222", "[::1]:4223", "nats-1.example.com:4222")
    (hello,) = decode(route_hello("A" * 8, client_urls=urls))
    assert isinstance(hello, Hello)
    assert isinstance(hello.info, RouteHello)
    assert hello.info.client_urls == urls
    assert decode(encode(ClientUrls(urls))) == [ClientUrls(urls)]
    assert decode(encode(ClientUrls(()))) == [ClientUrls(())]


@pytest.mark.parametrize(
    "urls",
    [
        tuple(f"10.0.0.{i}:4222" for i in range(MAX_CLIENT_URLS + 1)),
        ("x" * 300 + ":4222",),
        ("host",),
        ("host:0",),
        ("host:99999",),
        ("ho st:4222",),
        ('evil","ldm":true,"x":"y:1',),
        ("host\r\nPING:4222",),
        ("[::1:4222",),
    ],
)
def test_odd_client_urls_are_a_protocol_error(urls: tuple[str, ...]) -> None:
    with pytest.raises(LinkError):
        decode(encode(ClientUrls(urls)))
    with pytest.raises(LinkError):
        decode(route_hello("A" * 8, client_urls=urls))


# -- clients that take INFO updates --------------------------------------------------------------


def drain(conn: ClientConnection) -> bytes:
    data = conn.take_output()
    conn.output_sent(data, len(data))
    return bytes(data)


def test_an_info_update_follows_the_first_pong_of_a_protocol_1_client() -> None:
    broker = Broker(Config())
    broker.connect_urls = ["127.0.0.1:1", "127.0.0.1:2"]
    old = ClientConnection(broker, 1)
    new = ClientConnection(broker, 2)
    for conn, protocol in ((old, 0), (new, 1)):
        conn.greeting()
        conn.receive_data(w.connect({"verbose": False, "protocol": protocol}))
        conn.update_info()  # (no updates before the first PONG: it must come first)
        conn.receive_data(b"PING\r\n")
    assert drain(old).endswith(b"PONG\r\n")
    pong, info = drain(new).split(b"\r\n")[-3:-1]
    assert pong == b"PONG"
    fields = json.loads(info.removeprefix(b"INFO "))
    assert fields["connect_info"] is True
    assert fields["connect_urls"] == ["127.0.0.1:1", "127.0.0.1:2"]
    new.receive_data(b"PING\r\n")
    assert drain(new) == b"PONG\r\n"  # only the first
    old.update_info(lame_duck=True)
    new.update_info(lame_duck=True)
    assert drain(old) == b""
    assert json.loads(drain(new).removeprefix(b"INFO "))["ldm"] is True


async def test_connect_urls_list_every_node_and_updates_follow_members(
    nursery: trio.Nursery,
) -> None:
    n1 = await start_member(nursery, "n1")
    alone = await Watcher.connect(n1.port)
    assert "connect_urls" not in alone.greeting  # (nobody else to tell of yet)
    n2 = await start_member(nursery, "n2", seed=n1)
    info = await alone.info_where(lambda i: len(i.get("connect_urls", ())) == 2)
    assert info["connect_urls"] == [url(n1), url(n2)]
    n3 = await start_member(nursery, "n3", seed=n1)
    await meshed(n1, n2, n3)
    info = await alone.info_where(lambda i: len(i["connect_urls"]) == 3)
    assert info["connect_urls"][0] == url(n1)
    assert sorted(info["connect_urls"]) == sorted([url(n1), url(n2), url(n3)])
    late = await Watcher.connect(n3.port, protocol=0)
    assert late.greeting["connect_urls"][0] == url(n3)
    assert len(late.greeting["connect_urls"]) == 3

    n2.shutdown()
    info = await alone.info_where(lambda i: len(i["connect_urls"]) == 2)
    assert info["connect_urls"] == [url(n1), url(n3)]
    await alone.aclose()
    await late.aclose()


async def test_varz_shows_the_connect_urls(nursery: trio.Nursery) -> None:
    n1 = await start_node(nursery, Config(server_name="n1", cluster=ROUTES, http_port=0))
    n2 = await start_member(nursery, "n2", seed=n1)
    await meshed(n1, n2)
    varz = await trio.to_thread.run_sync(get_json, n1, "/varz")
    assert varz["connect_urls"] == [url(n1), url(n2)]


async def test_nats_py_discovers_servers_as_they_join(nursery: trio.Nursery) -> None:
    n1 = await start_member(nursery, "n1")
    joined: list[NodeHandle] = []

    async def scenario() -> list[list[str]]:
        discovered = asyncio.Event()

        async def on_discovery() -> None:
            discovered.set()

        nc = await asyncio.wait_for(
            nats.connect(f"nats://{url(n1)}", discovered_server_cb=on_discovery, allow_reconnect=False),
            W,
        )
        seen = []
        for name in ("n2", "n3"):
            discovered.clear()
            joined.append(trio.from_thread.run(start_member, nursery, name, n1))
            await asyncio.wait_for(discovered.wait(), W)
            seen.append([f"{s.hostname}:{s.port}" for s in nc.discovered_servers])
        await nc.close()
        return seen

    seen = await in_asyncio(scenario)
    n2, n3 = joined
    assert seen[0] == [url(n2)]
    assert sorted(seen[1]) == sorted([url(n2), url(n3)])


async def test_no_advertise_keeps_a_node_out_of_everyones_connect_urls(
    nursery: trio.Nursery,
) -> None:
    n1 = await start_member(nursery, "n1")
    hidden = await start_member(nursery, "hidden", seed=n1, no_advertise=True)
    n3 = await start_member(nursery, "n3", seed=n1)
    await until(lambda: sorted(n1.server.broker.connect_urls) == sorted([url(n1), url(n3)]))
    await until(lambda: sorted(n3.server.broker.connect_urls) == sorted([url(n1), url(n3)]))
    assert hidden.server.broker.connect_urls == []  # nor does it tell its clients of the others
    watcher = await Watcher.connect(hidden.port)
    assert "connect_urls" not in watcher.greeting
    assert "connect_urls" not in await watcher.next_info()  # (the first PONG's update)
    await watcher.aclose()


async def test_client_advertise_is_what_peers_pass_on(nursery: trio.Nursery) -> None:
    n1 = await start_member(nursery, "n1")
    config = Config(
        server_name="n2",
        client_advertise="127.0.0.1:4999",
        cluster=ROUTES.evolve(seeds=(f"nats://127.0.0.1:{n1.cluster_port}",)),
    )
    n2 = await start_node(nursery, config)
    await until(lambda: n1.server.broker.connect_urls == [url(n1), "127.0.0.1:4999"])
    assert n2.server.broker.connect_urls == ["127.0.0.1:4999", url(n1)]


@pytest.mark.slow
@pytest.mark.timeout(60)
async def test_a_reloaded_client_advertise_reaches_the_peers(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    n1 = await start_member(nursery, "n1")
    conf = tmp_path / "node.toml"
    conf.write_text(
        f'server_name = "n2"\nhost = "127.0.0.1"\nport = {free_port()}\n'
        'client_advertise = "127.0.0.1:4999"\n'
        f'[cluster]\nname = "disc"\nhost = "127.0.0.1"\nport = {free_port()}\n'
        f'routes = ["nats://127.0.0.1:{n1.cluster_port}"]\n'
    )
    args = [sys.executable, "-m", "node.run.cli", "serve", "-c", str(conf)]
    process = await trio.lowlevel.open_process(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await until(lambda: n1.server.broker.connect_urls == [url(n1), "127.0.0.1:4999"])
        conf.write_text(conf.read_text().replace(":4999", ":5999"))
        process.send_signal(signal.SIGHUP)
        await until(lambda: n1.server.broker.connect_urls == [url(n1), "127.0.0.1:5999"])
    finally:
        process.kill()
        with trio.fail_after(W):
            await process.wait()


# -- failover ------------------------------------------------------------------------------------


def spawn(client_port: int, seed: int) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", str(client_port),
        "-n", "doomed", "--cluster", f"nats://127.0.0.1:{free_port()}", "--cluster_name", "disc",
        "--routes", f"nats://127.0.0.1:{seed}",
    ]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


RECONNECT_WAIT = 0.5


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_client_given_one_url_fails_over_to_a_discovered_node(nursery: trio.Nursery) -> None:
    survivor = await start_member(nursery, "survivor")
    doomed_port = free_port()
    doomed = spawn(doomed_port, survivor.cluster_port or 0)
    try:
        await until(lambda: f"127.0.0.1:{doomed_port}" in survivor.server.broker.connect_urls)

        async def scenario() -> list[Any]:
            reconnected = asyncio.Event()

            async def on_reconnect() -> None:
                reconnected.set()

            nc = await asyncio.wait_for(
                nats.connect(
                    f"nats://127.0.0.1:{doomed_port}",
                    reconnected_cb=on_reconnect,
                    max_reconnect_attempts=5,
                    reconnect_time_wait=RECONNECT_WAIT,
                    connect_timeout=1,
                ),
                W,
            )
            try:
                connected = asyncio.get_running_loop().time()
                await settled(lambda: len(nc.discovered_servers) == 1)
                box = Box()
                await nc.subscribe("after.failover", cb=box.take)
                await nc.flush()
                # nats-py waits reconnect_time_wait before redialing a server it dialed that
                # recently (the doomed one, if its shuffle tries that first): a client connected
                # for longer redials at once, and learns at once that the doomed node is gone.
                await asyncio.sleep(connected + RECONNECT_WAIT - asyncio.get_running_loop().time())
                doomed.kill()
                # The reconnect, to a node it was never given. (Without it the client gives up
                # on the doomed node after max_reconnect_attempts, well within W, and closes.)
                async with asyncio.timeout(W):
                    await reconnected.wait()
                return await still_served(
                    nc, box, f"nats://{url(survivor)}", "after.failover", b"still here"
                )
            finally:
                await nc.close()

        assert await in_asyncio(scenario) == [url(survivor), [b"still here"]]
    finally:
        doomed.kill()
        doomed.wait(W)


# -- a hostile peer ------------------------------------------------------------------------------


async def test_a_peer_advertising_too_much_is_cut_off_and_changes_stay_bounded(
    nursery: trio.Nursery,
) -> None:
    node = await start_member(nursery, "target", secret="s3cret")
    assert node.cluster_port is not None
    assert node.routes is not None
    watcher = await Watcher.connect(node.port)
    assert "connect_urls" not in await watcher.next_info()

    async def dial() -> Impostor:
        stream = await trio.open_tcp_stream("127.0.0.1", node.cluster_port or 0)
        return Impostor(stream, "route", "s3cret")

    many = tuple(f"127.0.0.1:{10000 + i}" for i in range(MAX_CLIENT_URLS + 1))
    greedy = await dial()
    await greedy.authenticate(route_hello("G" * 56, "disc", client_urls=many))
    await greedy.drain()
    await greedy.aclose()
    assert node.server.broker.connect_urls == []
    assert not node.routes.peer_client_urls()

    churner = await dial()
    most = many[:MAX_CLIENT_URLS]
    assert await churner.authenticate(route_hello("C" * 56, "disc", client_urls=most)) is not None
    info = await watcher.info_where(lambda i: len(i.get("connect_urls", ())) == 1 + MAX_CLIENT_URLS)
    assert info["connect_urls"] == [url(node), *most]
    for round_ in range(200):  # a peer that keeps changing its mind replaces, never adds
        shifted = tuple(f"127.0.0.1:{20000 + round_ * 40 + i}" for i in range(MAX_CLIENT_URLS))
        await churner.send(encode(ClientUrls(shifted)))
    last = shifted
    await watcher.info_where(lambda i: i["connect_urls"][1:] == list(last))
    assert node.server.broker.connect_urls == [url(node), *last]
    assert node.routes.peer_client_urls() == list(last)
    await churner.send(encode(ClientUrls(('bad"url:1',))))
    await churner.drain()  # the node closes the link on the bad URL
    info = await watcher.info_where(lambda i: len(i["connect_urls"]) == 1)
    assert info["connect_urls"] == [url(node)]
    await churner.aclose()
    await watcher.aclose()
