"""The docker-compose super-cluster, built offline and run for real (routes and gateways over TLS,
with certificates from deploy/make-certs; cluster east on the small disks of deploy/small-disks.yml):
traffic across its clusters (NATS and Redis clients), and a seeded chaos run (disconnects and pauses
of one or two nodes, kills, gateway-only cuts, an east node's disk filled) that must heal every
time, and that heals what it broke when interrupted.

Without a Docker engine these tests are skipped, saying so; with PUBMESH_REQUIRE_DOCKER=1 (as CI
sets) that is a failure instead. Traffic goes only to the containers made here, over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import redis
from nats.aio.msg import Msg

from deploy.chaos import DISK_FAULT, FALLBACK_FAULT, FAULTS, Node, disagreements, discover
from node.bench.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("east1", "east2", "east3", "west1", "west2")
SETUP_TIMEOUT = 900
"""Seconds for building the image (a Debian base by debootstrap, the first time) and starting."""


def _compose_command() -> list[str] | None:
    if shutil.which("docker") is None:
        return None
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False).returncode:
        return None
    if (
        subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode
        == 0
    ):
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


COMPOSE = _compose_command()
if COMPOSE is None:
    reason = "Docker not available (no docker engine answering, or no compose): skipped"
    if os.environ.get("PUBMESH_REQUIRE_DOCKER") == "1":
        raise RuntimeError(reason.replace("skipped", "and PUBMESH_REQUIRE_DOCKER=1"))
    pytest.skip(reason, allow_module_level=True)


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout.strip()


def healthy(node: Node) -> bool:
    """Whether the image's healthcheck (GET /healthz) passes in the node's container."""
    return docker("inspect", "-f", "{{.State.Health.Status}}", node.container) == "healthy"


@pytest.fixture(scope="module")
def deployment() -> Iterator[tuple[str, list[Node]]]:
    """The compose deployment, under a project name of its own and on free host ports."""
    assert COMPOSE is not None
    image = subprocess.run(
        [str(ROOT / "deploy" / "build-image")],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT,
    )
    assert image.returncode == 0, image.stderr
    certs = subprocess.run(
        [str(ROOT / "deploy" / "make-certs")], capture_output=True, text=True, timeout=60
    )  # (kept if already there: the containers mount them from deploy/certs/)
    assert certs.returncode == 0, certs.stderr
    project = f"pubmeshtest{secrets.token_hex(3)}"
    env = dict(os.environ, PUBMESH_IMAGE=image.stdout.strip())
    ports = iter(free_port() for _ in range(3 * len(SERVICES)))
    for service in SERVICES:
        for kind in ("CLIENT", "HTTP", "REDIS"):
            env[f"{service.upper()}_{kind}"] = str(next(ports))
    compose = [*COMPOSE, "-p", project, "-f", str(ROOT / "docker-compose.yml")]
    compose += ["-f", str(ROOT / "deploy" / "small-disks.yml")]
    try:
        up = subprocess.run([*compose, "up", "-d"], env=env, capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        nodes, _ = discover(project)
        deadline = time.monotonic() + 120
        while (problems := disagreements(nodes)) or not all(healthy(n) for n in nodes):
            assert time.monotonic() < deadline, problems or "healthchecks not passing"
            time.sleep(0.5)
        yield project, nodes
    finally:
        subprocess.run(
            [*compose, "down", "-v", "--timeout", "5"], env=env, capture_output=True, timeout=300
        )


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 120)
def test_the_super_cluster_carries_traffic_across_its_clusters(
    deployment: tuple[str, list[Node]],
) -> None:
    _, nodes = deployment
    by_name = {n.service: n for n in nodes}
    assert sorted(by_name) == list(SERVICES)
    for node in nodes:
        for port in ("4222/tcp", "8222/tcp", "6379/tcp"):
            assert docker("port", node.container, port).startswith("127.0.0.1:")  # loopback only
        assert docker("exec", node.container, "id", "-u") != "0"  # not root
        assert healthy(node)
    # Routes and gateways speak only TLS: plain text to their ports is hung up on, unanswered.
    probe = (
        "import socket\n"
        "for port in (6222, 7222):\n"
        "    s = socket.create_connection(('east2', port), timeout=5)\n"
        "    s.sendall(b'CONNECT {}\\r\\n')\n"
        "    try:\n"
        "        assert s.recv(100) == b'', port\n"
        "    except ConnectionResetError:\n"
        "        pass\n"
    )
    docker("exec", by_name["east1"].container, "python3", "-c", probe)

    async def scenario() -> tuple[list[bytes], bytes]:
        west2 = await nats.connect(by_name["west2"].url, allow_reconnect=False)
        west1 = await nats.connect(by_name["west1"].url, allow_reconnect=False)
        east1 = await nats.connect(by_name["east1"].url, allow_reconnect=False)
        got: list[bytes] = []

        async def take(msg: Msg) -> None:
            got.append(msg.data)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"west1 answers " + msg.data)

        await west2.subscribe("orders.>", cb=take)
        await west1.subscribe("help", cb=answer)
        await west2.flush()
        await west1.flush()
        async with asyncio.timeout(30):
            while disagreements(nodes):  # noqa: ASYNC110 (until the new interest has crossed the gateways
                await asyncio.sleep(0.2)
            for i in range(100):
                await east1.publish("orders.eu", b"%d" % i)
            await east1.flush()
            while len(got) < 100:  # noqa: ASYNC110 (the callback counts)
                await asyncio.sleep(0.05)
            reply = await east1.request("help", b"please", timeout=10)
        for client in (west2, west1, east1):
            await client.close()
        return got, reply.data

    got, reply = asyncio.run(scenario())
    assert got == [b"%d" % i for i in range(100)]
    assert reply == b"west1 answers please"


def redis_client(node: Node) -> redis.Redis:
    """A redis-py client of the node, through the port published for its Redis port."""
    port = docker("port", node.container, "6379/tcp").splitlines()[0].rsplit(":", 1)[1]
    return redis.Redis(host="127.0.0.1", port=int(port), socket_timeout=10)


def deliveries(pubsub: Any, count: int, deadline: float) -> list[tuple[bytes, bytes]]:
    """The next ``count`` messages a subscriber gets other than probes, as (channel, payload)."""
    got: list[tuple[bytes, bytes]] = []
    while len(got) < count:
        assert time.monotonic() < deadline, got
        msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if msg is not None and msg["data"] != b"probe":
            got.append((msg["channel"], msg["data"]))
    return got


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 120)
def test_east_replicates_its_keys_on_its_three_nodes(deployment: tuple[str, list[Node]]) -> None:
    """A stream written through east2 is read through east3, and from each east node's own replica
    (READONLY); /raftz shows each node in every group of the keys, each group with one leader."""
    _, nodes = deployment
    east = [node for node in nodes if node.cluster == "east"]
    key = f"compose-{secrets.token_hex(4)}"
    writer = redis_client(next(node for node in east if node.service == "east2"))
    ids = [writer.execute_command("XADD", key, "*", "n", n) for n in range(5)]
    writer.close()
    reader = redis_client(next(node for node in east if node.service == "east3"))
    assert [entry[0] for entry in reader.execute_command("XRANGE", key, "-", "+")] == ids
    reader.close()
    for node in east:
        client = redis_client(node)
        client.execute_command("READONLY")
        deadline = time.monotonic() + 10
        while client.xlen(key) < len(ids):
            assert time.monotonic() < deadline, f"{node.service}'s replica lacks the writes"
            time.sleep(0.1)
        assert [entry[0] for entry in client.execute_command("XRANGE", key, "-", "+")] == ids
        client.close()
    leaders: dict[str, set[str]] = {}
    for node in east:
        groups = node.get("/raftz")["groups"]
        assert len(groups) == 3, node.service
        for group in groups:
            leaders.setdefault(group["name"], set()).add(group["leader"])
    assert all(len(named) == 1 and "" not in named for named in leaders.values()), leaders


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 120)
def test_redis_clients_meet_across_routes_and_gateways(deployment: tuple[str, list[Node]]) -> None:
    """A PUBLISH on east1 reaches Redis subscribers on east2 (over a route) and on west2 (over the
    gateway), on a channel that is a subject and on one that is not; a NATS publish on east3 reaches
    them too; and the nodes' /varz counts the Redis subscriptions."""
    _, nodes = deployment
    by_name = {n.service: n for n in nodes}
    publisher = redis_client(by_name["east1"])
    subscribers = [redis_client(by_name[name]).pubsub() for name in ("east2", "west2")]
    channels = [b"orders.eu", b"hello world"]
    for pubsub in subscribers:
        pubsub.subscribe(*channels)
        for _ in channels:
            assert pubsub.get_message(timeout=10) is not None  # acknowledged
    deadline = time.monotonic() + 60
    while disagreements(nodes):  # until every node has heard of the new interest
        assert time.monotonic() < deadline, disagreements(nodes)
        time.sleep(0.2)
    waiting = set(range(len(subscribers)))
    while waiting:  # until the new interest has crossed the route and the gateway
        assert time.monotonic() < deadline, f"interest never reached east1 for {waiting}"
        publisher.publish("orders.eu", "probe")
        for i in list(waiting):
            if subscribers[i].get_message(ignore_subscribe_messages=True, timeout=0.2) is not None:
                waiting.discard(i)
    for i in range(20):
        publisher.publish("orders.eu", b"%d" % i)
    publisher.publish("hello world", "x")

    async def from_nats() -> None:
        nc = await nats.connect(by_name["east3"].url, allow_reconnect=False)
        await nc.publish("orders.eu", b"from nats")
        await nc.flush()
        await nc.close()

    asyncio.run(from_nats())
    in_order = [(b"orders.eu", b"%d" % i) for i in range(20)] + [(b"hello world", b"x")]
    from_east3 = (b"orders.eu", b"from nats")  # (by another path: it may overtake east1's)
    deadline = time.monotonic() + 30
    for pubsub in subscribers:
        got = deliveries(pubsub, len(in_order) + 1, deadline)
        assert from_east3 in got
        assert [d for d in got if d != from_east3] == in_order
    for name in ("east2", "west2"):
        redis_varz = by_name[name].get("/varz")["redis"]
        assert redis_varz["port"] == 6379
        assert (redis_varz["connections"], redis_varz["subscriptions"]) == (1, 2)
        assert redis_varz["out_msgs"] >= len(in_order) + 1
    for pubsub in subscribers:
        pubsub.close()
    publisher.close()


