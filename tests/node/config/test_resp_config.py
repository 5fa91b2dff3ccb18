"""The Redis front door's settings: the ``[redis]`` table (or ``redis`` block) and the ``--redis_*``
flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.config.load import from_mapping, load
from node.config.options import ConfigError, RedisConfig, StreamConfig
from node.run.cli import command_line_config


def test_no_table_no_flag_no_listener() -> None:
    assert from_mapping({}).redis is None
    assert command_line_config([]).redis is None


def test_redis_table() -> None:
    config = from_mapping({"redis": {"port": 6380, "host": "127.0.0.1", "soft_seconds": 5}})
    assert config.redis == RedisConfig(host="127.0.0.1", port=6380, soft_seconds=5.0)
    with pytest.raises(ConfigError, match="unknown option 'nope'"):
        from_mapping({"redis": {"nope": 1}})
    with pytest.raises(ConfigError):
        from_mapping({"redis": {"port": "x"}})


def test_redis_flags() -> None:
    assert command_line_config(["--redis_port", "0"]).redis == RedisConfig(port=0)
    config = command_line_config(["--redis_port", "7000", "--redis_host", "127.0.0.1"])
    assert config.redis == RedisConfig(host="127.0.0.1", port=7000)


def test_maxmemory() -> None:
    config = from_mapping({"redis": {"maxmemory": "512MB"}})
    assert config.redis == RedisConfig(maxmemory=512 * 1024**2)
    assert from_mapping({"redis": {"maxmemory": 1000}}).redis == RedisConfig(maxmemory=1000)
    assert RedisConfig().maxmemory == 0  # (no limit)
    with pytest.raises(ConfigError, match="maxmemory: expected a size"):
        from_mapping({"redis": {"maxmemory": "lots"}})
    with pytest.raises(ConfigError, match="maxmemory must be 0"):
        from_mapping({"redis": {"maxmemory": -1}})


def test_maxmemory_and_max_bytes_in_the_nats_server_format(tmp_path: Path) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text(
        "redis { port: 6380, maxmemory: 512MB }\n"
        "streams: [ {name: events, subjects: ['orders.>'], max_bytes: 64MB} ]\n"
    )
    config = load(conf)
    assert config.redis == RedisConfig(port=6380, maxmemory=512 * 1024**2)
    assert config.streams == (StreamConfig("events", ("orders.>",), max_bytes=64 * 1024**2),)
