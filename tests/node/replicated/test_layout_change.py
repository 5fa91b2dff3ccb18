"""A store written under one key layout, started under another: the node refuses to start, saying
why, instead of serving a keyspace from which every key written before is missing."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from node.config.options import ConfigError
from node.run.assembly import assemble
from node.run.launch import NodeHandle
from tests.node.replicated.test_path import RAFT, call, start_member, stop
from tests.support import until

pytestmark = pytest.mark.timeout(60)


def leads(handle: NodeHandle) -> bool:
    replicas = handle.node.replicas
    assert replicas is not None
    statuses = replicas.status()
    return bool(statuses) and all(status.leader == "a" for status in statuses)


async def test_a_store_of_another_layout_is_refused_and_its_own_layout_starts_again(
    tmp_path: Path,
) -> None:
    alone = attrs.evolve(RAFT, members=("a",))
    async with trio.open_nursery() as nursery:
        handle = await start_member(nursery, tmp_path, "a", None, replication=alone, replicas=1)
        await until(lambda: leads(handle))
        assert await call(handle, "SET", "k", "v") is True
        config = handle.server.config
        await stop(handle)
    grown = attrs.evolve(config, replication=attrs.evolve(alone, members=("a", "b")))
    with pytest.raises(ConfigError, match="holds the keys of another key layout") as refused:
        assemble(grown)
    assert "[replication] members or [redis] replicas changed" in str(refused.value)
    async with trio.open_nursery() as nursery:  # (the layout that wrote them serves them again)
        handle = await start_member(nursery, tmp_path, "a", None, replication=alone, replicas=1)
        await until(lambda: leads(handle))
        assert await call(handle, "GET", "k") == b"v"
        await stop(handle)
