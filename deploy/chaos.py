"""Chaos against a running docker-compose deployment of pubmesh (see docker-compose.yml).

    python deploy/chaos.py [--project NAME] [--seed N] [--cycles N] [--down start|skip] [--json FILE]

Each cycle picks (from the seed) a fault and where, and applies it for a few seconds while real NATS
clients publish from one cluster to the other:

* ``disconnect``: a node's container leaves the compose network (routes, gateways and its clients
  all break at once), then rejoins it;
* ``pause``: a container is frozen (a partition: connections stay open, nothing answers);
* ``kill``: SIGKILL, then the container is started again;
* ``disconnect-two``, ``pause-two``: the same to two nodes of one cluster at once;
* ``gateway-cut``: only the gateway links between the clusters go silent (packets to and from the
  gateway port dropped by iptables in the network namespace of every node of one cluster; routes
  and clients are untouched, and no route may drop meanwhile). This needs root, ``nsenter`` and
  ``iptables`` on the host; without them the fault becomes ``cluster-pause`` (every node of one
  cluster frozen), which is what the report then names;
* ``fill-disk``: a node's store (``/data``) is filled to the last byte, then emptied again. Only
  nodes whose ``/data`` is a small file system of its own (at most ``SMALL_DISK``, as
  ``deploy/small-disks.yml`` gives cluster east) are filled, and the fault is drawn only if there
  are such nodes: filling a volume on the host's disk would fill the host's.

After each heal it waits (bounded) until the deployment has converged, judged only from the nodes'
monitoring endpoints: every node routed to every other node of its cluster over its whole pool of
connections; every node's outbound gateway to each other cluster answered by an inbound link from it
on the node it names (and no inbound link left over); every one of these connections heard from
within the last ``FRESH`` seconds on both ends (so a connection that carries frames one way only,
as a TCP connection can for a while after a partition heals, is not taken for a healthy one); each
node's remote interest from each route peer exactly that peer's local subscriptions (``/routez``
against ``/subsz``), and from each gateway exactly the other cluster's (``/gatewayz``). Then it
checks traffic with fresh clients on every node: a plain subscriber on each node gets every message
published from every node once, and a queue group with a member on each node gets each message
exactly once; duplicates are counted after a grace period for late ones. Traffic during the fault
may be lost (delivery is at most once), but never duplicated.

Subjects carry a run id, so runs never see each other's messages. Whatever a run broke is healed
when it ends, however it ends (Ctrl-C and SIGTERM included). Nodes found down at the start (exited,
paused, off the network, with rules or a full disk of an interrupted run left) are repaired and started
(``--down start``, the default) or left out of the run (``--down skip``), saying which.

It prints a table and, with ``--json``, writes the report; the exit status is 1 on any violation.
Only the containers of the deployment and 127.0.0.1 are touched.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

if not __package__:  # (run as a script: the repository's root makes ``deploy`` importable)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from deploy.chaos_streams import Streams, group_disagreements

SINGLE_FAULTS = ("disconnect", "pause", "kill")
PAIR_FAULTS = ("disconnect-two", "pause-two")
GATEWAY_FAULT = "gateway-cut"
FALLBACK_FAULT = "cluster-pause"
FAULTS = (*SINGLE_FAULTS, *PAIR_FAULTS, GATEWAY_FAULT)
DISK_FAULT = "fill-disk"
SMALL_DISK = 1 << 30
"""Bytes a node's store may hold at most for ``fill-disk`` to fill it."""
FILLER = "/data/chaos-filler"
FILL = f"""
with open({FILLER!r}, "ab", buffering=0) as file:
    for size in (1 << 20, 1 << 12, 1):
        try:
            while True:
                file.write(bytes(size))
        except OSError:
            pass
"""
SIZE = "import shutil; print(shutil.disk_usage('/data').total)"
CONVERGE_TIMEOUT = 90.0
DOCKER_TIMEOUT = 60.0
HEAL_ATTEMPTS = 2
TRAFFIC_TIMEOUT = 20.0
GRACE = 1.0
"""Seconds to go on counting after the last message expected, for late duplicates."""
FRESH = 2.0
"""Seconds within which both ends of every link must have heard from the other (the deployment's
links ping every second and give up after three silent ones)."""
PROBES = 20
"""Messages each node publishes to each probe subject per check."""
GATEWAY_PORT = 7222
CHAIN_RULES = [
    [chain, "-p", "tcp", flag, str(GATEWAY_PORT)]
    for chain in ("INPUT", "OUTPUT")
    for flag in ("--dport", "--sport")
]
RULE_TAG = ["-m", "comment", "--comment", "pubmesh-chaos", "-j", "DROP"]

