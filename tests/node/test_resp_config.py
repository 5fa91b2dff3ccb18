"""The Redis front door's settings: the ``[redis]`` table and the ``--redis_*`` flags."""

from __future__ import annotations

import pytest

from node.cli import command_line_config
from node.config import ConfigError, RedisConfig, from_mapping


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
