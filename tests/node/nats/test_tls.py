"""TLS for client connections, as nats-server offers it: INFO in the clear, then the client starts TLS.

Certificates are made per module by ``deploy/make-certs`` into a temporary directory. Clients are
nats-py (with an ``ssl.SSLContext`` trusting the test CA) or raw trio streams where the test needs
to misbehave at the byte level: speak plain text to a TLS port, never handshake, never read.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
from nats.aio.msg import Msg

from node.config.options import AccountConfig, Config, UserConfig
from node.connection import Reason
from node.nats.client import ClientConnection
from node.run.launch import NodeHandle
from tests.certs import Certs, make_certs
from tests.node.nats.test_nats_py import FLUSH, Inbox, W
from tests.support import Lines, connect, eventually, in_asyncio, start_node
from transport.tls import subject_dn

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    made = make_certs(tmp_path_factory.mktemp("certs"), "node", "client")
    made.add_client("alice", "/O=pubmesh/OU=tests/CN=alice", "alice@example.com")
    made.add_client("bob", "/O=pubmesh/CN=bob", "bob@example.com")
    return made


def subscribed(node: NodeHandle, count: int) -> Callable[[], bool]:
    """Whether the node holds ``count`` subscriptions. (A nats-py flush is no barrier for them:
    its PING can overtake SUBs still waiting in the client's buffer.)"""
    clients = node.server.broker.clients
    return lambda: sum(len(c.subs) for c in clients.values() if isinstance(c, ClientConnection)) >= count


async def tls_node(nursery: trio.Nursery, certs: Certs, **changes: Any) -> NodeHandle:
    config = Config(tls=certs.tls("node", **changes.pop("tls", {})), **changes)
    return await start_node(nursery, config)


async def raw_tls_client(node: NodeHandle, context: ssl.SSLContext) -> tuple[Lines, dict[str, Any]]:
    """A client that reads the INFO line in the clear, then starts TLS (nats-py's way)."""
    tcp = await trio.open_tcp_stream("127.0.0.1", node.port)
    plain = Lines(tcp)
    info = json.loads((await plain.line()).removeprefix(b"INFO "))
    stream = trio.SSLStream(tcp, context, server_hostname="127.0.0.1")
    try:
        with trio.fail_after(W):
            await stream.do_handshake()
    except trio.BrokenResourceError:
        await tcp.aclose()
        raise
    return Lines(stream), info


async def hung_up_on(node: NodeHandle, context: ssl.SSLContext) -> bool:
    """Whether the node hangs up on a client starting TLS with ``context`` (with TLS 1.3 a client
    learns that its certificate was refused only when it reads)."""
    try:
        client, _ = await raw_tls_client(node, context)
    except trio.BrokenResourceError:
        return True
    try:
        await client.send(b"PING\r\n")
        return await client.line() == b""
    except trio.BrokenResourceError:
        return True
    finally:
        await client.stream.aclose()


async def test_nats_py_over_tls_publishes_subscribes_and_requests(
    nursery: trio.Nursery, certs: Certs
) -> None:
    node = await tls_node(nursery, certs)

    async def scenario() -> tuple[list[bytes], bytes, dict[str, Any]]:
        nc = await connect(node.url, tls=certs.client_context())
        other = await connect(node.url, tls=certs.client_context())
        inbox = Inbox()
        await nc.subscribe("orders.>", cb=inbox.take)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"re: " + msg.data)

        await nc.subscribe("help", cb=answer)
        await eventually(subscribed(node, 2))
        for i in range(100):
            await other.publish("orders.eu", b"%d" % i)
        reply = await other.request("help", b"please", timeout=W)
        await inbox.wait_for(100)
        info = dict(other._server_info)
        await other.close()
        await nc.close()
        return inbox.data, reply.data, info

    got, reply, info = await in_asyncio(scenario)
    assert got == [b"%d" % i for i in range(100)]
    assert reply == b"re: please"
    assert info["tls_required"] is True
    assert "tls_verify" not in info


async def test_handshake_first_sends_the_info_over_tls(nursery: trio.Nursery, certs: Certs) -> None:
    node = await tls_node(nursery, certs, tls={"handshake_first": True})
    tcp = await trio.open_tcp_stream("127.0.0.1", node.port)
    with trio.move_on_after(0.2):
        assert await tcp.receive_some() == b"never"  # nothing comes in the clear
    stream = trio.SSLStream(tcp, certs.client_context(), server_hostname="127.0.0.1")
    client = Lines(stream)
    assert json.loads((await client.line()).removeprefix(b"INFO "))["tls_required"] is True
    await client.send(b"PING\r\n")
    assert await client.line() == b"PONG"
    await stream.aclose()

    async def scenario() -> bytes:
        nc = await connect(node.url, tls=certs.client_context(), tls_handshake_first=True)
        inbox = Inbox()
        await nc.subscribe("x", cb=inbox.take)
        await nc.publish("x", b"first")
        await inbox.wait_for(1)
        await nc.close()
        return inbox.data[0]

    assert await in_asyncio(scenario) == b"first"