Interest = set[tuple[str, str, str]]
"""(account, subject, queue group or "")."""


@dataclass
class Node:
    service: str
    cluster: str
    container: str
    client_port: int
    http_port: int
    redis_port: int = 0
    small_disk: bool = False
    """Its store is a small file system of its own, which ``fill-disk`` may fill."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=2) as reply:
            doc: dict[str, Any] = json.load(reply)
            return doc


@dataclass
class Cycle:
    number: int
    fault: str
    node: str
    """The node faulted ("east1"), the nodes ("east1+east2"), or the cluster ("west")."""
    seconds: float
    during_sent: int = 0
    during_received: int = 0
    duplicates: int = 0
    stream_acked: int = 0
    """Stream writes acknowledged while the fault lasted (``deploy/chaos_streams.py``)."""
    stream_unknown: int = 0
    """Stream writes whose outcome is unknown (an error or a lost connection)."""
    converged_after: float | None = None
    """Seconds from the heal until the monitoring endpoints agreed (None: not within the bound)."""
    traffic_ok: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.converged_after is not None and self.traffic_ok


# -- the deployment ----------------------------------------------------------------------------


def docker(*args: str) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _inspect(container: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(docker("inspect", container))[0]
    return doc


def _host_port(info: dict[str, Any], port: str) -> int:
    """The 127.0.0.1 port published for a container port (from the bindings asked for, if the
    container is not running and so has none in effect)."""
    bound = (info["NetworkSettings"].get("Ports") or {}).get(port) or info["HostConfig"][
        "PortBindings"
    ].get(port)
    return int(bound[0]["HostPort"])


@dataclass
class Deployment:
    project: str
    network: str
    nodes: list[Node]
    """The nodes taking part (running, or started by ``repair``)."""
    left_out: list[str] = field(default_factory=list)

    @property
    def clusters(self) -> list[str]:
        return sorted({n.cluster for n in self.nodes})

    def node(self, service: str) -> Node:
        return next(n for n in self.nodes if n.service == service)


def containers(project: str) -> dict[str, dict[str, Any]]:
    """The deployment's nodes' containers by service name, as ``docker inspect`` shows them (a
    service that publishes no client port, such as ``deploy/small-disks.yml``'s holder of disks,
    is not a node)."""
    label = f"label=com.docker.compose.project={project}"
    found = {}
    for container in docker("ps", "-a", "--filter", label, "--format", "{{.ID}}").split():
        info = _inspect(container)
        if "4222/tcp" in (info["HostConfig"].get("PortBindings") or {}):
            found[info["Config"]["Labels"]["com.docker.compose.service"]] = info
    if not found:
        raise SystemExit(f"chaos: no containers of compose project {project!r} (is it up?)")
    return found


def discover(project: str, skip: frozenset[str] = frozenset()) -> tuple[list[Node], str]:
    """The deployment's nodes (by service name, leaving out ``skip``) and its network."""
    nodes = [
        Node(
            service,
            service.rstrip("0123456789"),
            info["Id"][:12],
            _host_port(info, "4222/tcp"),
            _host_port(info, "8222/tcp"),
            _host_port(info, "6379/tcp"),
            info["State"].get("Running", False) and _small_disk(info["Id"][:12]),
        )
        for service, info in containers(project).items()
        if service not in skip
    ]
    return sorted(nodes, key=lambda n: n.service), f"{project}_mesh"


