"""The official nats-py client against a real pubmesh node over real sockets.

Each test runs a nats-py scenario (asyncio, in a worker thread) against a node running in the test's
trio nursery. Barriers are PING/PONG flushes, never sleeps; every wait has a timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import trio
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError

from node.config.options import Config, Permissions, SubjectRule, UserConfig
from node.run.launch import NodeHandle
from tests.support import connect, in_asyncio, start_node

pytestmark = pytest.mark.timeout(30)

W = 5.0  # every asyncio wait in a scenario is bounded by this
FLUSH = 5  # (nats-py wants whole seconds for flush timeouts)


class Inbox:
    """Collects messages delivered to a subscription callback."""

    def __init__(self) -> None:
        self.messages: list[Msg] = []
        self._more = asyncio.Event()

    async def take(self, msg: Msg) -> None:
        """The subscription callback (nats-py wants a coroutine function, not a callable object)."""
        self.messages.append(msg)
        self._more.set()

    async def wait_for(self, count: int) -> list[Msg]:
        async def enough() -> None:
            while len(self.messages) < count:
                self._more.clear()
                await self._more.wait()

        await asyncio.wait_for(enough(), W)
        return self.messages

    @property
    def data(self) -> list[bytes]:
        return [m.data for m in self.messages]


async def test_publish_subscribe_with_wildcards(node: NodeHandle) -> None:
    async def scenario() -> dict[str, list[bytes]]:
        nc = await connect(node.url)
        boxes = {pattern: Inbox() for pattern in ("orders.eu.created", "orders.*.created", "orders.>")}
        for pattern, box in boxes.items():
            await nc.subscribe(pattern, cb=box.take)
        await nc.flush(FLUSH)
        other = await connect(node.url)
        for subject in ("orders.eu.created", "orders.us.created", "orders.eu.shipped", "invoices.x"):
            await other.publish(subject, subject.encode())
        await other.flush(FLUSH)
        await boxes["orders.>"].wait_for(3)
        await boxes["orders.*.created"].wait_for(2)
        await boxes["orders.eu.created"].wait_for(1)
        await nc.flush(FLUSH)
        await other.close()
        await nc.close()
        return {pattern: box.data for pattern, box in boxes.items()}

    got = await in_asyncio(scenario)
    assert got["orders.eu.created"] == [b"orders.eu.created"]
    assert got["orders.*.created"] == [b"orders.eu.created", b"orders.us.created"]
    assert got["orders.>"] == [b"orders.eu.created", b"orders.us.created", b"orders.eu.shipped"]


async def test_queue_group_delivers_each_message_to_exactly_one_member(node: NodeHandle) -> None:
    async def scenario() -> tuple[list[list[bytes]], list[bytes]]:
        nc = await connect(node.url)
        members = [Inbox() for _ in range(3)]
        for box in members:
            await nc.subscribe("jobs", queue="workers", cb=box.take)
        watcher = Inbox()
        await nc.subscribe("jobs", cb=watcher.take)
        await nc.flush(FLUSH)
        pub = await connect(node.url)
        for i in range(300):
            await pub.publish("jobs", str(i).encode())
        await pub.flush(FLUSH)
        await watcher.wait_for(300)
        await nc.flush(FLUSH)
        await pub.close()
        await nc.close()
        return [box.data for box in members], watcher.data

    per_member, everything = await in_asyncio(scenario)
    delivered = [m for member in per_member for m in member]
    assert sorted(delivered) == sorted(str(i).encode() for i in range(300))
    assert all(per_member), "with 300 messages every member gets some"
    assert len(everything) == 300


async def test_request_reply_and_no_responders(node: NodeHandle) -> None:
    async def scenario() -> tuple[bytes, bytes, str]:
        service = await connect(node.url)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"echo:" + msg.data)

        await service.subscribe("help", cb=answer)
        await service.flush(FLUSH)
        client = await connect(node.url)
        first = await client.request("help", b"one", timeout=W)
        second = await client.request("help", b"two", timeout=W)
        try:
            await client.request("nobody.home", b"?", timeout=W)
            outcome = "answered"
        except NoRespondersError:
            outcome = "no responders"
        await client.close()
        await service.close()
        return first.data, second.data, outcome

    assert await in_asyncio(scenario) == (b"echo:one", b"echo:two", "no responders")


async def test_headers_round_trip(node: NodeHandle) -> None:
    async def scenario() -> tuple[bytes, dict[str, str] | None]:
        nc = await connect(node.url)
        box = Inbox()
        await nc.subscribe("with.headers", cb=box.take)
        await nc.publish("with.headers", b"body", headers={"Trace-Id": "abc", "X-Count": "2"})
        (msg,) = await box.wait_for(1)
        await nc.close()
        return msg.data, msg.headers

    data, headers = await in_asyncio(scenario)
    assert data == b"body"
    assert headers == {"Trace-Id": "abc", "X-Count": "2"}


async def test_auto_unsubscribe_after_max_messages(node: NodeHandle) -> None:
    async def scenario() -> list[bytes]:
        nc = await connect(node.url)
        box = Inbox()
        sub = await nc.subscribe("limited", cb=box.take)
        await sub.unsubscribe(limit=3)
        for i in range(10):
            await nc.publish("limited", str(i).encode())
        await nc.flush(FLUSH)
        await box.wait_for(3)
        await nc.flush(FLUSH)  # anything past the limit would have arrived before this PONG
        await nc.close()
        return box.data

    assert await in_asyncio(scenario) == [b"0", b"1", b"2"]


async def test_drain_delivers_what_was_in_flight(node: NodeHandle) -> None:
    async def scenario() -> int:
        consumer = await connect(node.url)
        box = Inbox()
        await consumer.subscribe("work", cb=box.take)
        await consumer.flush(FLUSH)
        producer = await connect(node.url)
        for i in range(500):
            await producer.publish("work", str(i).encode())
        await producer.flush(FLUSH)
        await box.wait_for(500)
        await asyncio.wait_for(consumer.drain(), W)
        assert consumer.is_closed
        await producer.close()
        return len(box.messages)

    assert await in_asyncio(scenario) == 500


async def test_client_reconnects_after_server_restart(nursery: trio.Nursery) -> None:
    first = await start_node(nursery)
    token = trio.lowlevel.current_trio_token()
    restarted = trio.Event()

    async def restart() -> None:
        """Stop the node, start a new one on the same port; the client must find its way back."""
        first.shutdown()
        with trio.fail_after(W):
            await first.finished.wait()
        await start_node(nursery, port=first.port)
        restarted.set()

    async def scenario() -> list[bytes]:
        back = asyncio.Event()

        async def on_reconnect() -> None:
            back.set()

        nc = await connect(
            first.url,
            allow_reconnect=True,
            reconnect_time_wait=0.1,
            max_reconnect_attempts=100,
            reconnected_cb=on_reconnect,
        )
        box = Inbox()
        await nc.subscribe("after.restart", cb=box.take)
        await nc.flush(FLUSH)
        await asyncio.to_thread(lambda: trio.from_thread.run(restart, trio_token=token))
        await asyncio.wait_for(back.wait(), W)
        await nc.publish("after.restart", b"still here")  # the subscription was re-sent
        await nc.flush(FLUSH)
        await box.wait_for(1)
        await nc.close()
        return box.data

    assert await in_asyncio(scenario) == [b"still here"]
    assert restarted.is_set()


AUTH_CONFIG = Config(
    users=(
        UserConfig(
            user="alice",
            password="secret",
            permissions=Permissions(
                publish=SubjectRule(allow=("orders.>",), deny=("orders.secret",)),
                subscribe=SubjectRule(allow=("orders.>", "_INBOX.>")),
            ),
        ),
        UserConfig(token="t0k3n"),
    )
)


async def test_authentication(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, AUTH_CONFIG)
    url = f"nats://127.0.0.1:{node.port}"

    async def scenario() -> list[str]:
        outcomes = []
        refusals: list[dict[str, Any]] = [{}, {"user": "alice", "password": "wrong"}, {"token": "x"}]
        for options in refusals:
            nc = Client()
            try:
                await asyncio.wait_for(
                    nc.connect(url, allow_reconnect=False, max_reconnect_attempts=0, **options), W
                )
                outcomes.append("connected")
            except Exception as exc:  # nats-py reports a refusal with several error types
                text = str(exc).lower()
                outcomes.append("refused" if "authorization violation" in text else text)
            await nc.close()
        for options in ({"user": "alice", "password": "secret"}, {"token": "t0k3n"}):
            nc = await connect(url, **options)
            await nc.flush(FLUSH)
            outcomes.append("connected")
            await nc.close()
        return outcomes

    assert await in_asyncio(scenario) == ["refused", "refused", "refused", "connected", "connected"]


async def test_permission_violations_keep_the_connection(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, AUTH_CONFIG)
    url = f"nats://127.0.0.1:{node.port}"

    async def scenario() -> tuple[list[str], list[bytes]]:
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc).lower())

        nc = await connect(url, user="alice", password="secret", error_cb=on_error)
        box = Inbox()
        await nc.subscribe("orders.>", cb=box.take)
        await nc.subscribe("payroll", cb=box.take)  # not allowed
        await nc.publish("orders.secret", b"denied")
        await nc.publish("elsewhere", b"denied too")
        await nc.publish("orders.ok", b"allowed")
        await nc.flush(FLUSH)
        await box.wait_for(1)
        await nc.flush(FLUSH)
        assert nc.is_connected
        await nc.close()
        return errors, box.data

    errors, delivered = await in_asyncio(scenario)
    assert delivered == [b"allowed"]
    assert any('subscription to "payroll"' in e for e in errors), errors
    assert any('publish to "orders.secret"' in e for e in errors), errors
    assert any('publish to "elsewhere"' in e for e in errors), errors


async def test_max_payload_is_enforced(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(max_payload=1024))

    async def scenario() -> tuple[str, bytes]:
        nc = await connect(node.url)
        assert nc.max_payload == 1024
        box = Inbox()
        await nc.subscribe("big", cb=box.take)
        try:
            await nc.publish("big", b"x" * 1025)
            outcome = "sent"
        except MaxPayloadError:
            outcome = "refused by the client"
        await nc.publish("big", b"y" * 1024)
        (msg,) = await box.wait_for(1)
        await nc.close()
        return outcome, msg.data

    assert await in_asyncio(scenario) == ("refused by the client", b"y" * 1024)
    # A client that ignores INFO's max_payload is cut off by the server itself.
    async with await trio.open_tcp_stream("127.0.0.1", node.port) as stream:
        await stream.send_all(b"CONNECT {}\r\nPUB big 1025\r\n")
        assert b"-ERR 'Maximum Payload Violation'" in await read_until_closed(stream)


async def read_until_closed(stream: trio.abc.Stream) -> bytes:
    data = b""
    with trio.fail_after(W):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def test_garbage_closes_only_the_sender(node: NodeHandle) -> None:
    async with await trio.open_tcp_stream("127.0.0.1", node.port) as stream:
        await stream.send_all(b"CONNECT {}\r\nSUB ok 1\r\nHELLO THERE\r\n")
        received = await read_until_closed(stream)
    assert received.endswith(b"-ERR 'Unknown Protocol Operation'\r\n")

    async def scenario() -> list[bytes]:
        nc = await connect(node.url)
        box = Inbox()
        await nc.subscribe("still.works", cb=box.take)
        await nc.publish("still.works", b"yes")
        await box.wait_for(1)
        await nc.close()
        return box.data

    assert await in_asyncio(scenario) == [b"yes"]


@pytest.mark.slow
async def test_slow_consumer_is_cut_off_and_healthy_subscriber_loses_nothing(
    nursery: trio.Nursery,
) -> None:
    node = await start_node(nursery, Config(max_pending=256 * 1024))
    # A subscriber that stops reading: its server-side pending bytes grow past max_pending.
    with trio.socket.socket() as stuck:
        stuck.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, 4096)
        await stuck.connect(("127.0.0.1", node.port))
        await stuck.send(b'CONNECT {"verbose":false}\r\nSUB firehose 1\r\nPING\r\n')
        with trio.fail_after(W):
            while b"PONG" not in await stuck.recv(4096):
                pass
        await flood_past_a_stuck_subscriber(node)


async def flood_past_a_stuck_subscriber(node: NodeHandle) -> None:
    count, size = 20_000, 1000

    async def scenario() -> int:
        healthy = await connect(node.url)
        box = Inbox()
        await healthy.subscribe(
            "firehose", cb=box.take, pending_msgs_limit=count * 2, pending_bytes_limit=-1
        )
        await healthy.flush(FLUSH)
        pub = await connect(node.url)
        payload = b"p" * size
        # In bursts the healthy subscriber can always absorb (it shares this process, and so the
        # interpreter, with the node): only the stuck one may fall behind.
        burst = 100
        for sent in range(burst, count + 1, burst):
            for _ in range(burst):
                await pub.publish("firehose", payload)
            await pub.flush(FLUSH)
            await box.wait_for(sent)
        await pub.close()
        await healthy.close()
        return len(box.messages)

    assert await in_asyncio(scenario) == count
    broker = node.server.broker
    assert broker.slow_consumers == 1
    (closed,) = [c for c in broker.closed if c.closing == "Slow Consumer (Pending Bytes)"]
    assert closed.out_msgs < count
