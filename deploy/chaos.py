"""Chaos against a running docker-compose deployment of pubmesh (see docker-compose.yml).

    python deploy/chaos.py [--project NAME] [--seed N] [--cycles N] [--json FILE]

Each cycle picks (from the seed) a node and a fault, and applies it for a few seconds while real NATS
clients publish across clusters:

* ``disconnect``: the node's container leaves the compose network (routes, gateways and its clients
  all break at once), then rejoins it;
* ``pause``: the container is frozen (a partition: connections stay open, nothing answers);
* ``kill``: SIGKILL, then the container is started again.

After each heal it waits (bounded) until the deployment has converged, judged only from the nodes'
monitoring endpoints: every node routed to every other node of its cluster and holding an outbound
gateway to the other cluster; each node's remote interest from each route peer exactly that peer's
local subscriptions (``/routez`` against ``/subsz``), and from each gateway exactly the other
cluster's (``/gatewayz``). Then it checks traffic with fresh clients on every node: a plain
subscriber on each node gets every message published from every node once, and a queue group with a
member on each node gets each message exactly once. Traffic during the fault may be lost (delivery is
at most once), but never duplicated.

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
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

FAULTS = ("disconnect", "pause", "kill")
CONVERGE_TIMEOUT = 90.0
TRAFFIC_TIMEOUT = 20.0
PROBES = 20
"""Messages each node publishes to each probe subject per check."""

SERVICE_LABEL = '{{index .Config.Labels "com.docker.compose.service"}}'

Interest = set[tuple[str, str, str]]
"""(account, subject, queue group or "")."""


@dataclass
class Node:
    service: str
    cluster: str
    container: str
    client_port: int
    http_port: int

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
    seconds: float
    during_sent: int = 0
    during_received: int = 0
    duplicates: int = 0
    converged_after: float | None = None
    """Seconds from the heal until the monitoring endpoints agreed (None: not within the bound)."""
    traffic_ok: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.converged_after is not None and self.traffic_ok


# -- the deployment ----------------------------------------------------------------------------


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def discover(project: str) -> tuple[list[Node], str]:
    """The deployment's nodes (by service name) and its network."""
    label = f"label=com.docker.compose.project={project}"
    nodes = []
    for container in docker("ps", "-a", "--filter", label, "--format", "{{.ID}}").split():
        service = docker(
            "inspect", "-f", '{{index .Config.Labels "com.docker.compose.service"}}', container
        )
        client = docker("port", container, "4222/tcp").splitlines()[0].rsplit(":", 1)[1]
        http = docker("port", container, "8222/tcp").splitlines()[0].rsplit(":", 1)[1]
        cluster = service.rstrip("0123456789")
        nodes.append(Node(service, cluster, container, int(client), int(http)))
    if not nodes:
        raise SystemExit(f"chaos: no containers of compose project {project!r} (is it up?)")
    return sorted(nodes, key=lambda n: n.service), f"{project}_mesh"


def apply(fault: str, node: Node, network: str) -> None:
    if fault == "disconnect":
        docker("network", "disconnect", network, node.container)
    elif fault == "pause":
        docker("pause", node.container)
    else:
        docker("kill", node.container)


def heal(fault: str, node: Node, network: str) -> None:
    if fault == "disconnect":
        docker("network", "connect", "--alias", node.service, network, node.container)
    elif fault == "pause":
        docker("unpause", node.container)
    else:
        docker("start", node.container)


# -- convergence, from the monitoring endpoints ------------------------------------------------


def local_interest(node: Node) -> Interest:
    doc = node.get("/subsz?subs=1&limit=100000")
    subs = doc.get("subscriptions_list", []) + doc.get("patterns_list", [])  # (patterns: as announced)
    return {(s["account"], s["subject"], s.get("qgroup", "")) for s in subs}


def disagreements(nodes: list[Node]) -> list[str]:
    """What keeps the deployment from having converged; empty once it has."""
    problems = []
    try:
        local = {n.service: local_interest(n) for n in nodes}
        routez = {n.service: n.get("/routez?subs=detail") for n in nodes}
        gatewayz = {n.service: n.get("/gatewayz?accs=1&subs=detail") for n in nodes}
    except OSError as exc:
        return [f"monitoring not answering: {exc}"]
    clusters = {n.cluster for n in nodes}
    for node in nodes:
        peers = {n.service for n in nodes if n.cluster == node.cluster and n is not node}
        heard: dict[str, Interest] = {}
        for route in routez[node.service]["routes"]:
            got = heard.setdefault(route["remote_name"], set())
            got |= {
                (s["account"], s["subject"], s.get("qgroup", ""))
                for s in route.get("subscriptions_list_detail", [])
            }
        if set(heard) != peers:
            problems.append(f"{node.service} routes to {sorted(heard)}, not {sorted(peers)}")
        for peer in peers & set(heard):
            if heard[peer] != local[peer]:
                problems.append(f"{node.service} holds {len(heard[peer])} entries from {peer}, "
                                f"which has {len(local[peer])}")  # fmt: skip
        outbound = gatewayz[node.service]["outbound_gateways"]
        for other in clusters - {node.cluster}:
            if other not in outbound:
                problems.append(f"{node.service} has no gateway to {other}")
                continue
            announced = {
                (s["account"], s["subject"], s.get("qgroup", ""))
                for account in outbound[other].get("accounts", [])
                for s in account.get("subscriptions_list_detail", [])
            }
            wanted = set().union(*(local[n.service] for n in nodes if n.cluster == other))
            if announced != wanted:
                problems.append(f"{node.service} sees {len(announced)} entries from {other}, "
                                f"which has {len(wanted)}")  # fmt: skip
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