def _small_disk(container: str) -> bool:
    try:
        return int(docker("exec", container, "python3", "-c", SIZE)) <= SMALL_DISK
    except (RuntimeError, ValueError):
        return False


def _filled(container: str) -> bool:
    return docker("exec", container, "sh", "-c", f"test -e {FILLER} && echo yes || true") == "yes"


def _gateway_rules(container: str, action: str) -> None:
    """Insert (``-I``) or delete (``-D``) the rules dropping gateway traffic, inside the
    container's own network namespace."""
    pid = docker("inspect", "-f", "{{.State.Pid}}", container)
    for rule in CHAIN_RULES:
        command = ["nsenter", "-t", pid, "-n", "iptables", action, *rule, *RULE_TAG]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0 and action == "-I":
            raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def gateway_cut_possible() -> bool:
    return (
        os.geteuid() == 0
        and shutil.which("nsenter") is not None
        and shutil.which("iptables") is not None
    )


def _has_gateway_rules(container: str) -> bool:
    pid = docker("inspect", "-f", "{{.State.Pid}}", container)
    done = subprocess.run(
        ["nsenter", "-t", pid, "-n", "iptables", "-S"], capture_output=True, text=True, check=False
    )
    return "pubmesh-chaos" in done.stdout


def repair(project: str, start_down: bool) -> Deployment:
    """The deployment as a run starts: what an interrupted run or an operator left broken is put
    right (paused thawed, rules removed, network rejoined) and stopped nodes are started, or with
    ``start_down`` False left out of the run. Says what it did."""
    network = f"{project}_mesh"
    skip = set()
    for service, info in sorted(containers(project).items()):
        state, container = info["State"], info["Id"][:12]
        if state.get("Paused"):
            print(f"chaos: {service} was paused: unpausing it", file=sys.stderr)
            docker("unpause", container)
        if not state.get("Running"):
            if not start_down:
                print(f"chaos: {service} is {state.get('Status')}: left out", file=sys.stderr)
                skip.add(service)
                continue
            print(f"chaos: {service} was {state.get('Status')}: starting it", file=sys.stderr)
            docker("start", container)
            continue
        if network not in (info["NetworkSettings"].get("Networks") or {}):
            print(f"chaos: {service} was off {network}: reconnecting it", file=sys.stderr)
            docker("network", "connect", "--alias", service, network, container)
        if gateway_cut_possible() and _has_gateway_rules(container):
            print(f"chaos: {service} had gateway rules of a run left: removing them", file=sys.stderr)
            _gateway_rules(container, "-D")
        if _filled(container):
            print(f"chaos: {service} had its disk filled by a run: emptying it", file=sys.stderr)
            docker("exec", container, "rm", "-f", FILLER)
    nodes, network = discover(project, frozenset(skip))
    return Deployment(project, network, nodes, sorted(skip))


