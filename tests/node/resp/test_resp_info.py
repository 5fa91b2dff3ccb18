"""INFO: the sections and fields redis-server 7.2 prints, the statistics behind them (calls, time,
rejected and failed calls per command, error replies per code, blocked clients, the instantaneous
rates), CONFIG RESETSTAT, and redis-cli --stat reading them."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import trio

from node.broker import Broker
from node.config.options import Config, RedisConfig
from node.resp.commands.common import REDIS_VERSION
from tests.node.resp.test_resp_connection import Peer
from tests.support import start_node

pytestmark = pytest.mark.timeout(30)


def fields(reply: bytes) -> dict[str, str]:
    """An INFO reply's ``name:value`` lines."""
    text = reply.split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if line and not line.startswith("#"))


def sections(reply: bytes) -> list[str]:
    return [line[2:] for line in reply.decode().split("\r\n") if line.startswith("# ")]


def test_sections_by_default_all_and_by_name() -> None:
    peer = Peer(Broker(Config()))
    default = [
        "Server", "Clients", "Memory", "Persistence", "Stats", "Replication", "CPU", "Modules",
        "Errorstats", "Cluster", "Keyspace",
    ]  # fmt: skip
    assert sections(peer.send("INFO")) == default
    assert sections(peer.send("INFO", "default")) == default
    everything = [*default[:8], "Commandstats", "Errorstats", "Latencystats", "Cluster", "Keyspace"]
    assert sections(peer.send("INFO", "all")) == everything
    assert sections(peer.send("INFO", "everything")) == everything
    assert sections(peer.send("INFO", "CPU", "replication", "nope")) == ["Replication", "CPU"]
    assert peer.send("INFO", "nope") == b"$0\r\n\r\n"


def test_server_replication_and_cpu_fields() -> None:
    broker = Broker(Config(redis=RedisConfig(port=7001)))
    peer = Peer(broker)
    info = fields(peer.send("INFO", "server", "replication", "cpu", "cluster"))
    assert info["redis_version"] == REDIS_VERSION
    assert info["redis_mode"] == "standalone"
    assert info["tcp_port"] == "7001"
    assert len(info["run_id"]) == 40
    assert info["role"] == "master"
    assert info["connected_slaves"] == "0"
    assert info["master_repl_offset"] == "0"
    assert float(info["used_cpu_user"]) > 0
    assert "used_cpu_sys_children" in info
    assert info["cluster_enabled"] == "0"


def test_commandstats_count_calls_failures_and_rejections() -> None:
    peer = Peer(Broker(Config()))
    peer.send("XADD", "s", "1-1", "f", "v")
    peer.send("XADD", "s", "1-1", "f", "v")  # (an ID not above the last one: fails)
    peer.send("XADD", "s")  # (wrong number of arguments: rejected)
    peer.send("NOPE")  # (no command: only an error reply)
    info = fields(peer.send("INFO", "commandstats", "errorstats", "stats"))
    assert info["cmdstat_xadd"].startswith("calls=2,usec=")
    assert info["cmdstat_xadd"].endswith(",rejected_calls=1,failed_calls=1")
    assert info["errorstat_ERR"] == "count=3"
    assert info["total_error_replies"] == "3"
    assert "cmdstat_nope" not in info
    assert peer.send("CONFIG", "RESETSTAT") == b"+OK\r\n"
    info = fields(peer.send("INFO", "commandstats", "errorstats"))
    assert "cmdstat_xadd" not in info
    assert "errorstat_ERR" not in info
    assert info["cmdstat_config|resetstat"].startswith("calls=1,")


def test_an_error_inside_exec_is_the_failing_command_s() -> None:
    peer = Peer(Broker(Config()))
    peer.send("CONFIG", "RESETSTAT")
    peer.send("MULTI")
    peer.send("XADD", "s", "1-1", "f", "v")
    peer.send("AUTH", "nobody")
    assert peer.send("EXEC").startswith(b"*2\r\n")
    assert peer.send("EXEC") == b"-ERR EXEC without MULTI\r\n"
    info = fields(peer.send("INFO", "commandstats", "errorstats"))
    assert info["cmdstat_xadd"].endswith("rejected_calls=0,failed_calls=0")
    assert info["cmdstat_auth"].endswith("rejected_calls=0,failed_calls=1")
    assert info["cmdstat_exec"].startswith("calls=2,")
    assert info["cmdstat_exec"].endswith("rejected_calls=0,failed_calls=1")
    assert info["errorstat_ERR"] == "count=2"


def test_error_codes_are_counted_apart() -> None:
    peer = Peer(Broker(Config()))
    peer.send("XADD", "s", "1-1", "f", "v")
    peer.send("XGROUP", "CREATE", "s", "g", "$")
    peer.send("XGROUP", "CREATE", "s", "g", "$")
    peer.send("XREADGROUP", "GROUP", "nogroup", "c", "STREAMS", "s", ">")
    info = fields(peer.send("INFO", "errorstats"))
    assert info == {"errorstat_BUSYGROUP": "count=1", "errorstat_NOGROUP": "count=1"}


async def test_blocked_clients_and_connections(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    port = node.redis_port or 0
    reader = await trio.open_tcp_stream("127.0.0.1", port)
    asker = await trio.open_tcp_stream("127.0.0.1", port)
    async with reader, asker:
        await reader.send_all(b"XREAD BLOCK 0 STREAMS s $\r\n")

        async def info() -> dict[str, str]:
            await asker.send_all(b"INFO clients\r\n")
            reply = b""
            while not reply.endswith(b"\r\n\r\n"):
                reply += await asker.receive_some()
            return fields(reply)

        while (await info())["blocked_clients"] != "1":  # noqa: ASYNC110 (seen only from outside)
            await trio.sleep(0.01)
        got = await info()
        assert got["connected_clients"] == "2"
        assert got["total_blocking_keys"] == "1"
        await asker.send_all(b"XADD s 1-1 f v\r\n")
        assert await asker.receive_some() == b"$3\r\n1-1\r\n"
        while (await info())["blocked_clients"] != "0":  # noqa: ASYNC110 (seen only from outside)
            await trio.sleep(0.01)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="needs redis-cli")
async def test_redis_cli_stat_prints_numbers(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))

    def stat() -> str:
        args = ["redis-cli", "-p", str(node.redis_port), "--stat", "-i", "0.2"]
        with subprocess.Popen(args, stdout=subprocess.PIPE, text=True) as cli:
            assert cli.stdout is not None
            lines = [cli.stdout.readline() for _ in range(4)]
            cli.kill()
        return "".join(lines)

    output = await trio.to_thread.run_sync(stat)
    assert "keys" in output
    assert "-9223372036854775808" not in output
    row = output.splitlines()[-1].split()
    assert row[0] == "0"  # keys
    assert row[3] == "0"  # blocked clients
