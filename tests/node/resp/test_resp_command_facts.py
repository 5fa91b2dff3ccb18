"""COMMAND from redis-server's command descriptions: every command served has its facts (arity
agreeing with the table), GETKEYS and GETKEYSANDFLAGS find keys by the key specs with their flags
(SET's depending on GET), COMMAND INFO shows ``movablekeys`` where the keys are not one plain
range, subcommands are listed by pattern, and DOCS gives group, version and the arguments'
structure; beside redis-server where 7.0 and 7.2 describe a command alike."""

from __future__ import annotations

import shutil

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config
from node.resp.command_facts import keys_by_specs
from node.resp.command_facts_data import FACTS
from node.resp.command_summaries import SUMMARIES, summary
from node.resp.commands.table import COMMANDS
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import command, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)


def _served() -> list[tuple[str, int]]:
    found = []
    for top in COMMANDS.by_name.values():
        for c in [top, *(top.subcommands or {}).values()]:
            found.append((c.name, c.arity))
    return found


def test_every_command_served_has_its_facts_and_a_summary() -> None:
    for name, arity in _served():
        assert FACTS[name].arity == arity, name
        assert summary(name), name
    assert set(FACTS) == {name for name, _ in _served()}
    assert set(SUMMARIES) <= set(FACTS)


def _getkeysandflags(*args: bytes) -> bytes:
    return command(b"COMMAND", b"GETKEYSANDFLAGS", *args)


SCENARIO: list[Step] = [
    (
        0,
        _getkeysandflags(b"set", b"k1", b"v1")
        + _getkeysandflags(b"SET", b"k", b"v", b"EX", b"1", b"get"),
    ),
    (
        0,
        _getkeysandflags(b"set", b"k", b"get", b"v") + _getkeysandflags(b"mset", b"a", b"1", b"b", b"2"),
    ),
    (0, _getkeysandflags(b"msetnx", b"a", b"1", b"b") + _getkeysandflags(b"getdel", b"k")),
    (0, _getkeysandflags(b"rename", b"a", b"b") + _getkeysandflags(b"copy", b"a", b"b", b"db", b"1")),
    (0, _getkeysandflags(b"lcs", b"a", b"b") + _getkeysandflags(b"del", b"a", b"b")),
    (0, _getkeysandflags(b"eval", b"s", b"2", b"a", b"b", b"c") + _getkeysandflags(b"eval", b"s", b"0")),
    (0, _getkeysandflags(b"eval", b"s", b"x") + _getkeysandflags(b"evalsha_ro", b"s", b"3", b"a")),
    (0, _getkeysandflags(b"xread", b"COUNT", b"1", b"streams", b"a", b"b", b"0", b"0")),
    (
        0,
        _getkeysandflags(b"xread", b"COUNT", b"1", b"BLOCK", b"0")
        + _getkeysandflags(b"xread", b"streams", b"x"),
    ),
    (0, _getkeysandflags(b"xreadgroup", b"GROUP", b"g", b"c", b"STREAMS", b"s", b">")),
    (0, _getkeysandflags(b"xgroup", b"create", b"s", b"g", b"$")),
    (0, _getkeysandflags(b"memory", b"usage", b"k") + _getkeysandflags(b"object", b"encoding", b"k")),
    (
        0,
        _getkeysandflags(b"ping", b"x")
        + _getkeysandflags(b"nope", b"x")
        + _getkeysandflags(b"get", b"k"),
    ),
    (
        0,
        _getkeysandflags(b"xautoclaim", b"s", b"g", b"c", b"0", b"0") + _getkeysandflags(b"touch", b"a"),
    ),
    (0, b"command info get mset xread del exists incr publish ping getdel xack xlen\r\n"),
    (0, b"command info lcs object|encoding config|get set|x get|key\r\n"),
]


@needs_redis_server
async def test_keys_and_flags_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


def _info_flags(peer: Peer, name: str) -> bytes:
    reply = peer.send("COMMAND", "INFO", name)
    return reply.split(b":")[1]  # (the arity, then the flags up to the first key)


def test_movable_keys_as_redis_server_marks_them() -> None:
    peer = Peer(Broker(Config()))
    for name in ("eval", "evalsha", "eval_ro", "fcall", "fcall_ro", "xread", "xreadgroup"):
        assert b"+movablekeys" in _info_flags(peer, name), name
    for name in ("set", "get", "mset", "ping", "memory", "memory|usage", "rename", "xadd"):
        assert b"movablekeys" not in _info_flags(peer, name), name


def test_getkeys_of_a_container_or_a_bare_command_as_redis_server_7_2() -> None:
    peer = Peer(Broker(Config()))  # (7.0 refused these by COMMAND GETKEYS's own arity)
    assert peer.send("COMMAND", "GETKEYS", "xgroup") == b"-ERR The command has no key arguments\r\n"
    assert peer.send("COMMAND", "GETKEYS", "ping") == b"-ERR The command has no key arguments\r\n"
    assert peer.send("COMMAND", "GETKEYS", "get") == (
        b"-ERR Invalid number of arguments specified for command\r\n"
    )


def test_subcommands_are_listed_by_pattern() -> None:
    peer = Peer(Broker(Config()))
    listed = peer.send("COMMAND", "LIST", "FILTERBY", "PATTERN", "cl*help")
    assert listed == b"*2\r\n$11\r\nclient|help\r\n$12\r\ncluster|help\r\n"
    assert peer.send("COMMAND", "LIST", "FILTERBY", "ACLCAT", "nope") == b"*0\r\n"
    scripting = peer.send("COMMAND", "LIST", "FILTERBY", "ACLCAT", "scripting")
    assert b"$4\r\neval\r\n" in scripting
    assert b"$5\r\nfcall\r\n" in scripting


def test_docs_give_group_version_and_arguments() -> None:
    peer = Peer(Broker(Config()))
    assert peer.send("COMMAND", "DOCS", "get") == (
        b"*2\r\n$3\r\nget\r\n*8\r\n$7\r\nsummary\r\n$21\r\nA key's string value.\r\n"
        b"$5\r\nsince\r\n$5\r\n1.0.0\r\n$5\r\ngroup\r\n$6\r\nstring\r\n"
        b"$9\r\narguments\r\n*1\r\n*6\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n"
        b"$14\r\nkey_spec_index\r\n:0\r\n"
    )
    docs = peer.send("COMMAND", "DOCS", "set")
    assert b"$4\r\ntype\r\n$5\r\noneof\r\n" in docs
    assert b"$5\r\ntoken\r\n$2\r\nNX\r\n" in docs
    assert b"$5\r\nflags\r\n*1\r\n+optional\r\n" in docs
    client = peer.send("COMMAND", "DOCS", "client")
    assert b"$11\r\nsubcommands\r\n" in client
    assert b"$11\r\nclient|list\r\n" in client


ARGS = st.lists(
    st.one_of(
        st.sampled_from([b"STREAMS", b"streams", b"0", b"1", b"2", b"-1", b"GET", b"k", b"x" * 3]),
        st.binary(max_size=4),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FACTS)), ARGS)
def test_keys_found_by_specs_are_arguments_of_the_request(name: str, rest: list[bytes]) -> None:
    args = [name.encode(), *rest]
    found = keys_by_specs(FACTS[name], args)
    if found is not None:
        assert all(1 <= i < len(args) for i, _ in found)
