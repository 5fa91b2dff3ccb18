"""pytest fixtures running real pubmesh nodes (registered as the ``pubmesh`` plugin).

``pubmesh_node``, ``pubmesh_cluster`` (three nodes) and ``pubmesh_supercluster`` (clusters ``east``
of two nodes and ``west`` of one) start before the test and stop after it, each with its client,
Redis and monitoring ports free ones of 127.0.0.1. Their configuration is ``pubmesh_config``'s:
override that fixture to give them users, accounts, streams... The fixtures are plain (not async), so
they serve sync, asyncio and trio tests alike: the nodes run in a thread of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from node.config.options import Config
    from pubmesh_testing import RunningCluster, RunningNode, RunningSuperCluster


@pytest.fixture
def pubmesh_config() -> Config:
    """The configuration every pubmesh fixture starts its nodes with (ports aside)."""
    from node.config.options import Config

    return Config()


@pytest.fixture
def pubmesh_node(pubmesh_config: Config) -> Iterator[RunningNode]:
    """One node."""
    from pubmesh_testing import running_node

    with running_node(pubmesh_config) as node:
        yield node


@pytest.fixture
def pubmesh_cluster(pubmesh_config: Config) -> Iterator[RunningCluster]:
    """Three nodes joined by routes, every route up."""
    from pubmesh_testing import running_cluster

    with running_cluster(3, pubmesh_config) as cluster:
        yield cluster


@pytest.fixture
def pubmesh_supercluster(pubmesh_config: Config) -> Iterator[RunningSuperCluster]:
    """Clusters ``east`` (two nodes) and ``west`` (one) joined by gateways, every link up."""
    from pubmesh_testing import running_supercluster

    with running_supercluster(pubmesh_config) as supercluster:
        yield supercluster
