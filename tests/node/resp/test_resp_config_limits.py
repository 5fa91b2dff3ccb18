"""CONFIG SET of ``maxmemory-clients`` (checked as redis-server checks a memory or percent value;
only 0 is taken, as no client is evicted here) and ``client-query-buffer-limit`` (the bytes one
request may take: past it the connection is closed), all or nothing with the others given beside
them; ``key-load-delay`` shown only when asked for by name. Beside redis-server."""

from __future__ import annotations

import shutil
import socket

import pytest
import trio

from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_maxmemory import command, config_set, redis_node, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)


def _get(name: bytes) -> bytes:
    return command(b"CONFIG", b"GET", name)


SCENARIO: list[Step] = [
    (0, config_set(b"maxmemory-clients", b"200%") + config_set(b"maxmemory-clients", b"abc")),
    (0, config_set(b"maxmemory-clients", b"-1") + config_set(b"maxmemory-clients", b"%")),
    (0, config_set(b"maxmemory-clients", b"0") + config_set(b"maxmemory-clients", b"0%")),
    (0, config_set(b"maxmemory-clients", b"-5%") + _get(b"maxmemory-clients")),
    # One bad value: none of the others is applied.
    (0, config_set(b"maxmemory", b"10000002") + _get(b"client-query-buffer-limit")),
    (
        0,
        config_set(b"maxmemory", b"10000001", b"maxmemory-clients", b"200%")
        + config_set(b"client-query-buffer-limit", b"invalid", b"maxmemory", b"5")
        + _get(b"maxmemory"),
    ),
    (
        0,
        config_set(b"client-query-buffer-limit", b"1k")
        + config_set(b"client-query-buffer-limit", b"10m"),
    ),
    (0, _get(b"client-query-buffer-limit") + config_set(b"client-query-buffer-limit", b"1gb")),
    (0, _get(b"key-load-delay") + _get(b"key-load*") + _get(b"KEY-LOAD-DELAY")),
    (0, config_set(b"maxmemory", b"0") + _get(b"client-query-buffer-limit")),
]


@needs_redis_server
async def test_client_memory_and_query_buffer_limit_as_redis_server(
    nursery: trio.Nursery, redis_port: int
) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


def _closed_after(conn: socket.socket, request: bytes) -> bool:
    """Whether the server closes the connection, answering nothing, once ``request`` is sent."""
    try:
        conn.sendall(request)
        return conn.recv(100) == b""
    except (BrokenPipeError, ConnectionResetError):  # (closed while sending, or with unread bytes)
        return True


async def test_a_request_past_the_query_buffer_limit_closes_the_connection(
    nursery: trio.Nursery,
) -> None:
    node = await redis_node(nursery)

    def scenario(port: int) -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as admin:
            admin.sendall(config_set(b"client-query-buffer-limit", b"1mb"))
            assert admin.recv(100) == b"+OK\r\n"
            with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
                conn.sendall(command(b"SET", b"small", b"x" * 1000))
                assert conn.recv(100) == b"+OK\r\n"
                assert _closed_after(conn, command(b"SET", b"big", b"x" * (2 << 20)))
            admin.sendall(command(b"EXISTS", b"big", b"small"))
            assert admin.recv(100) == b":1\r\n"

    await trio.to_thread.run_sync(scenario, node.redis_port or 0)
