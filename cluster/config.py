"""How a node joins a cluster (routes) and its cluster joins others (gateways): addresses and rules."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from transport.tls import TlsConfig

__all__ = ["ClusterConfig", "GatewayConfig", "ReplicationConfig", "parse_url"]

DEFAULT_CLUSTER_PORT = 6222
DEFAULT_GATEWAY_PORT = 7222
DEFAULT_MAX_PENDING = 32 * 1024 * 1024
"""Bytes a link may hold for a peer that does not read them before it is cut as a slow consumer
(nats-server bounds clients at 64 MiB; a link serves many, but what it holds is all in memory)."""
DEFAULT_WRITE_DEADLINE = 10.0


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class ReplicationConfig:
    """How a node runs its replica groups (``cluster.replication``): Raft's clock and limits.

    With the defaults a follower notices a dead leader within 1 to 2 s (an election timeout is
    drawn from [``election_ticks``, 2 * ``election_ticks``) ticks) and an election takes a few
    round trips more, so writes resume well within 3 s.

    Attributes:
        tick: seconds per Raft tick.
        election_ticks: the election timeout's lower bound, in ticks.
        heartbeat_ticks: ticks between a leader's heartbeats.
        snapshot_entries: applied entries after which a group snapshots its state machine and
            drops the log before it.
        propose_timeout: seconds a proposal may wait to be committed and applied.
        members: the server names the Redis keys are placed on (``cluster.placement``), in an
            order identical on every node (empty: keys are not replicated).
    """

    tick: float = 0.1
    election_ticks: int = 10
    heartbeat_ticks: int = 1
    snapshot_entries: int = 8192
    propose_timeout: float = 5.0
    members: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def __attrs_post_init__(self) -> None:
        if self.tick <= 0 or not 0 < self.heartbeat_ticks < self.election_ticks:
            raise ValueError("need tick > 0 and 0 < heartbeat_ticks < election_ticks")
        if self.snapshot_entries < 1 or self.propose_timeout <= 0:
            raise ValueError("need snapshot_entries >= 1 and propose_timeout > 0")

    def evolve(self, **changes: Any) -> ReplicationConfig:
        return attrs.evolve(self, **changes)


@attrs.frozen
class ClusterConfig:
    """Route settings; all nodes of a cluster must agree on ``name`` and ``secret``.

    Attributes:
        name: the cluster's name; a node of another cluster is refused.
        host, port: where to accept routes (port 0 picks a free one).
        seeds: route URLs (``nats://host:port``) to dial at start; the rest of the mesh is learned
            by gossip, so one seed is enough.
        advertise: the route URL to tell peers (default: host:port as bound).
        secret: a shared secret each side of a route proves it knows (it is never sent; empty:
            anyone may connect).
        pool_size: connections per peer; each account's traffic uses one of them, always the same.
        pinned_accounts: accounts given a connection of their own to every peer.
        ping_interval: seconds between heartbeats on an idle connection.
        ping_max: heartbeats that may go unanswered before a peer is declared dead (a partition
            leaves TCP connections open, so silence is the only sign).
        reconnect_min, reconnect_max: bounds of the exponential backoff between dials.
        max_frame: the largest frame accepted; a bigger one closes the link. (Until a peer has
            proved it knows the secret, frames of at most 64 KiB are accepted.)
        max_accounts: how many accounts frames from routes may bring into being (accounts this
            node has anyway do not count); frames for further ones are dropped with a warning.
        max_pending: bytes queued for a peer (and not yet taken by its socket) past which the link
            is cut as a slow consumer; from three quarters of it on, client publishers feeding the
            link pause briefly for it to drain. It must hold the interest snapshot a link starts with.
        write_deadline: seconds one write to a peer may take before the link is cut as a slow
            consumer.
        tls: TLS for routes in both directions (None: plain TCP); each side presents its
            certificate and checks the other's against ``tls.ca_file``.
        no_advertise: the node neither gives its client URLs to peers nor tells its clients of
            theirs (nats-server's ``cluster { no_advertise }``).
    """

    name: str = "pubmesh"
    host: str = "0.0.0.0"
    port: int = DEFAULT_CLUSTER_PORT
    seeds: tuple[str, ...] = ()
    advertise: str | None = None
    secret: str = ""
    pool_size: int = 3
    pinned_accounts: tuple[str, ...] = ()
    ping_interval: float = 1.0
    ping_max: int = 3
    reconnect_min: float = 0.05
    reconnect_max: float = 2.0
    max_frame: int = 64 * 1024 * 1024
    max_pending: int = DEFAULT_MAX_PENDING
    write_deadline: float = DEFAULT_WRITE_DEADLINE
    tls: TlsConfig | None = None
    max_accounts: int = 4096
    no_advertise: bool = False

    def evolve(self, **changes: Any) -> ClusterConfig:
        return attrs.evolve(self, **changes)

    @property
    def frame_room(self) -> int:
        """The largest frame a link takes to a peer: past ``max_frame`` the peer refuses it, past
        ``max_pending`` the link is cut before it leaves."""
        return min(self.max_frame, self.max_pending)


@attrs.frozen
class GatewayConfig:
    """Gateway settings; every node of a cluster runs gateways under the cluster's gateway name.

    Attributes:
        name: this cluster's name in the super-cluster; other clusters know it by this.
        host, port: where to accept gateway links from other clusters' nodes.
        gateways: other clusters and gateway URLs of some of their nodes; the rest of their nodes,
            and clusters not listed here, are learned from the links themselves.
        advertise: the gateway URL to tell others (default: host:port as bound).
        secret: a shared secret each side of a gateway link proves it knows (never sent).
        ping_interval, ping_max, reconnect_min, reconnect_max, max_frame, max_accounts,
            max_pending, write_deadline, tls: as for routes.
        reply_ttl: seconds a reply subject that crossed a gateway is remembered, so the reply can
            go straight back to the requester's node.
    """

    name: str
    host: str = "0.0.0.0"
    port: int = DEFAULT_GATEWAY_PORT
    gateways: tuple[tuple[str, tuple[str, ...]], ...] = ()
    advertise: str | None = None
    secret: str = ""
    ping_interval: float = 2.0
    ping_max: int = 3
    reconnect_min: float = 0.05
    reconnect_max: float = 2.0
    max_frame: int = 64 * 1024 * 1024
    max_accounts: int = 4096
    max_pending: int = DEFAULT_MAX_PENDING
    write_deadline: float = DEFAULT_WRITE_DEADLINE
    reply_ttl: float = 2.0
    tls: TlsConfig | None = None

    def evolve(self, **changes: Any) -> GatewayConfig:
        return attrs.evolve(self, **changes)


def parse_url(url: str) -> tuple[str, int]:
    """(host, port) of a route URL such as ``nats://10.0.0.1:6222`` or ``host:port``.

    Raises:
        ValueError: no usable host:port in it.
    """
    rest = url.split("://", 1)[-1].rstrip("/")
    rest = rest.rsplit("@", 1)[-1]  # credentials in a URL are not used here
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"not a route URL: {url!r}")
    return host.strip("[]"), int(port)