@dataclass
class Breakage:
    """What a run has broken and not yet healed, so that it is healed however the run ends."""

    network: str
    open: list[tuple[str, list[Node]]] = field(default_factory=list)

    def apply(self, fault: str, nodes: list[Node]) -> None:
        self.open.append((fault, nodes))  # (first: a half-applied fault is healed too)
        for node in nodes:
            if fault.startswith("disconnect"):
                docker("network", "disconnect", self.network, node.container)
            elif fault.startswith("pause") or fault == FALLBACK_FAULT:
                docker("pause", node.container)
            elif fault == GATEWAY_FAULT:
                _gateway_rules(node.container, "-I")
            elif fault == DISK_FAULT:
                docker("exec", node.container, "python3", "-c", FILL)
            else:
                docker("kill", node.container)

    def heal(self) -> list[str]:
        """Undo everything still broken, newest first; what could not be undone, as problems.

        Each step looks before it acts, so a step that timed out (the Docker daemon stalled, as
        it does now and then on a loaded machine) is tried once more before it counts."""
        problems = []
        while self.open:
            fault, nodes = self.open.pop()
            for node in nodes:
                for attempt in range(HEAL_ATTEMPTS):
                    try:
                        self._heal(fault, node)
                        break
                    except subprocess.TimeoutExpired as exc:
                        if attempt + 1 == HEAL_ATTEMPTS:
                            problems.append(f"could not heal {fault} of {node.service}: {exc}")
                    except RuntimeError as exc:
                        problems.append(f"could not heal {fault} of {node.service}: {exc}")
                        break
        return problems

    def _heal(self, fault: str, node: Node) -> None:
        if fault.startswith("disconnect"):
            networks = docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", node.container)
            if self.network not in networks:
                docker("network", "connect", "--alias", node.service, self.network, node.container)
        elif fault.startswith("pause") or fault == FALLBACK_FAULT:
            if docker("inspect", "-f", "{{.State.Paused}}", node.container) == "true":
                docker("unpause", node.container)
        elif fault == GATEWAY_FAULT:
            _gateway_rules(node.container, "-D")
        elif fault == DISK_FAULT:
            docker("exec", node.container, "rm", "-f", FILLER)
        elif docker("inspect", "-f", "{{.State.Running}}", node.container) != "true":
            docker("start", node.container)


# -- convergence, from the monitoring endpoints ------------------------------------------------

_GO_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z")


def go_seconds(text: str) -> float:
    """A Go time (as the endpoints write ``now`` and ``last_activity``), in seconds since the epoch."""
    match = _GO_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Go time: {text!r}")
    whole = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return whole.timestamp() + float(f"0.{match[2] or 0}")


def local_interest(node: Node) -> Interest:
    doc = node.get("/subsz?subs=1&limit=100000")
    subs = doc.get("subscriptions_list", []) + doc.get("patterns_list", [])  # (patterns: as announced)
    return {(s["account"], s["subject"], s.get("qgroup", "")) for s in subs}


def _stale(owner: str, what: str, doc: dict[str, Any], connection: dict[str, Any]) -> Iterator[str]:
    idle = go_seconds(doc["now"]) - go_seconds(connection["last_activity"])
    if idle > FRESH:
        yield f"{owner}'s {what} has heard nothing for {idle:.1f} s"


def disagreements(nodes: list[Node]) -> list[str]:
    """What keeps the deployment from having converged; empty once it has."""
    problems: list[str] = []
    try:
        local = {n.service: local_interest(n) for n in nodes}
        varz = {n.service: n.get("/varz") for n in nodes}
        routez = {n.service: n.get("/routez?subs=detail") for n in nodes}
        gatewayz = {n.service: n.get("/gatewayz?accs=1&subs=detail") for n in nodes}
        problems += group_disagreements(nodes)
    except (OSError, ValueError) as exc:
        return [f"monitoring not answering: {exc}"]
    by_id = {routez[n.service]["server_id"]: n for n in nodes}
    clusters = {n.cluster for n in nodes}
    for node in nodes:
        name = node.service
        peers = {n.service for n in nodes if n.cluster == node.cluster and n is not node}
        pool = varz[name].get("cluster", {}).get("pool_size", 1)
        heard: dict[str, Interest] = {}
        pooled: Counter[str] = Counter()
        for route in routez[name]["routes"]:
            peer = route["remote_name"]
            got = heard.setdefault(peer, set())
            got |= {
                (s["account"], s["subject"], s.get("qgroup", ""))
                for s in route.get("subscriptions_list_detail", [])
            }
            pooled[peer] += "account" not in route  # (a pinned account's own connection aside)
            problems += _stale(name, f"route to {peer}", routez[name], route)
        if set(heard) != peers:
            problems.append(f"{name} routes to {sorted(heard)}, not {sorted(peers)}")
        for peer in sorted(peers & set(heard)):
            if pooled[peer] != pool:
                problems.append(f"{name} has {pooled[peer]} of {pool} pooled routes to {peer}")
            if heard[peer] != local[peer]:
                problems.append(f"{name} holds {len(heard[peer])} entries from {peer}, "
                                f"which has {len(local[peer])}")  # fmt: skip
        problems += _gateway_disagreements(node, nodes, clusters, local, gatewayz, by_id)
    return problems


