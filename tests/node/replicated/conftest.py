"""What the replicated-keys tests share: redis-server beside the nodes, for replies to compare."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from pipeline.local import redis_server


@pytest.fixture(scope="module")
def reference() -> Iterator[int]:
    """The port of a redis-server started for the module (the test is skipped without one)."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    with redis_server() as port:
        yield port
