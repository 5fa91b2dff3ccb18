"""CONFIG SET port moves the Redis front door while the node runs, as redis-server does: new
clients on the new port, none on the old, connections already made carry on; a port in use fails
the whole CONFIG SET (nothing else it named changes) with redis-server's words; port 0 stops
listening."""

from __future__ import annotations

import socket

import pytest
import redis
import trio

from node.bench.ports import free_port
from tests.support import start_redis_node

pytestmark = pytest.mark.timeout(30)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _move(old: int) -> None:
    client = redis.Redis(port=old, socket_timeout=5)
    assert client.ping()
    new = free_port()
    assert client.config_set("port", new)
    assert client.config_get("port") == {"port": str(new)}
    assert client.ping()  # (made before the move: carries on)
    assert _refused(old)
    moved = redis.Redis(port=new, socket_timeout=5)
    assert moved.set("k", "v")
    assert client.get("k") == b"v"
    assert moved.config_set("port", 0)
    assert _refused(new)
    assert moved.config_get("port") == {"port": "0"}
    moved.close()
    client.close()


def _taken(port: int) -> None:
    client = redis.Redis(port=port, socket_timeout=5)
    maxmemory = client.config_get("maxmemory")  # (maxmemory is checked first, then the port fails)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        used = holder.getsockname()[1]
        with pytest.raises(redis.ResponseError) as refused:
            client.execute_command("CONFIG", "SET", "maxmemory", "10000001", "port", str(used))
        assert str(refused.value) == (
            "CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this"
            " port. Check server logs."
        )
    assert client.config_get("maxmemory") == maxmemory
    assert client.config_get("port") == {"port": str(port)}
    for bad, why in ((b"65536", "between 0 and 65535"), (b"x", "parsed into an integer")):
        with pytest.raises(redis.ResponseError, match=why):
            client.execute_command("CONFIG", "SET", "port", bad)
    assert redis.Redis(port=port, socket_timeout=5).ping()
    client.close()


async def test_config_set_port_moves_the_front_door(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery)
    await trio.to_thread.run_sync(_move, node.redis_port or 0)


async def test_a_port_in_use_changes_nothing(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery)
    await trio.to_thread.run_sync(_taken, node.redis_port or 0)
