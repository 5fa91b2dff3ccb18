"""SIGHUP reloads a running node's configuration file, with nats-py clients connected: users come and
go, permissions change under live subscriptions, route seeds are added and removed, and a change
that cannot be applied (or a broken file) leaves the node exactly as it was."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import AuthorizationError

from tests import support
from tests.node.run.signals_support import NodeProcess, launch, ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

W = 10.0

HANK = bcrypt.hashpw(b"h", bcrypt.gensalt(4)).decode()  # (kept as it is by the reload)
IVY_BEFORE, IVY_AFTER = (bcrypt.hashpw(p, bcrypt.gensalt(4)).decode() for p in (b"i1", b"i2"))

USERS_BEFORE = f"""
authorization {{
  users = [
    {{user: alice, password: a}}
    {{user: bob, password: b, permissions: {{subscribe: [">"]}}}}
    {{user: erin, password: e1}}
    {{user: hank, password: "{HANK}"}}
    {{user: ivy, password: "{IVY_BEFORE}"}}
  ]
}}
"""
USERS_AFTER = f"""
authorization {{
  users = [
    {{user: bob, password: b, permissions: {{subscribe: "bar"}}}}
    {{user: erin, password: e2}}
    {{user: dave, password: d}}
    {{user: hank, password: "{HANK}"}}
    {{user: ivy, password: "{IVY_AFTER}"}}
  ]
}}
"""


async def connect(url: str, **options: Any) -> Client:
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    nc = await support.connect(url, closed_cb=on_closed, **options)
    nc.closed_event = closed  # type: ignore[attr-defined]
    return nc


async def refused(url: str, **options: Any) -> bool:
    """Whether the node refuses these credentials with an Authorization Violation."""
    nc = Client()
    try:
        await asyncio.wait_for(
            nc.connect(url, allow_reconnect=False, max_reconnect_attempts=0, **options), W
        )
    except Exception as exc:  # nats-py reports a refusal with several error types
        return "authorization violation" in str(exc).lower()
    finally:
        await nc.close()
    return False


async def reload(node: NodeProcess, conf: Path, text: str, *, expect: str) -> str:
    """Rewrite the file, send SIGHUP, and wait for the log line ``expect`` (one more of them)."""

    def rewrite_and_signal() -> str:
        seen = node.log().count(expect)
        conf.write_text(text)
        node.send(signal.SIGHUP)
        return node.wait_for_log(expect, seen + 1)

    return await asyncio.to_thread(rewrite_and_signal)


def test_reload_adds_and_removes_users_and_changes_permissions(tmp_path: Path) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text(USERS_BEFORE)
    node = ready(launch(tmp_path, "-c", str(conf)))

    async def scenario() -> None:
        url = node.url()
        alice = await connect(url, user="alice", password="a")
        erin = await connect(url, user="erin", password="e1")
        hank = await connect(url, user="hank", password="h")
        ivy = await connect(url, user="ivy", password="i1")
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        bob = await connect(url, user="bob", password="b", error_cb=on_error)
        got: list[str] = []

        async def take(msg: Msg) -> None:
            got.append(msg.subject)

        await bob.subscribe("foo", cb=take)
        await bob.subscribe("bar", cb=take)
        await bob.flush(5)
        assert await refused(url, user="dave", password="d")

        log = await reload(node, conf, USERS_AFTER, expect="Reloaded server configuration")
        assert "[INF] Reloaded: authorization users" in log
        assert 'Removed sub "foo" (sid "1")' in log

        # alice's user is gone: closed, without an error (nats-server's ClientClosed)
        await asyncio.wait_for(alice.closed_event.wait(), W)  # type: ignore[attr-defined]
        assert not isinstance(alice.last_error, AuthorizationError)
        # erin's password changed: an Authorization Violation
        await asyncio.wait_for(erin.closed_event.wait(), W)  # type: ignore[attr-defined]
        assert isinstance(erin.last_error, AuthorizationError)
        # so did ivy's (a new bcrypt hash); hank's hash is the same, and he stays
        await asyncio.wait_for(ivy.closed_event.wait(), W)  # type: ignore[attr-defined]
        assert isinstance(ivy.last_error, AuthorizationError)
        await hank.flush(5)
        assert hank.is_connected
        # bob stays, losing the subscription his new permissions forbid
        await bob.flush(5)
        assert bob.is_connected
        assert errors == ['nats: permissions violation for subscription to "foo" (sid "1")']

        dave = await connect(url, user="dave", password="d")
        await dave.publish("foo", b"")
        await dave.publish("bar", b"")
        await dave.flush(5)
        await bob.flush(5)
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.02)
        assert got == ["bar"]
        assert await refused(url, user="alice", password="a")
        assert await refused(url, user="erin", password="e1")
        assert not await refused(url, user="erin", password="e2")
        for nc in (bob, dave, hank):
            await nc.close()

    try:
        asyncio.run(scenario())
    finally:
        assert node.stop() == 0


def test_a_refused_or_broken_reload_keeps_the_old_configuration(tmp_path: Path) -> None:
    conf = tmp_path / "node.conf"
    before = "host: 127.0.0.1\nport: -1\n" + USERS_BEFORE
    conf.write_text(before)
    node = ready(launch(tmp_path, "-c", str(conf), where=()))

    async def scenario() -> None:
        url = node.url()
        bob = await connect(url, user="bob", password="b")
        refusal = "config reload not supported for"
        not_reloadable = "host: 127.0.0.1\nport: 4999\nserver_name: other\n" + USERS_AFTER
        log = await reload(node, conf, not_reloadable, expect=f"{refusal} server_name")
        assert f"[ERR] Failed to reload server configuration: {refusal} port: old=-1, new=4999" in log
        assert (
            f"[ERR] Failed to reload server configuration: {refusal} server_name: old=, new=other" in log
        )
        assert "Reloaded server configuration" not in log
        assert "Reloaded: authorization" not in log
        assert await refused(url, user="dave", password="d")  # nothing was applied
        assert not await refused(url, user="alice", password="a")

        log = await reload(node, conf, "port: [", expect="[ERR] Failed to reload server configuration")
        assert "Reloaded server configuration" not in log
        assert not await refused(url, user="alice", password="a")

        after = before.replace("{user: erin", "{user: dave, password: d}\n    {user: erin")
        after += "max_payload: 2048\ndebug: true\n"
        log = await reload(node, conf, after, expect="Reloaded server configuration")
        assert "[INF] Reloaded: max_payload = 2048" in log
        assert "[INF] Reloaded: debug = True" in log
        dave = await connect(url, user="dave", password="d")
        assert dave.max_payload == 2048
        assert bob.is_connected
        await bob.flush(5)
        for nc in (bob, dave):
            await nc.close()

    try:
        asyncio.run(scenario())
    finally:
        assert node.stop() == 0


def test_reload_adds_and_removes_a_route_seed(tmp_path: Path) -> None:
    cluster = 'cluster { name: c, listen: "127.0.0.1:-1" }\n'
    a_conf, b_conf = tmp_path / "a.conf", tmp_path / "b.conf"
    a_conf.write_text(cluster)
    b_conf.write_text(cluster)
    a = launch(tmp_path / "a", "-c", str(a_conf))
    b = launch(tmp_path / "b", "-c", str(b_conf))
    ready(a)
    ready(b)

    async def scenario() -> None:
        seed = a.url("cluster")
        assert seed.startswith("nats://127.0.0.1:")
        with_seed = cluster.replace(" }", f', routes: ["{seed}"] }}')
        log = await reload(b, b_conf, with_seed, expect="Reloaded server configuration")
        assert "[INF] Reloaded: cluster routes" in log
        await asyncio.to_thread(a.wait_for_log, "Route connection created")

        sub = await connect(a.url())
        got = asyncio.Event()

        async def take(msg: Msg) -> None:
            got.set()

        await sub.subscribe("across", cb=take)
        await sub.flush(5)
        pub = await connect(b.url())
        for _ in range(200):  # until the subscription's interest has crossed the new route
            await pub.publish("across", b"hi")
            await pub.flush(5)
            try:
                await asyncio.wait_for(got.wait(), 0.05)
                break
            except TimeoutError:
                continue
        assert got.is_set()

        log = await reload(b, b_conf, cluster, expect="Reloaded server configuration")
        assert f"[INF] Removed route {seed}" in log
        for nc in (sub, pub):
            await nc.close()

    try:
        asyncio.run(scenario())
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