async def test_plain_text_on_a_tls_port_is_refused_and_the_node_carries_on(
    nursery: trio.Nursery, certs: Certs
) -> None:
    node = await tls_node(nursery, certs)
    tcp = await trio.open_tcp_stream("127.0.0.1", node.port)
    plain = Lines(tcp)
    info = json.loads((await plain.line()).removeprefix(b"INFO "))
    assert info["tls_required"] is True
    await plain.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert await plain.line() == b""  # no PONG: hung up (the handshake failed)
    await tcp.aclose()

    async def untrusting() -> str:
        try:
            nc = await connect(node.url)  # the system's trust store knows nothing of our CA
        except Exception as exc:  # (nats-py raises what the ssl module raised)
            return repr(exc)
        await nc.close()
        return "connected"

    assert "CERTIFICATE_VERIFY_FAILED" in await in_asyncio(untrusting)

    client, _ = await raw_tls_client(node, certs.client_context())
    await client.send(b"PING\r\n")
    assert await client.line() == b"PONG"
    await client.stream.aclose()
    closed = [c.closing for c in node.server.broker.closed]
    assert closed.count(Reason.TLS_HANDSHAKE) == 2


async def test_a_client_that_never_handshakes_is_dropped_after_the_timeout(
    nursery: trio.Nursery, certs: Certs
) -> None:
    timeout = 0.5
    node = await tls_node(nursery, certs, tls={"timeout": timeout})
    silent = Lines(await trio.open_tcp_stream("127.0.0.1", node.port))
    started = trio.current_time()
    assert (await silent.line()).startswith(b"INFO ")
    busy, _ = await raw_tls_client(node, certs.client_context())
    hung_up = trio.Event()

    async def watch_silent() -> None:
        assert await silent.line() == b""
        hung_up.set()

    nursery.start_soon(watch_silent)
    exchanges = 0
    while not hung_up.is_set():  # the other client is served all the while
        await busy.send(b"PING\r\n")
        assert await busy.line() == b"PONG"
        exchanges += 1
        await trio.sleep(0.02)
    elapsed = trio.current_time() - started
    assert timeout * 0.9 <= elapsed < timeout + 2
    assert exchanges > 5
    await busy.send(b"PING\r\n")
    assert await busy.line() == b"PONG"
    assert [c.closing for c in node.server.broker.closed] == [Reason.TLS_HANDSHAKE]
    await busy.stream.aclose()
    await silent.stream.aclose()


async def test_verify_refuses_a_client_without_a_certificate(
    nursery: trio.Nursery, certs: Certs
) -> None:
    node = await tls_node(nursery, certs, tls={"verify": True})
    assert await hung_up_on(node, certs.client_context())

    async def scenario() -> dict[str, Any]:
        nc = await connect(node.url, tls=certs.client_context("client"))
        await nc.flush(FLUSH)
        info = dict(nc._server_info)
        await nc.close()
        return info

    info = await in_asyncio(scenario)
    assert info["tls_required"] is True
    assert info["tls_verify"] is True
    assert [c.closing for c in node.server.broker.closed][:1] == [Reason.TLS_HANDSHAKE]


async def test_verify_and_map_signs_in_the_user_the_certificate_names(
    nursery: trio.Nursery, certs: Certs
) -> None:
    alice_dn = certs.subject("alice")
    assert alice_dn == "CN=alice,OU=tests,O=pubmesh"
    users = (
        UserConfig(user=alice_dn, account="A"),
        UserConfig(user="bob@example.com", account="B"),
        UserConfig(user="client", account="B"),  # (the DNS name in client.pem)
    )
    node = await tls_node(
        nursery,
        certs,
        tls={"verify_and_map": True},
        users=users,
        accounts=(AccountConfig("A"), AccountConfig("B")),
    )

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        alice = await connect(node.url, tls=certs.client_context("alice"))
        bob = await connect(node.url, tls=certs.client_context("bob"))
        client = await connect(node.url, tls=certs.client_context("client"))
        in_a, in_b = Inbox(), Inbox()
        await alice.subscribe("news", cb=in_a.take)
        await bob.subscribe("news", cb=in_b.take)
        await eventually(subscribed(node, 2))
        await client.publish("news", b"for account B")
        await client.flush(FLUSH)
        await in_b.wait_for(1)
        await bob.flush(FLUSH)
        await alice.flush(FLUSH)
        for nc in (alice, bob, client):
            await nc.close()
        return in_a.data, in_b.data

    in_a, in_b = await in_asyncio(scenario)
    assert in_b == [b"for account B"]
    assert in_a == []