def _gateway_disagreements(
    node: Node,
    nodes: list[Node],
    clusters: set[str],
    local: dict[str, Interest],
    gatewayz: dict[str, dict[str, Any]],
    by_id: dict[str, Node],
) -> list[str]:
    """A node's outbound gateways: one to each other cluster, answered by an inbound link on the
    node it names, both ends fresh, carrying that cluster's interest; and no inbound link to the
    node that its dialer no longer uses."""
    problems: list[str] = []
    name, doc = node.service, gatewayz[node.service]
    outbound = doc["outbound_gateways"]
    for other in sorted(clusters - {node.cluster}):
        if other not in outbound:
            problems.append(f"{name} has no gateway to {other}")
            continue
        connection = outbound[other]["connection"]
        remote = by_id.get(connection.get("name", ""))
        if remote is None or remote.cluster != other:
            problems.append(f"{name}'s gateway to {other} reaches no node of it")
            continue
        problems += _stale(name, f"gateway to {remote.service}", doc, connection)
        mine = doc["server_id"]
        answering = [
            inbound["connection"]
            for inbound in gatewayz[remote.service]["inbound_gateways"].get(node.cluster, [])
            if inbound["connection"].get("name") == mine
        ]
        if not answering:
            problems.append(f"{remote.service} has no inbound gateway from {name}, which uses one")
        for inbound in answering:
            problems += _stale(remote.service, f"gateway from {name}", gatewayz[remote.service], inbound)
        announced = {
            (s["account"], s["subject"], s.get("qgroup", ""))
            for account in outbound[other].get("accounts", [])
            for s in account.get("subscriptions_list_detail", [])
        }
        wanted = set().union(*(local[n.service] for n in nodes if n.cluster == other))
        if announced != wanted:
            problems.append(f"{name} sees {len(announced)} entries from {other}, "
                            f"which has {len(wanted)}")  # fmt: skip
    for inbounds in doc["inbound_gateways"].values():
        for inbound in inbounds:
            dialer = by_id.get(inbound["connection"].get("name", ""))
            if dialer is None:
                continue  # (a node left out of the run)
            used = gatewayz[dialer.service]["outbound_gateways"].get(node.cluster, {})
            if used.get("connection", {}).get("name") != doc["server_id"]:
                problems.append(f"{name} holds an inbound gateway from {dialer.service}, "
                                "which no longer uses it")  # fmt: skip
    return problems


async def converge(nodes: list[Node]) -> tuple[float | None, list[str]]:
    start = time.monotonic()
    problems: list[str] = []
    while time.monotonic() - start < CONVERGE_TIMEOUT:
        problems = await asyncio.to_thread(disagreements, nodes)
        if not problems:
            return time.monotonic() - start, []
        await asyncio.sleep(0.25)
    return None, problems


def route_connections(nodes: list[Node]) -> set[tuple[str, str, int, str]]:
    """Every route connection in use: (node, peer, rid, start); one that was replaced changes."""
    found = set()
    for node in nodes:
        for route in node.get("/routez")["routes"]:
            found.add((node.service, route["remote_name"], route["rid"], route["start"]))
    return found


# -- traffic -----------------------------------------------------------------------------------


async def _ignore(exc: Exception) -> None:
    """A client broken by a fault is expected; what it lost is counted, not logged."""


async def connect(node: Node) -> Client:
    return await asyncio.wait_for(nats.connect(node.url, allow_reconnect=False, error_cb=_ignore), 10)


def _duplicates(box: Counter[bytes]) -> int:
    return sum(count - 1 for count in box.values())


