"""Imports across routes and gateways: the importer's interest becomes interest in the exporting
account, so links carry the exporter's messages (and requests, and responses) to where the
subscriber is, and delivery happens there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from nats.aio.msg import Msg

from node.config.options import AccountConfig, Config, ExportConfig, ImportConfig, UserConfig
from node.run.launch import NodeHandle
from tests.cluster.test_real_cluster import start_cluster
from tests.cluster.test_real_gateways import start_supercluster
from tests.support import W, connect, eventually, in_asyncio, settled, until

pytestmark = pytest.mark.timeout(60)

SHARING = Config(
    users=(
        UserConfig(user="a", password="pw", account="A"),
        UserConfig(user="b", password="pw", account="B"),
    ),
    accounts=(
        AccountConfig(
            "A",
            exports=(ExportConfig("events.>"), ExportConfig("work.*", service=True, accounts=("B",))),
        ),
        AccountConfig(
            "B",
            imports=(
                ImportConfig("A", "events.>", "a.events.>"),
                ImportConfig("A", "work.*", "jobs.*", service=True),
            ),
        ),
    ),
)


def knows(node: NodeHandle, account: str, subject: str) -> Callable[[], bool]:
    """Whether a link has told ``node`` of interest in ``subject`` in ``account``."""

    def check() -> bool:
        broker = node.server.broker
        for remote in (broker.route_interest, broker.gateway_interest):
            match = remote.match_remote(account, subject)
            if match.links or match.queues:
                return True
        return False

    return check


async def shared_across(publisher: NodeHandle, subscriber: NodeHandle) -> tuple[list[str], list[bytes]]:
    """A's events published at ``publisher`` reach B's subscriber at ``subscriber``; B's requests
    from ``subscriber`` reach A's responder at ``publisher`` and the responses come back."""

    async def scenario() -> tuple[list[str], list[bytes]]:
        got: list[str] = []

        async def take(msg: Msg) -> None:
            got.append(f"{msg.subject} {msg.data.decode()}")

        async def answer(msg: Msg) -> None:
            await msg.respond(msg.subject.encode() + b" done " + msg.data)

        importer = await connect(subscriber, user="b", password="pw")
        exporter = await connect(publisher, user="a", password="pw")
        await importer.subscribe("a.events.>", cb=take)
        await exporter.subscribe("work.*", cb=answer)
        for client in (importer, exporter):
            await client.flush()
        # The B subscription's shadow is interest in A, which the link carries.
        await eventually(knows(publisher, "A", "events.x"))
        await eventually(knows(subscriber, "A", "work.x"))
        for i in range(50):
            await exporter.publish(f"events.{i % 2}", b"%d" % i)
        await exporter.flush()
        await settled(lambda: len(got) >= 50)
        replies = [(await importer.request("jobs.x", b"%d" % i, timeout=W)).data for i in range(10)]
        for client in (importer, exporter):
            await client.flush()
            await client.close()
        return got, replies

    return await in_asyncio(scenario)


def expected() -> tuple[list[str], list[bytes]]:
    return [f"a.events.{i % 2} {i}" for i in range(50)], [b"work.x done %d" % i for i in range(10)]


async def test_imports_across_a_route(nursery: trio.Nursery) -> None:
    n1, n2 = await start_cluster(nursery, 2, SHARING)
    assert await shared_across(n1, n2) == expected()
    # Once B's subscriber is gone, so is the interest its shadow created in A.
    await until(lambda: not knows(n1, "A", "events.x")())


async def test_imports_across_a_gateway(nursery: trio.Nursery) -> None:
    e1, e2, w1 = await start_supercluster(nursery, SHARING)
    assert await shared_across(e1, w1) == expected()
    assert await shared_across(w1, e2) == expected()