HEALTHCHECK = [
    "python3", "-c",
    "import urllib.request as u; u.urlopen('http://127.0.0.1:8222/healthz?links=true', timeout=1)",
]  # fmt: skip
"""The healthcheck docker-compose.yml gives every node, run by hand."""


def routed_to(node: Node) -> set[str]:
    return {route["remote_name"] for route in node.get("/routez")["routes"]}


def wait_until(what: str, ready: Any, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 300)
def test_a_node_restarted_while_the_seed_is_down_rejoins_the_others(
    deployment: tuple[str, list[Node]],
) -> None:
    """Every node seeds every peer: with east1 (once the only seed) down, a restarted east2 routes
    to east3 again and both are healthy; a node cut off from its cluster is unhealthy, by the
    healthcheck and by docker's own verdict."""
    project, nodes = deployment
    by_name = {n.service: n for n in nodes}
    east1, east2, east3 = (by_name[name] for name in ("east1", "east2", "east3"))
    network = f"{project}_mesh"
    try:
        docker("stop", "--time", "1", east1.container)
        docker("restart", "--time", "1", east2.container)
        wait_until(
            "east2 and east3 never routed to each other",
            lambda: _answers(lambda: routed_to(east2) == {"east3"} and routed_to(east3) == {"east2"}),
        )
        wait_until(
            "east2 and east3 not both healthy",
            lambda: (
                docker("inspect", "-f", "{{.State.Health.Status}}", east2.container) == "healthy"
                and healthy(east3)
            ),
        )
        docker("network", "disconnect", network, east3.container)
        wait_until(
            "east3 cut off, and still passing its healthcheck",
            lambda: (
                subprocess.run(
                    ["docker", "exec", east3.container, *HEALTHCHECK], capture_output=True, check=False
                ).returncode
                != 0
            ),
        )
        wait_until(
            "docker never found east3 unhealthy",
            lambda: docker("inspect", "-f", "{{.State.Health.Status}}", east3.container) == "unhealthy",
            60,
        )
    finally:
        if network not in docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", east3.container):
            docker("network", "connect", "--alias", "east3", network, east3.container)
        docker("start", east1.container)
    wait_until(
        "the deployment did not converge again",
        lambda: not disagreements(nodes) and all(healthy(n) for n in nodes),
    )