async def during(
    nodes: list[Node],
    cycle: Cycle,
    subject: str,
    stop: asyncio.Event,
    settled: asyncio.Event,
    rng: random.Random,
) -> None:
    """Publish from one cluster to a subscriber in the other while the fault lasts; count what
    arrived once the deployment has settled and a grace period for late duplicates has passed."""
    clusters = sorted({n.cluster for n in nodes})
    source = rng.choice([n for n in nodes if n.cluster == clusters[0]])
    sink = rng.choice([n for n in nodes if n.cluster == clusters[-1]])
    seen: Counter[bytes] = Counter()

    async def take(msg: Msg) -> None:
        seen[msg.data] += 1

    clients: list[Client] = []
    try:
        clients += [await connect(sink), await connect(source)]
        subscriber, publisher = clients
        await subscriber.subscribe(subject, cb=take)
        await subscriber.flush()
        while not stop.is_set():
            await publisher.publish(subject, b"%d" % cycle.during_sent)
            cycle.during_sent += 1
            await asyncio.sleep(0.01)
    except Exception:  # a client the fault broke: what was lost is counted
        await stop.wait()
    await settled.wait()
    await asyncio.sleep(GRACE)
    cycle.during_received = len(seen)
    cycle.duplicates = _duplicates(seen)
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


async def check_traffic(nodes: list[Node], cycle: Cycle, prefix: str) -> bool:
    """Fresh subscribers everywhere; every node publishes; plain once each, queue exactly once."""
    plain_subject, queue_subject = f"{prefix}.plain", f"{prefix}.queue"
    clients: dict[str, Client] = {}
    plain: dict[str, Counter[bytes]] = {n.service: Counter() for n in nodes}
    queued: Counter[bytes] = Counter()

    def taker(box: Counter[bytes]) -> Any:
        async def take(msg: Msg) -> None:
            box[msg.data] += 1

        return take

    try:
        for node in nodes:
            clients[node.service] = await connect(node)
        for name, client in clients.items():
            await client.subscribe(plain_subject, cb=taker(plain[name]))
            await client.subscribe(queue_subject, queue="workers", cb=taker(queued))
            await client.flush()
        converged, problems = await converge(nodes)  # the new interest has reached everyone
        if converged is None:
            cycle.problems += [f"probe interest did not spread: {p}" for p in problems[:3]]
            return False
        expected = {b"%s %d" % (n.service.encode(), i) for n in nodes for i in range(PROBES)}
        for name, client in clients.items():
            for i in range(PROBES):
                await client.publish(plain_subject, b"%s %d" % (name.encode(), i))
                await client.publish(queue_subject, b"%s %d" % (name.encode(), i))
            await client.flush()
        deadline = time.monotonic() + TRAFFIC_TIMEOUT
        while time.monotonic() < deadline and not (  # noqa: ASYNC110 (callbacks count)
            all(set(box) == expected for box in plain.values()) and set(queued) == expected
        ):
            await asyncio.sleep(0.05)
        await asyncio.sleep(GRACE)  # late duplicates
        ok = True
        for name, box in plain.items():
            if set(box) != expected or _duplicates(box):
                missing = Counter(m.split()[0].decode() for m in expected - set(box))
                lost = f" (missing: {dict(sorted(missing.items()))} by sender)" if missing else ""
                cycle.problems.append(f"{name}: {len(box)} of {len(expected)} plain messages, "
                                      f"{_duplicates(box)} duplicates{lost}")  # fmt: skip
                ok = False
        if set(queued) != expected or _duplicates(queued):
            cycle.problems.append(f"queue group: {len(queued)} of {len(expected)} messages, "
                                  f"{_duplicates(queued)} duplicates")  # fmt: skip
            ok = False
        if not ok:  # what the links looked like just after: the evidence for the report
            after = await asyncio.to_thread(disagreements, nodes)
            cycle.problems += [f"after the check: {p}" for p in after[:5]]
        return ok
    finally:
        for client in clients.values():
            with contextlib.suppress(Exception):  # one the node broke
                await client.close()


