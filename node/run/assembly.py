"""Putting a node together: the broker (with its accounts' imports), its client server, and its cluster
links.

This is the one place that wires ``node`` and ``cluster`` together. The launcher (real sockets) and
the in-process harness (a memory network) both build nodes with ``assemble`` and run them with
``Node.run``; they differ only in how connections are opened and accepted.
"""

from __future__ import annotations

import functools
import random

import trio

from cluster.connections import Dial
from cluster.gateways import GatewayManager
from cluster.placement import Layout, layout
from cluster.replication.replicas import Replicas
from cluster.routes import RedisPeer, RouteManager
from node.accounts.imports import install_imports
from node.broker import Broker
from node.config.options import Config, ConfigError
from node.data.capture import Captures
from node.data.store import Store
from node.monitoring.state import MonitorState
from node.monitoring.system import SystemAccount
from node.nats.discovery import own_urls
from node.replicated.path import KeyRouter
from node.replicated.topology import ClusterView
from node.resp.executor import CommandExecutor
from node.run.node import Node
from node.server import Server

__all__ = ["assemble"]


def assemble(config: Config, *, dial: Dial = trio.open_tcp_stream, seed: int | None = None) -> Node:
    """A node built from ``config``: clustered if it has ``cluster`` settings (and ready to form
    replica groups if it also has a ``store_dir`` and a ``server_name``; with ``[replication]
    members`` its Redis keys live on them, placed by ``cluster.placement``), joined to other
    clusters if it has ``gateway`` settings, capturing subjects into the streams it lists, and
    answering in its system account.

    Args:
        dial: how links open connections (the harness passes its memory network's).
        seed: makes queue picks, server id, backoff jitter and link names repeatable.
    """

    def rng() -> random.Random | None:
        return random.Random(seed) if seed is not None else None

    broker = Broker(config, rng=rng())
    install_imports(broker)
    server = Server(config, broker=broker)
    node = Node(server)
    executor = functools.partial(CommandExecutor, broker)
    replicated = bool(config.replication.members)
    if config.store_dir is not None and not replicated:  # (else the replica groups keep the keys)
        node.store = Store(
            config.store_dir,
            executor=executor,
            appendfsync=config.appendfsync,
            rewrite_percentage=config.rewrite_percentage,
            rewrite_min_size=config.rewrite_min_size,
        )
    if config.streams:
        node.captures = Captures(server.broker, config.streams, replicated=replicated)
        node.captures.subscribe()
    if server.broker.system_account is not None:
        node.system = SystemAccount(node, MonitorState(node, config.http_host))
        node.system.subscribe()
    if config.cluster is not None:
        node.routes = RouteManager(server.broker, config.cluster, server.flusher, dial=dial, rng=rng())
        node.routes.on_client_urls = node.cluster_changed
        if config.store_dir is not None and config.server_name:
            node.replicas = Replicas(
                config.server_name,
                config.store_dir,
                config.replication,
                node.routes.send_raft,
                pending=node.routes.raft_pending,
                rng=rng(),
            )
            node.routes.on_raft = node.replicas.receive
            if replicated:
                replicas = config.redis.replicas if config.redis is not None else 1
                plan = layout(config.replication.members, replicas)
                _check_stored_layout(node.replicas, plan, config.store_dir)
                node.keys = KeyRouter(
                    config.server_name, plan, node.replicas, broker.keyspaces, executor,
                    node.routes.send_raft, max_carried=config.cluster.frame_room // 2,
                    pending=node.routes.raft_pending,
                )  # fmt: skip
                broker.key_router = node.keys
                if node.captures is not None:
                    node.captures.groups = node.keys
                redis = config.redis
                if redis is not None and redis.port:  # (where the node takes Redis clients)
                    own = own_urls(redis.host or config.host, redis.port, None)
                    node.routes.redis_url = own[0] if own else ""
                me = RedisPeer(config.server_name, node.routes.redis_url, node.routes.url, True)
                node.keys.view = ClusterView(plan, node.replicas, me, node.routes.redis_peers)
                node.routes.on_keys = node.keys.receive
                node.replicas.on_unknown = node.keys.refused
    if config.gateway is not None:
        node.gateways = GatewayManager(
            server.broker, config.gateway, server.flusher, routes=node.routes, dial=dial, rng=rng()
        )
    return node


def _check_stored_layout(replicas: Replicas, plan: Layout, store_dir: str) -> None:
    """Refuse a store that holds the keys of another layout: ``[replication] members`` or ``[redis]
    replicas`` changed since it was written, and the keys would silently be missing (their groups
    are not this layout's, and no layout change moves keys between groups)."""
    foreign = [name for name in replicas.stored() if plan.refusal(name)]
    if foreign:
        raise ConfigError(
            f"store_dir {store_dir} holds the keys of another key layout (replica groups "
            f"{', '.join(foreign)}): [replication] members or [redis] replicas changed since they "
            f"were written, and keys are not moved between layouts; start with the configuration "
            f"that wrote them, or move raft/{foreign[0]} (and the others) out of the store to start "
            f"without those keys"
        )
