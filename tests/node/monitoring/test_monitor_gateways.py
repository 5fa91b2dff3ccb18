"""Gateway monitoring over real HTTP: /gatewayz and the gateway half of /varz, for two one-node
clusters on 127.0.0.1.

"east" is configured with west's gateway URL; "west" only learns of east when east dials it, so each
side reports the other as configured or not accordingly. Raw NATS clients make interest and messages
cross, and what one end reports about a link is checked against the other end.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio

from cluster.config import GatewayConfig
from node.config.options import Config
from node.nats.protocol import Msg
from node.nats.protocol import writer as w
from node.run.launch import NodeHandle
from tests.node.monitoring.test_monitor import GO_TIME, Node
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

WAIT = 20.0
CONN_KEYS = [
    "cid", "kind", "ip", "port", "start", "last_activity", "rtt", "uptime", "idle",
    "pending_bytes", "in_msgs", "out_msgs", "in_bytes", "out_bytes", "subscriptions", "name",
]  # fmt: skip


@attrs.frozen
class Side:
    name: str
    handle: NodeHandle
    view: Node

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.handle.gateway_port}"

    @property
    def server_id(self) -> str:
        return self.handle.server.broker.server_id

    async def gatewayz(
        self, query: str = "", ready: Callable[[dict[str, Any]], bool] = lambda doc: True
    ) -> dict[str, Any]:
        """The first /gatewayz that ``ready`` accepts (links and interest arrive in their time)."""
        return await self.view.json_when("/gatewayz" + query, ready, WAIT)


async def start_side(nursery: trio.Nursery, name: str, remote: Side | None = None) -> Side:
    """A one-node cluster ``name``, configured with ``remote``'s gateway URL if one is given."""
    gateways = ((remote.name, (remote.url,)),) if remote is not None else ()
    gateway = GatewayConfig(name=name, host="127.0.0.1", port=0, gateways=gateways)
    # (no system account: the interest these tests count is their clients' alone)
    config = Config(server_name=name, http_port=0, gateway=gateway, no_system_account=True)
    handle = await start_node(nursery, config)
    assert handle.http_port is not None
    return Side(name, handle, Node(handle.server, handle.port, handle.http_port))


def linked(doc: dict[str, Any]) -> bool:
    return bool(doc["outbound_gateways"]) and bool(doc["inbound_gateways"])


@pytest.fixture
async def pair(nursery: trio.Nursery) -> AsyncIterator[tuple[Side, Side]]:
    west = await start_side(nursery, "west")
    east = await start_side(nursery, "east", west)
    for side in (east, west):
        await side.gatewayz(ready=linked)
    yield east, west
    for side in (east, west):
        for client in side.view.clients:
            await trio.aclose_forcefully(client.stream)


async def test_gatewayz_shows_each_link_as_both_ends_see_it(pair: tuple[Side, Side]) -> None:
    east, west = pair
    docs = {"east": await east.gatewayz(), "west": await west.gatewayz()}
    for name, side, other in (("east", east, west), ("west", west, east)):
        doc = docs[name]
        assert list(doc) == [
            "server_id", "now", "name", "host", "port", "outbound_gateways", "inbound_gateways",
        ]  # fmt: skip
        assert (doc["server_id"], doc["name"], doc["host"]) == (side.server_id, name, "127.0.0.1")
        assert doc["port"] == side.handle.gateway_port
        assert re.fullmatch(GO_TIME, doc["now"])
        other_name = "west" if name == "east" else "east"
        assert list(doc["outbound_gateways"]) == list(doc["inbound_gateways"]) == [other_name]
        out = doc["outbound_gateways"][other_name]
        assert out["configured"] is (name == "east")  # west learned of east when dialed
        assert list(out["connection"]) == CONN_KEYS
        assert out["connection"]["kind"] == "Gateway"
        assert out["connection"]["name"] == other.server_id
        assert out["connection"]["port"] == other.handle.gateway_port  # dialed: their port
        [inbound] = doc["inbound_gateways"][other_name]
        assert inbound["configured"] is False
        assert inbound["connection"]["name"] == other.server_id
        assert "accounts" not in out  # only when asked for, with accs
        assert "accounts" not in inbound
        # An accepted link shows where the dialer dialed from, not this side's gateway port.
        assert inbound["connection"]["port"] != side.handle.gateway_port
    assert (await west.gatewayz("?gw_name=nowhere"))["outbound_gateways"] == {}
    assert (await west.gatewayz("?gw_name=nowhere"))["inbound_gateways"] == {}
    assert list((await west.gatewayz("?gw_name=east"))["outbound_gateways"]) == ["east"]


async def test_gatewayz_shows_interest_per_account_and_the_traffic(pair: tuple[Side, Side]) -> None:
    east, west = pair
    subscriber = await west.view.client()
    await subscriber.send(w.sub(b"orders.>", b"1") + w.sub(b"jobs", b"2", b"workers"))
    await subscriber.flush()

    def interest(doc: dict[str, Any]) -> list[dict[str, Any]]:
        accounts: list[dict[str, Any]] = doc["outbound_gateways"]["west"].get("accounts", [])
        return accounts

    doc = await east.gatewayz("?accs=1", lambda doc: bool(interest(doc)))
    assert interest(doc) == [
        {
            "name": "$G",
            "interest_mode": "Interest-Only",
            "interest_only_threshold": 1000,
            "num_subs": 2,
            "num_queue_subs": 1,
        }
    ]
    [listed] = interest(await east.gatewayz("?subs=1&acc_name=$G"))
    assert listed["subscriptions_list"] == ["jobs", "orders.>"]
    [detailed] = interest(await east.gatewayz("?subs=detail&accs=true"))
    assert detailed["subscriptions_list_detail"] == [
        {"account": "$G", "subject": "jobs", "qgroup": "workers"},
        {"account": "$G", "subject": "orders.>"},
    ]
    assert interest(await east.gatewayz("?acc_name=nobody")) == []
    # West announces its interest over the link east dialed, so that link shows it as west's.
    [announced] = (await west.gatewayz("?accs=1"))["inbound_gateways"]["east"]
    assert announced["accounts"] == [
        {"name": "$G", "interest_mode": "Interest-Only", "interest_only_threshold": 1000}
    ]

    publisher = await east.view.client()
    await publisher.publish("orders.eu", b"0123456789", 5)
    await publisher.publish("nobody.listens", b"0123456789", 3)  # never crosses
    await publisher.flush()
    received: list[Msg] = []
    with trio.fail_after(WAIT):
        while len(received) < 5:
            received += await subscriber.flush()
    assert [m.subject for m in received] == [b"orders.eu"] * 5
    sent = (await east.gatewayz())["outbound_gateways"]["west"]["connection"]
    assert (sent["out_msgs"], sent["out_bytes"], sent["in_msgs"]) == (5, 50, 0)
    [arrived] = (await west.gatewayz())["inbound_gateways"]["east"]
    assert (arrived["connection"]["in_msgs"], arrived["connection"]["in_bytes"]) == (5, 50)
    assert arrived["connection"]["out_msgs"] == 0  # only interest flows back


async def test_varz_reports_the_gateway(pair: tuple[Side, Side]) -> None:
    east, west = pair
    doc = (await east.view.json("/varz"))["gateway"]
    assert doc == {
        "name": "east",
        "host": "127.0.0.1",
        "port": east.handle.gateway_port,
        "advertise": east.url,
        "gateways": [{"name": "west", "urls": [f"127.0.0.1:{west.handle.gateway_port}"]}],
    }
    assert "gateways" not in (await west.view.json("/varz"))["gateway"]  # none configured