# -- the run -----------------------------------------------------------------------------------


def pick(rng: random.Random, deployment: Deployment, faults: tuple[str, ...]) -> tuple[str, list[Node]]:
    """A fault and the nodes it strikes."""
    fault = rng.choice(faults)
    nodes = deployment.nodes
    if fault in SINGLE_FAULTS:
        return fault, [rng.choice(nodes)]
    if fault == DISK_FAULT:
        return fault, [rng.choice([n for n in nodes if n.small_disk])]
    cluster = rng.choice(
        [c for c in deployment.clusters if sum(n.cluster == c for n in nodes) >= 2]
        if fault in PAIR_FAULTS
        else deployment.clusters
    )
    members = [n for n in nodes if n.cluster == cluster]
    if fault in PAIR_FAULTS:
        return fault, sorted(rng.sample(members, 2), key=lambda n: n.service)
    return (fault if gateway_cut_possible() else FALLBACK_FAULT), members


async def disk_error_seen(node: Node, seconds: float) -> bool:
    """Whether, within ``seconds`` (all of which it waits), ``node``'s ``/raftz`` named a disk
    error (the stream writers go on writing, so a full disk is met soon)."""
    seen = False
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not seen:
            with contextlib.suppress(OSError, ValueError):
                groups = (await asyncio.to_thread(node.get, "/raftz"))["groups"]
                seen = any(group["disk_error"] for group in groups)
        await asyncio.sleep(0.25)
    return seen


def kinds(deployment: Deployment) -> tuple[str, ...]:
    """The faults a run draws from: the gateway cut only between clusters, filling a disk only
    where one is small."""
    faults = FAULTS if len(deployment.clusters) > 1 else (*SINGLE_FAULTS, *PAIR_FAULTS)
    if any(node.small_disk for node in deployment.nodes):
        faults = (*faults, DISK_FAULT)
    return faults


def _label(fault: str, struck: list[Node]) -> str:
    if fault in (GATEWAY_FAULT, FALLBACK_FAULT):
        return struck[0].cluster
    return "+".join(n.service for n in struck)


async def run(
    deployment: Deployment, seed: int, cycles: int, breakage: Breakage, run_id: str
) -> list[Cycle]:
    rng = random.Random(seed)
    converged, problems = await converge(deployment.nodes)
    if converged is None:
        raise SystemExit(
            "chaos: the deployment has not converged to begin with:\n  " + "\n  ".join(problems)
        )
    faults = kinds(deployment)
    streams = Streams(run_id)
    holders = Streams.holders(deployment.nodes)
    report = []
    for number in range(1, cycles + 1):
        fault, struck = pick(rng, deployment, faults)
        cycle = Cycle(number, fault, _label(fault, struck), round(rng.uniform(2, 6), 1))
        print(f"cycle {number}: {cycle.fault} {cycle.node} for {cycle.seconds} s", file=sys.stderr)
        prefix = f"chaos.{run_id}.{number}"
        routes_before = route_connections(deployment.nodes) if fault == GATEWAY_FAULT else set()
        stop, settled = asyncio.Event(), asyncio.Event()
        traffic = asyncio.create_task(
            during(deployment.nodes, cycle, f"{prefix}.during", stop, settled, rng)
        )
        writing = asyncio.create_task(
            streams.write([n for n in deployment.nodes if n.service in holders], stop)
        )
        try:
            await asyncio.sleep(0.5)
            breakage.apply(fault, struck)
            if fault == DISK_FAULT:
                if not await disk_error_seen(struck[0], cycle.seconds):
                    cycle.problems.append(f"{struck[0].service} never said its disk was full")
            else:
                await asyncio.sleep(cycle.seconds)
            cycle.problems += breakage.heal()
            healed = time.monotonic()
            stop.set()
            if fault == "kill":  # a restarted container may be given other host ports
                deployment.nodes, _ = discover(deployment.project, frozenset(deployment.left_out))
            converged, problems = await converge(deployment.nodes)
            settled.set()
            await traffic
            cycle.stream_acked, cycle.stream_unknown = await writing
        finally:
            stop.set()
            settled.set()
            for task in (traffic, writing):
                if not task.done():
                    task.cancel()
        cycle.converged_after = None if converged is None else round(time.monotonic() - healed, 2)
        cycle.problems += problems[:5]
        if cycle.duplicates:
            cycle.problems.append(f"{cycle.duplicates} duplicate deliveries during the fault")
        if fault == GATEWAY_FAULT:
            replaced = routes_before - route_connections(deployment.nodes)
            if replaced:
                cycle.problems.append(f"route connections dropped in a gateway-only fault: "
                                      f"{sorted({(n, p) for n, p, _, _ in replaced})}")  # fmt: skip
        if converged is not None:
            try:
                cycle.traffic_ok = await check_traffic(deployment.nodes, cycle, f"{prefix}.check")
            except (OSError, TimeoutError, nats.errors.Error) as exc:  # a node refusing clients
                cycle.problems.append(f"traffic check failed: {exc!r}")
            if holders:
                cycle.problems += await streams.judge(
                    [n for n in deployment.nodes if n.service in holders]
                )
        report.append(cycle)
    return report


