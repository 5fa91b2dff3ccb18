"""The system account across a super-cluster over real sockets, driven by nats-py.

Cluster "east" has two nodes (e1, e2), cluster "west" one (w1). The system account's requests are
ordinary subscriptions, so their interest crosses routes and gateways; a PING published on any node
reaches every node, and the requester collects one answer per node on its inbox.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import trio
from nats.aio.msg import Msg

from node.config.options import AccountConfig, Config, UserConfig
from node.monitoring.system import PING
from node.run.launch import NodeHandle
from tests.cluster.test_real_gateways import knows, start_supercluster
from tests.node.monitoring.test_system_account import check_server
from tests.support import W, connect, eventually, in_asyncio, until

pytestmark = pytest.mark.timeout(60)

USERS = (
    UserConfig(user="sys", password="pw", account="$SYS"),
    UserConfig(user="app", password="pw", account="A"),
)
CONFIG = Config(users=USERS, accounts=(AccountConfig("A"),))
QUIET = 0.5
"""Seconds after the last expected answer during which no other may arrive."""


def route_knows(node: NodeHandle, subject: str) -> bool:
    return bool(node.server.broker.route_interest.match_remote("$SYS", subject).links)


async def collect(
    node: NodeHandle, subject: str, body: bytes, expected: int, *, user: str = "sys"
) -> list[dict[str, Any]]:
    """Publish one request with an inbox for its reply subject and gather the answers: the
    ``expected`` number (bounded wait), then whatever else arrives during ``QUIET``."""

    async def scenario() -> list[dict[str, Any]]:
        client = await connect(node, user=user, password="pw")
        answers: list[dict[str, Any]] = []
        enough = asyncio.Event()

        async def take(msg: Msg) -> None:
            answers.append(json.loads(msg.data))
            if len(answers) >= expected:
                enough.set()

        inbox = client.new_inbox()
        await client.subscribe(inbox, cb=take)
        await client.publish(subject, body, reply=inbox)
        await client.flush()
        await asyncio.wait_for(enough.wait(), W)
        await asyncio.sleep(QUIET)
        await client.close()
        return answers

    return await in_asyncio(scenario)


@pytest.mark.slow
async def test_every_node_of_the_supercluster_answers_a_ping(nursery: trio.Nursery) -> None:
    e1, e2, w1 = await start_supercluster(nursery, CONFIG)
    nodes = {"e1": e1, "e2": e2, "w1": w1}
    await until(lambda: route_knows(e1, PING) and route_knows(e2, PING))
    await until(lambda: knows(e1, PING, "$SYS")() and knows(e2, PING, "$SYS")())
    await until(lambda: knows(w1, PING, "$SYS")())

    answers = await collect(w1, PING, b"", 3)
    assert sorted(a["server"]["name"] for a in answers) == ["e1", "e2", "w1"]  # once each
    for answer in answers:
        name = answer["server"]["name"]
        assert list(answer) == ["server", "statsz"]
        check_server(answer["server"], nodes[name], cluster="west" if name == "w1" else "east")
        routes = answer["statsz"].get("routes", [])
        # (one entry per pooled route connection)
        assert {r["name"] for r in routes} == (set() if name == "w1" else {"e1", "e2"} - {name})
        assert {g["name"] for g in answer["statsz"]["gateways"]} == {"east", "west"} - {
            answer["server"]["cluster"]
        }

    connz = await collect(e2, "$SYS.REQ.SERVER.PING.CONNZ", b'{"limit": 5}', 3)
    assert sorted(a["server"]["name"] for a in connz) == ["e1", "e2", "w1"]
    assert all(list(a) == ["server", "data"] and a["data"]["limit"] == 5 for a in connz)
    [asking] = [a for a in connz if a["server"]["name"] == "e2"]
    assert asking["data"]["total"] == 1  # (the requester itself)

    # One node, by id, from the other cluster; and the filters narrow a PING to one cluster.
    target = w1.server.broker.server_id
    [direct] = await collect(e1, f"$SYS.REQ.SERVER.{target}.IDZ", b"", 1)
    assert direct == {"name": "w1", "host": "127.0.0.1", "id": target}
    east = await collect(w1, "$SYS.REQ.SERVER.PING.HEALTHZ", b'{"cluster": "east"}', 2)
    assert sorted(a["server"]["name"] for a in east) == ["e1", "e2"]


async def test_advisories_reach_a_subscriber_in_another_cluster(nursery: trio.Nursery) -> None:
    e1, _, w1 = await start_supercluster(nursery, CONFIG)

    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        both = asyncio.Event()

        async def take(msg: Msg) -> None:
            events.append((msg.subject, json.loads(msg.data)))
            if len(events) == 2:
                both.set()

        watcher = await connect(w1, user="sys", password="pw")
        await watcher.subscribe("$SYS.ACCOUNT.A.>", cb=take)
        await watcher.flush()
        await eventually(knows(e1, "$SYS.ACCOUNT.A.CONNECT", "$SYS"))
        app = await connect(e1, user="app", password="pw")
        await app.close()
        await asyncio.wait_for(both.wait(), W)
        await watcher.close()
        return events

    events = await in_asyncio(scenario)
    assert [subject for subject, _ in events] == ["$SYS.ACCOUNT.A.CONNECT", "$SYS.ACCOUNT.A.DISCONNECT"]
    assert {event["server"]["name"] for _, event in events} == {"e1"}
    assert {event["server"]["cluster"] for _, event in events} == {"east"}