# -- traffic -----------------------------------------------------------------------------------


async def _ignore(exc: Exception) -> None:
    """A client broken by a fault is expected; what it lost is counted, not logged."""


async def connect(node: Node) -> Client:
    return await asyncio.wait_for(nats.connect(node.url, allow_reconnect=False, error_cb=_ignore), 10)


async def during(nodes: list[Node], cycle: Cycle, stop: asyncio.Event, rng: random.Random) -> None:
    """Publish from one cluster to a subscriber in the other while the fault lasts."""
    clusters = sorted({n.cluster for n in nodes})
    source = rng.choice([n for n in nodes if n.cluster == clusters[0]])
    sink = rng.choice([n for n in nodes if n.cluster == clusters[1]])
    seen: Counter[bytes] = Counter()

    async def take(msg: Msg) -> None:
        seen[msg.data] += 1

    subject = f"chaos.during.{cycle.number}"
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
        await asyncio.sleep(1)
    except Exception:
        await stop.wait()
    cycle.during_received = len(seen)
    cycle.duplicates = sum(count - 1 for count in seen.values())
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()


async def check_traffic(nodes: list[Node], cycle: Cycle) -> bool:
    """Fresh subscribers everywhere; every node publishes; plain once each, queue exactly once."""
    plain_subject, queue_subject = f"chaos.plain.{cycle.number}", f"chaos.queue.{cycle.number}"
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
        for client in clients.values():
            await client.flush()
        ok = True
        for name, box in plain.items():
            if set(box) != expected or any(c != 1 for c in box.values()):
                cycle.problems.append(f"{name}: {len(box)} of {len(expected)} plain messages, "
                                      f"{sum(c - 1 for c in box.values())} duplicates")  # fmt: skip
                ok = False
        if set(queued) != expected or any(c != 1 for c in queued.values()):
            cycle.problems.append(f"queue group: {len(queued)} of {len(expected)} messages, "
                                  f"{sum(c - 1 for c in queued.values())} duplicates")  # fmt: skip
            ok = False
        return ok
    finally:
        for client in clients.values():
            with contextlib.suppress(Exception):  # one the node broke
                await client.close()


# -- the run -----------------------------------------------------------------------------------


async def run(project: str, seed: int, cycles: int) -> list[Cycle]:
    nodes, network = discover(project)
    rng = random.Random(seed)
    converged, problems = await converge(nodes)
    if converged is None:
        raise SystemExit(
            "chaos: the deployment has not converged to begin with:\n  " + "\n  ".join(problems)
        )
    report = []
    for number in range(1, cycles + 1):
        cycle = Cycle(number, rng.choice(FAULTS), rng.choice(nodes).service, round(rng.uniform(2, 6), 1))
        print(f"cycle {number}: {cycle.fault} {cycle.node} for {cycle.seconds} s", file=sys.stderr)
        node = next(n for n in nodes if n.service == cycle.node)
        stop = asyncio.Event()
        traffic = asyncio.create_task(during(nodes, cycle, stop, rng))
        await asyncio.sleep(0.5)
        apply(cycle.fault, node, network)
        await asyncio.sleep(cycle.seconds)
        heal(cycle.fault, node, network)
        healed = time.monotonic()
        stop.set()
        await traffic
        if cycle.fault == "kill":  # a restarted container may be given other host ports
            nodes, network = discover(project)
        waited = time.monotonic() - healed
        converged, problems = await converge(nodes)
        cycle.converged_after = None if converged is None else round(waited + converged, 2)
        cycle.problems += problems[:5]
        if cycle.duplicates:
            cycle.problems.append(f"{cycle.duplicates} duplicate deliveries during the fault")
        if cycle.converged_after is not None:
            try:
                cycle.traffic_ok = await check_traffic(nodes, cycle)
            except (OSError, TimeoutError, nats.errors.Error) as exc:  # a node refusing clients
                cycle.problems.append(f"traffic check failed: {exc!r}")
        report.append(cycle)
    return report


def table(report: list[Cycle], seed: int) -> str:
    lines = [
        f"chaos, seed {seed}: {sum(c.ok for c in report)} of {len(report)} cycles healed cleanly",
        "",
        "| cycle | fault | node | s | sent / received during | converged after (s) | traffic | result |",
        "|---:|---|---|---:|---:|---:|---|---|",
    ]
    for c in report:
        after = "never" if c.converged_after is None else f"{c.converged_after:.1f}"
        lines.append(
            f"| {c.number} | {c.fault} | {c.node} | {c.seconds} | {c.during_sent} / {c.during_received} "
            f"| {after} | {'ok' if c.traffic_ok else 'FAILED'} | {'ok' if c.ok else 'VIOLATION'} |"
        )
    for c in report:
        lines += [f"- cycle {c.number}: {p}" for p in c.problems]
    return "\n".join(lines)


def default_project() -> str:
    """The project name docker-compose gives a deployment started in the repository's root."""
    name = os.environ.get("COMPOSE_PROJECT_NAME") or Path(__file__).resolve().parents[1].name
    return re.sub(r"[^a-z0-9_-]", "", name.lower())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--project",
        default=default_project(),
        help="the compose project name (default: as docker-compose names it, from the directory)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--json", metavar="FILE", help="write the report here as JSON")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.project, args.seed, args.cycles))
    print(table(report, args.seed))
    if args.json:
        doc = {
            "seed": args.seed,
            "ok": all(c.ok for c in report),
            "cycles": [asdict(c) | {"ok": c.ok} for c in report],
        }
        with open(args.json, "w") as out:
            json.dump(doc, out, indent=2)
    return 0 if all(c.ok for c in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