def _answers(check: Any) -> bool:
    """``check()``, or False while a node's monitoring port is not answering (it is restarting)."""
    try:
        return bool(check())
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 300)
def test_an_interrupted_chaos_run_heals_what_it_broke(deployment: tuple[str, list[Node]]) -> None:
    """A node already down is started (and said so); Ctrl-C in the middle of a pause leaves
    nothing paused."""
    project, nodes = deployment
    west2 = next(n for n in nodes if n.service == "west2")
    docker("stop", "--time", "1", west2.container)
    chaos = subprocess.Popen(
        [sys.executable, str(ROOT / "deploy" / "chaos.py"), "--project", project, "--seed", "17",
         "--cycles", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert chaos.stderr is not None
    said = []
    for line in chaos.stderr:  # seed 17 begins with pause-two of west1 and west2
        said.append(line)
        if line.startswith("cycle 1: pause-two"):
            break
    time.sleep(2)  # (the fault comes 0.5 s after the cycle is announced)
    paused = docker("ps", "--filter", f"label=com.docker.compose.project={project}",
                    "--filter", "status=paused", "--format", "{{.Names}}")  # fmt: skip
    chaos.send_signal(signal.SIGINT)
    _, rest = chaos.communicate(timeout=60)
    said.append(rest)
    assert chaos.returncode == 130, "".join(said)
    assert "chaos: west2 was exited: starting it\n" in said
    assert "interrupted; healing what this run broke" in rest
    assert len(paused.split()) == 2, paused  # it was in the middle of the fault
    assert docker("ps", "--filter", f"label=com.docker.compose.project={project}",
                  "--filter", "status=paused", "--format", "{{.Names}}") == ""  # fmt: skip
    wait_until(
        "the deployment did not converge again",
        lambda: not disagreements(nodes) and all(healthy(n) for n in nodes),
    )


@pytest.mark.slow
@pytest.mark.timeout(SETUP_TIMEOUT + 600)
def test_a_seeded_chaos_run_heals_every_cycle(
    deployment: tuple[str, list[Node]], tmp_path: Path
) -> None:
    project, _ = deployment
    cycles = os.environ.get("CHAOS_CYCLES", "8")
    report_path = tmp_path / "chaos.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "chaos.py"), "--project", project,
         "--seed", "36", "--cycles", cycles, "--json", str(report_path)],
        capture_output=True, text=True, timeout=540, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(report_path.read_text())
    assert report["ok"] is True
    assert len(report["cycles"]) == int(cycles)
    kinds = {c["fault"] for c in report["cycles"]}
    assert kinds <= {*FAULTS, FALLBACK_FAULT, DISK_FAULT}
    if int(cycles) >= 8:  # seed 36: every kind of fault (or its stand-in) by cycle 8
        assert len(kinds) == len(FAULTS) + 1
        (filled,) = [c for c in report["cycles"] if c["fault"] == DISK_FAULT]
        assert filled["node"].startswith("east")
    assert all(c["converged_after"] is not None and c["traffic_ok"] for c in report["cycles"])
    assert sum(c["stream_acked"] for c in report["cycles"]) > 0, "no stream write met the faults"
    assert "cycles healed cleanly" in run.stdout
