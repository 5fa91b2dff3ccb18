"""Passwords and tokens configured as bcrypt hashes: checked in a worker thread, so a CONNECT that
waits for its check holds up nobody else."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import redis
import trio
from nats.aio.client import Client
from redis.backoff import NoBackoff
from redis.retry import Retry

from node.accounts.auth import Authenticator, Verification
from node.config import load as cfg
from node.config.options import Config, RedisConfig, UserConfig
from node.resp.commands.connection import WRONGPASS
from node.resp.writer import error
from node.run.launch import NodeHandle
from tests.support import W, connect, in_asyncio, read_until, start_node

pytestmark = pytest.mark.timeout(60)


def hashed(secret: bytes, rounds: int = 4, prefix: bytes = b"$2b$") -> str:
    return (prefix + bcrypt.hashpw(secret, bcrypt.gensalt(rounds))[4:]).decode()


def test_a_hashed_password_is_checked_by_bcrypt() -> None:
    users = (
        UserConfig(user="alice", password=hashed(b"s3cret", prefix=b"$2a$"), account="A"),
        UserConfig(user="yves", password=hashed(b"pw", prefix=b"$2y$")),
        UserConfig(user="plain", password="$not-a-hash"),
        UserConfig(user="broken", password="$2a$10$not-a-hash"),
    )
    auth = Authenticator(Config(users=users))
    check = auth.authenticate({"user": "alice", "pass": "s3cret"})
    assert isinstance(check, Verification)  # (not decided here: the caller runs it off the loop)
    assert check.verify() == users[0]
    wrong = auth.authenticate({"user": "alice", "pass": "s3cret!"})
    assert isinstance(wrong, Verification)
    assert wrong.verify() is None
    assert auth.check_now({"user": "yves", "pass": "pw"}) == users[1]
    assert auth.check_now({"user": "plain", "pass": "$not-a-hash"}) == users[2]  # compared as is
    assert auth.check_now({"user": "broken", "pass": "x"}) is None
    assert auth.check_now({"user": "alice", "pass": "\udcff"}) is None  # not Unicode: no match
    assert auth.check_now({"user": "alice", "pass": "s" * 100}) is None  # past bcrypt's 72 bytes
    assert auth.check_now({"user": "alice"}) is None


def test_hashed_tokens_are_tried_after_plain_ones() -> None:
    users = (UserConfig(token="plain"), UserConfig(token=hashed(b"tok"), account="T"))
    auth = Authenticator(Config(users=users))
    assert auth.authenticate({"auth_token": "plain"}) == users[0]
    assert auth.check_now({"auth_token": "tok"}) == users[1]
    assert auth.check_now({"auth_token": "nope"}) is None


def test_hashes_are_read_unquoted_from_nats_server_configuration(tmp_path: Path) -> None:
    a, b, y = hashed(b"a", prefix=b"$2a$"), hashed(b"b"), hashed(b"y", prefix=b"$2y$")
    path = tmp_path / "node.conf"
    text = f"""
    authorization {{
      users: [
        {{user: a, password: {a}}}
        {{user: b, password: {b}}}
        {{token: {y}}}
      ]
      timeout: 0.5
    }}
    """
    path.write_text(textwrap.dedent(text))
    config = cfg.load(path)
    assert [u.password or u.token for u in config.users] == [a, b, y]
    assert config.auth_timeout == 0.5


async def sign_in(node: NodeHandle, **options: Any) -> str:
    """From a nats-py scenario: "in" if the node lets a client in with these credentials (then it
    publishes once), else why not; the client is closed either way."""
    client = Client()
    try:
        await asyncio.wait_for(
            client.connect(node.url, allow_reconnect=False, max_reconnect_attempts=0, **options), W
        )
        await client.publish("x", b"")
        await client.flush()
        outcome = "in"
    except Exception as exc:  # nats-py reports a refusal with several error types
        outcome = f"refused: {exc}"
    await client.close()
    return outcome


@pytest.fixture
async def bcrypt_node(nursery: trio.Nursery) -> NodeHandle:
    users = (
        UserConfig(user="alice", password=hashed(b"s3cret", rounds=6)),
        UserConfig(token=hashed(b"t0ken", rounds=6)),
        UserConfig(user="slow", password=hashed(b"slow", rounds=12)),
    )
    redis = RedisConfig(host="127.0.0.1", port=0)
    return await start_node(nursery, Config(users=users, redis=redis))


async def test_clients_sign_in_with_the_secrets_behind_the_hashes(bcrypt_node: NodeHandle) -> None:
    async def scenario() -> list[str]:
        return [
            await sign_in(bcrypt_node, user="alice", password="s3cret"),
            await sign_in(bcrypt_node, token="t0ken"),
            await sign_in(bcrypt_node, user="alice", password="wrong"),
            await sign_in(bcrypt_node, token="wrong"),
        ]

    outcomes = await in_asyncio(scenario)
    assert outcomes[:2] == ["in", "in"]
    assert all("authorization violation" in o.lower() for o in outcomes[2:]), outcomes


async def test_input_after_connect_waits_for_the_check_and_nobody_else_does(
    bcrypt_node: NodeHandle,
) -> None:
    with trio.fail_after(W):
        slow = await trio.open_tcp_stream("127.0.0.1", bcrypt_node.port)
        await read_until(slow, b"\r\n")
        # CONNECT and what follows it arrive together; the rest is acted on once the check is done.
        await slow.send_all(
            b'CONNECT {"verbose":false,"user":"slow","pass":"slow"}\r\n'
            b"SUB inbox 1\r\nPUB inbox 5\r\nhello\r\nPING\r\n"
        )
        # Meanwhile (the check takes a good part of a second) others are served at once.
        canary = await trio.open_tcp_stream("127.0.0.1", bcrypt_node.port)
        await read_until(canary, b"\r\n")
        await canary.send_all(b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\nPING\r\n')
        assert await read_until(canary, b"PONG\r\n") == b"PONG\r\n"
        with trio.move_on_after(0):
            early = await slow.receive_some(65536)
            pytest.fail(f"the slow client was answered before the canary: {early!r}")
        got = await read_until(slow, b"PONG\r\n")
        assert got == b"MSG inbox 1 5\r\nhello\r\nPONG\r\n"
        for stream in (slow, canary):
            await stream.aclose()


async def test_authorization_timeout_is_honoured(nursery: trio.Nursery) -> None:
    users = (UserConfig(user="alice", password="pw"),)
    node = await start_node(nursery, Config(users=users, auth_timeout=0.3))
    with trio.fail_after(W):
        idle = await trio.open_tcp_stream("127.0.0.1", node.port)
        started = trio.current_time()
        got = await read_until(idle, b"Authentication Timeout'\r\n")
        assert got.endswith(b"-ERR 'Authentication Timeout'\r\n")
        assert trio.current_time() - started >= 0.3
        await idle.aclose()


async def test_a_wrong_password_for_a_hash_closes_only_that_client(bcrypt_node: NodeHandle) -> None:
    async def scenario() -> bool:
        good = await connect(bcrypt_node, user="alice", password="s3cret")
        for _ in range(3):
            assert (await sign_in(bcrypt_node, user="alice", password="guess")).startswith("refused")
        await good.flush()
        alive = good.is_connected
        await good.close()
        return alive

    assert await in_asyncio(scenario)


async def test_redis_clients_sign_in_with_the_secrets_behind_the_hashes(
    bcrypt_node: NodeHandle,
) -> None:
    port = bcrypt_node.redis_port
    assert port is not None

    def scenario() -> list[str]:
        outcomes = []
        for protocol in (2, 3):  # AUTH, and HELLO 3 AUTH
            for password in ("s3cret", "wrong"):
                client = redis.Redis(
                    port=port,
                    username="alice",
                    password=password,
                    protocol=protocol,
                    socket_timeout=W,
                    retry=Retry(NoBackoff(), 0),  # (a refusal is final)
                )
                try:
                    outcomes.append(f"in: {client.ping()}")
                except redis.AuthenticationError:
                    outcomes.append("refused")
                finally:
                    client.close()
        token = redis.Redis(port=port, password="t0ken", protocol=2, socket_timeout=W)  # AUTH t0ken
        outcomes.append(f"token: {token.ping()}")
        token.close()
        return outcomes

    outcomes = await trio.to_thread.run_sync(scenario)
    assert outcomes == ["in: True", "refused", "in: True", "refused", "token: True"]


async def test_redis_requests_after_auth_wait_for_the_check(bcrypt_node: NodeHandle) -> None:
    assert bcrypt_node.redis_port is not None
    with trio.fail_after(W):
        slow = await trio.open_tcp_stream("127.0.0.1", bcrypt_node.redis_port)
        await slow.send_all(b"AUTH slow slow\r\nPING\r\nAUTH slow nope\r\nPING\r\n")
        canary = await trio.open_tcp_stream("127.0.0.1", bcrypt_node.redis_port)
        await canary.send_all(b"AUTH alice s3cret\r\nPING\r\n")
        assert await read_until(canary, b"PONG\r\n") == b"+OK\r\n+PONG\r\n"
        with trio.move_on_after(0):
            early = await slow.receive_some(65536)
            pytest.fail(f"the slow client was answered before the canary: {early!r}")
        got = await read_until(slow, b"disabled.\r\n+PONG\r\n")
        assert got == b"+OK\r\n+PONG\r\n" + error(WRONGPASS) + b"+PONG\r\n"
        for stream in (slow, canary):
            await stream.aclose()
