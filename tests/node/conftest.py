"""The ``node`` fixture of the node tests: a whole node on 127.0.0.1 in the test's nursery."""

from __future__ import annotations

import pytest
import trio

from node.run.launch import NodeHandle
from tests.support import start_node


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_node(nursery)
