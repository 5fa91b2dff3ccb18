"""What every monitoring document is built from: the node it observes and the monitoring server's own
state, and the error a query the endpoints cannot answer raises.

Monitoring reads a running node through ``MonitoredNode``, the parts of it the documents describe,
and never builds or runs one: the node's assembly (``node.run``) sits above monitoring and hands a
node in.
"""

from __future__ import annotations

import collections
import time
from typing import Protocol

import attrs
import trio

from cluster.gateways import GatewayManager
from cluster.replication.replicas import Replicas
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.broker import Broker
from node.data.capture import Captures

__all__ = ["DEFAULT_LIST_SIZE", "BadRequest", "CpuMeter", "MonitorState", "MonitoredNode"]

DEFAULT_LIST_SIZE = 1024
"""nats-server's page size for /connz and /subsz when ``limit`` is absent or not positive."""


class BadRequest(ValueError):
    """A query the endpoint cannot answer; the message is the 400 body, in nats-server's words."""


class MonitoredNode(Protocol):
    """What monitoring reads of a running node: its broker, its route and gateway managers (None
    when it has no routes or gateways), the streams that capture subjects (None without any) and
    its replica groups (None when it runs none)."""

    @property
    def broker(self) -> Broker: ...

    @property
    def routes(self) -> RouteManager[Account] | None: ...

    @property
    def gateways(self) -> GatewayManager[Account] | None: ...

    @property
    def captures(self) -> Captures | None: ...

    @property
    def replicas(self) -> Replicas | None: ...


class CpuMeter:
    """Process CPU use in percent of one core, as /varz reports it.

    nats-server samples every second in the background; here a new sample is taken when one is asked
    for and the last is at least a second old, which gives the same figure without a timer task.
    """

    def __init__(self) -> None:
        self._wall = time.monotonic()
        self._cpu = time.process_time()
        self._percent = 0.0

    def read(self) -> float:
        wall, cpu = time.monotonic(), time.process_time()
        if wall - self._wall >= 1.0:
            self._percent = round(100 * (cpu - self._cpu) / (wall - self._wall), 1)
            self._wall, self._cpu = wall, cpu
        return self._percent


@attrs.define
class MonitorState:
    """What the monitoring server knows beyond the broker: its own address and request counts."""

    node: MonitoredNode
    http_host: str
    http_port: int = 0
    requests: collections.Counter[str] = attrs.field(factory=collections.Counter)
    cpu: CpuMeter = attrs.field(factory=CpuMeter)
    listing: trio.Lock = attrs.field(factory=trio.Lock)
    """Held while a document that lists connections or subscriptions is built: one at a time, so
    concurrent requests for large ones cannot multiply the memory they take."""
    stepped_down_at: float | None = None
    """When (trio's clock) a step-down was last asked for over HTTP (``POST /raftz/stepdown``)."""

    @property
    def broker(self) -> Broker:
        return self.node.broker
