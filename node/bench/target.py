"""What every ``pubmesh bench compare`` case works with: the server under test (``Target``), what a
run of a case produced (``Outcome``), and how a table row reads a figure from it (``Metric``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from node.bench.replicas import ReplicatedCluster
from node.bench.servers import Flavor, RespFlavor
from node.bench.wire import Endpoint

__all__ = ["Metric", "Outcome", "Target", "scaled"]


class Outcome(Protocol):
    """What one run of a case produced, whatever the case measures."""

    @property
    def ok(self) -> bool: ...

    def failure(self) -> str: ...

    def as_dict(self) -> dict[str, Any]: ...


Metric = tuple[str, str, Callable[[Any], float]]
"""A table row a case fills: what is measured, its number format, and how to read it from an
outcome (of the type the case's ``measure`` returns)."""


@attrs.frozen
class Target:
    """One server under test, in every shape the cases need: a single node, and a cluster's nodes."""

    name: str
    version: str
    flavor: Flavor | None
    """How to start more of it; None for a RESP server (see ``resp_flavor``)."""
    node: Endpoint
    cluster: tuple[Endpoint, ...] = ()
    supercluster: tuple[Endpoint, ...] = ()
    """Cluster A's node, then cluster B's."""
    resp_flavor: RespFlavor | None = None
    """How to start more of a RESP server."""
    replicated: ReplicatedCluster | None = None
    """The pubmesh cluster of the replicated-keys cases."""
    replicas: int = 0
    """Replicas per key (per stream) in the replicated cases."""


def scaled(n: int, scale: float) -> int:
    return max(1, round(n * scale))
