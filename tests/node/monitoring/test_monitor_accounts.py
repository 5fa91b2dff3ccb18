"""/accountz and /accstatz over real HTTP, against a node whose accounts real clients use."""

from __future__ import annotations

import asyncio
import http.client
import json
from typing import Any

import pytest
import trio

from node.config.options import AccountConfig, Config, UserConfig
from node.monitoring.system import ENDPOINTS
from node.run.launch import NodeHandle
from tests.support import connect, in_asyncio, start_node

pytestmark = pytest.mark.timeout(30)

OWN = 2 * len(ENDPOINTS) + 1
"""The system account's subscriptions of a node: PING, and PING.<EP> and <id>.<EP> per endpoint."""

W = 5.0
BAD_BOOL = 'strconv.ParseBool: parsing "maybe": invalid syntax'
USERS = (
    UserConfig(user="sys", password="pw", account="$SYS"),
    UserConfig(user="a", password="pw", account="A"),
    UserConfig(user="b", password="pw", account="B"),
)
CONFIG = Config(
    http_port=0, users=USERS, accounts=(AccountConfig("A"), AccountConfig("B"), AccountConfig("C"))
)


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=W)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


async def get(node: NodeHandle, path: str) -> tuple[int, str]:
    """From a nats-py scenario (asyncio): one monitoring request."""
    assert node.http_port is not None
    return await asyncio.to_thread(_get, node.http_port, path)


async def doc(node: NodeHandle, path: str) -> dict[str, Any]:
    status, body = await get(node, path)
    assert status == 200, body
    found: dict[str, Any] = json.loads(body)
    return found


async def in_use(node: NodeHandle) -> list[str]:
    """The accounts /accstatz lists by default: those with connections."""
    return [s["acc"] for s in (await doc(node, "/accstatz"))["account_statz"]]


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_node(nursery, CONFIG)


async def test_accountz_lists_the_accounts_and_details_one(node: NodeHandle) -> None:
    async def scenario() -> None:
        listing = await doc(node, "/accountz")
        assert list(listing) == ["server_id", "now", "system_account", "accounts"]
        assert listing["system_account"] == "$SYS"
        assert listing["accounts"] == ["$G", "$SYS", "A", "B", "C"]
        assert (await doc(node, "/varz"))["system_account"] == "$SYS"
        a, other = await connect(node, "a"), await connect(node, "a")
        await a.subscribe("orders.>")
        await a.subscribe("orders.eu", queue="q")
        await a.flush()
        detail = (await doc(node, "/accountz?acc=A"))["account_detail"]
        assert list(detail) == [
            "account_name", "update_time", "expired", "complete", "jetstream_enabled",
            "leafnode_connections", "client_connections", "subscriptions", "sublist_stats",
        ]  # fmt: skip
        assert (detail["account_name"], detail["client_connections"]) == ("A", 2)
        assert detail["subscriptions"] == detail["sublist_stats"]["num_subscriptions"] == 2
        assert (detail["expired"], detail["complete"], detail["jetstream_enabled"]) == (
            False, True, False,
        )  # fmt: skip
        system = (await doc(node, "/accountz?acc=$SYS"))["account_detail"]
        assert (system["is_system"], system["client_connections"]) == (True, 0)
        assert system["subscriptions"] == OWN  # (the node's own requests)
        listed = await doc(node, "/subsz?subs=1&acc=$SYS&test=$SYS.REQ.SERVER.PING.VARZ")
        assert [(s["account"], s["subject"], s["cid"]) for s in listed["subscriptions_list"]] == [
            ("$SYS", "$SYS.REQ.SERVER.PING.VARZ", 0)
        ]  # (listed like clients' ones: it is interest that routes and gateways carry)
        assert (await doc(node, "/subsz?subs=1&acc=$SYS"))["total"] == OWN
        assert await get(node, "/accountz?acc=nope") == (400, "Account nope does not exist")
        assert (await doc(node, "/varz"))["http_req_stats"]["/accountz"] == 4
        await a.close()
        await other.close()

    await in_asyncio(scenario)


async def test_accstatz_counts_each_accounts_connections_and_traffic(node: NodeHandle) -> None:
    async def scenario() -> None:
        assert (await doc(node, "/accstatz"))["account_statz"] == []
        unused = await doc(node, "/accstatz?unused=1")
        assert list(unused) == ["server_id", "now", "account_statz"]
        assert [s["acc"] for s in unused["account_statz"]] == ["$G", "$SYS", "A", "B", "C"]

        a, b = await connect(node, "a"), await connect(node, "b")
        got = asyncio.Event()
        taken: list[bytes] = []

        async def take(msg: Any) -> None:
            taken.append(msg.data)
            if len(taken) == 3:
                got.set()

        await a.subscribe("x", cb=take)
        await a.flush()
        for payload in (b"one", b"two", b"three"):
            await a.publish("x", payload)
        await b.publish("x", b"unseen")  # (another account: A never sees it)
        await b.flush()
        await asyncio.wait_for(got.wait(), W)
        await a.flush()
        stats = {s["acc"]: s for s in (await doc(node, "/accstatz"))["account_statz"]}
        assert sorted(stats) == ["A", "B"]
        assert stats["A"] == {
            "acc": "A",
            "name": "A",
            "conns": 1,
            "leafnodes": 0,
            "total_conns": 1,
            "num_subscriptions": 1,
            "sent": {"msgs": 3, "bytes": 11},
            "received": {"msgs": 3, "bytes": 11},
            "slow_consumers": 0,
        }
        assert stats["B"]["received"] == {"msgs": 1, "bytes": 6}
        assert stats["B"]["sent"] == {"msgs": 0, "bytes": 0}

        # A closed connection's traffic stays counted; its account is unused then.
        await a.close()
        async with asyncio.timeout(W):
            while await in_use(node) != ["B"]:  # noqa: ASYNC110 (a close announces nothing)
                await asyncio.sleep(0.01)
        after = {s["acc"]: s for s in (await doc(node, "/accstatz?unused=true"))["account_statz"]}
        assert (after["A"]["conns"], after["A"]["sent"]) == (0, {"msgs": 3, "bytes": 11})
        status, text = await get(node, "/accstatz?unused=maybe")
        assert (status, text) == (400, f"Error decoding boolean for 'unused': {BAD_BOOL}")
        await b.close()

    await in_asyncio(scenario)