async def test_with_verify_and_map_a_password_is_no_way_in(nursery: trio.Nursery, certs: Certs) -> None:
    users = (UserConfig(user="carol", password="secret"),)
    node = await tls_node(nursery, certs, tls={"verify_and_map": True}, users=users)
    assert await hung_up_on(node, certs.client_context())  # no certificate, no TLS
    client, info = await raw_tls_client(node, certs.client_context("bob"))  # names no user
    assert info["auth_required"] is True
    await client.send(b'CONNECT {"verbose":false,"user":"carol","pass":"secret"}\r\nPING\r\n')
    assert await client.line() == b"-ERR 'Authorization Violation'"
    assert await client.line() == b""
    await client.stream.aclose()


async def test_pings_and_slow_consumers_behave_the_same_over_tls(
    nursery: trio.Nursery, certs: Certs
) -> None:
    node = await tls_node(nursery, certs, ping_interval=0.2, max_pending=256 * 1024)
    slow, slow_info = await raw_tls_client(node, certs.client_context())
    await slow.send(b'CONNECT {"verbose":false}\r\nSUB flood 1\r\nPING\r\n')
    assert await slow.line() == b"PONG"
    assert await slow.line() == b"PING"  # the server's pings come over TLS too
    await slow.send(b"PONG\r\n")
    # ``slow`` reads no more; a publisher floods it well past what socket buffers hold.
    fast, _ = await raw_tls_client(node, certs.client_context())
    await fast.send(b'CONNECT {"verbose":false}\r\n')
    payload = b"x" * 16384
    batch = b"".join(b"PUB flood %d\r\n%s\r\n" % (len(payload), payload) for _ in range(64))
    broker = node.server.broker
    with trio.fail_after(W):
        while slow_info["client_id"] in broker.clients:
            await fast.send(batch)
            await trio.lowlevel.checkpoint()
    await fast.send(b"PING\r\n")
    while (line := await fast.line()) == b"PING":  # the fast client is still served
        await fast.send(b"PONG\r\n")
    assert line == b"PONG"
    assert broker.slow_consumers == 1
    assert [c.closing for c in broker.closed] == [Reason.SLOW_PENDING]
    await fast.stream.aclose()
    await slow.stream.aclose()


async def test_monitoring_over_https_answers_varz(nursery: trio.Nursery, certs: Certs) -> None:
    node = await tls_node(nursery, certs, https_port=0)
    assert node.http_port is not None
    url = f"https://127.0.0.1:{node.http_port}/varz"

    def fetch(context: ssl.SSLContext | None) -> Any:
        with urllib.request.urlopen(url, timeout=W, context=context) as response:
            return json.load(response)

    varz = await trio.to_thread.run_sync(fetch, certs.client_context())
    assert varz["server_id"] == node.server.broker.server_id
    assert (varz["tls_required"], varz["tls_timeout"]) == (True, node.server.config.tls.timeout)  # type: ignore[union-attr]
    assert (varz["http_port"], varz["https_port"]) == (0, node.http_port)
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        await trio.to_thread.run_sync(fetch, ssl.create_default_context())


def test_subjects_are_written_as_rfc_2253() -> None:
    subject = (
        (("countryName", "US"),),
        (("organizationName", "Acme, Inc."),),
        (("organizationalUnitName", "eng"), ("userId", "7")),
        (("commonName", " #lead+ "),),
    )
    assert subject_dn(subject) == r"CN=\ #lead\+\ ,OU=eng+UID=7,O=Acme\, Inc.,C=US"


def test_make_certs_keeps_what_exists(tmp_path: Path) -> None:
    first = make_certs(tmp_path, "a")
    ca, cert = Path(first.ca).read_bytes(), Path(first.cert("a")).read_bytes()
    make_certs(tmp_path, "a", "b")
    assert Path(first.ca).read_bytes() == ca
    assert Path(first.cert("a")).read_bytes() == cert
    assert Path(first.cert("b")).exists()