def table(report: list[Cycle], seed: int) -> str:
    lines = [
        f"chaos, seed {seed}: {sum(c.ok for c in report)} of {len(report)} cycles healed cleanly",
        "",
        "| cycle | fault | node | s | sent / received during | stream writes acked / unknown "
        "| converged after (s) | traffic | result |",
        "|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for c in report:
        after = "never" if c.converged_after is None else f"{c.converged_after:.1f}"
        lines.append(
            f"| {c.number} | {c.fault} | {c.node} | {c.seconds} | {c.during_sent} / {c.during_received} "
            f"| {c.stream_acked} / {c.stream_unknown} | {after} "
            f"| {'ok' if c.traffic_ok else 'FAILED'} | {'ok' if c.ok else 'VIOLATION'} |"
        )
    for c in report:
        lines += [f"- cycle {c.number}: {p}" for p in c.problems]
    return "\n".join(lines)


def default_project() -> str:
    """The project name docker-compose gives a deployment started in the repository's root."""
    name = os.environ.get("COMPOSE_PROJECT_NAME") or Path(__file__).resolve().parents[1].name
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # (SIGTERM ends a run as Ctrl-C does: healing what it broke)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--project",
        default=default_project(),
        help="the compose project name (default: as docker-compose names it, from the directory)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument(
        "--down",
        choices=("start", "skip"),
        default="start",
        help="nodes found stopped: start them (default), or leave them out of the run",
    )
    parser.add_argument("--json", metavar="FILE", help="write the report here as JSON")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    deployment = repair(args.project, args.down == "start")
    breakage = Breakage(deployment.network)
    run_id = secrets.token_hex(4)
    print(f"chaos: run {run_id}, subjects chaos.{run_id}.*", file=sys.stderr)
    if not gateway_cut_possible():
        print(f"chaos: no nsenter/iptables as root: {GATEWAY_FAULT} is replaced by "
              f"{FALLBACK_FAULT} (every node of one cluster paused)", file=sys.stderr)  # fmt: skip
    try:
        report = asyncio.run(run(deployment, args.seed, args.cycles, breakage, run_id))
    except KeyboardInterrupt:
        print("chaos: interrupted; healing what this run broke", file=sys.stderr)
        return 130
    finally:
        for problem in breakage.heal():
            print(f"chaos: {problem}", file=sys.stderr)
    print(table(report, args.seed))
    if args.json:
        doc = {
            "seed": args.seed,
            "run": run_id,
            "left_out": deployment.left_out,
            "ok": all(c.ok for c in report),
            "cycles": [asdict(c) | {"ok": c.ok} for c in report],
        }
        with open(args.json, "w") as out:
            json.dump(doc, out, indent=2)
    return 0 if all(c.ok for c in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
