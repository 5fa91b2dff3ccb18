"""Putting a node together: the broker, its client server, and its cluster links.

This is the one place that wires ``node`` and ``cluster`` together. The launcher (real sockets) and
the in-process harness (a memory network) both build nodes with ``assemble`` and run them with
``Node.run``; they differ only in how connections are opened and accepted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import partial
from typing import Any

import attrs
import trio

from cluster.connections import Dial
from cluster.gateways import GatewayManager
from cluster.routes import RouteManager
from node.broker import Broker
from node.config.options import Config
from node.data.capture import Captures
from node.data.store import Store
from node.monitoring.system import SystemAccount
from node.monitoring.views import MonitorState
from node.resp.executor import CommandExecutor
from node.server import Server

__all__ = ["Listeners", "Node", "assemble"]

Listener = trio.abc.Listener[Any]


@attrs.frozen
class Listeners:
    """Where a node accepts connections: clients, routes (if clustered), gateways (if any), Redis
    clients (if configured)."""

    clients: Sequence[Listener]
    routes: Sequence[Listener] = ()
    gateways: Sequence[Listener] = ()
    redis: Sequence[Listener] = ()


@attrs.define(eq=False)
class Node:
    """A node's parts: the server (and its broker), its route and gateway managers, and the streams
    that capture subjects."""

    server: Server
    routes: RouteManager | None = None
    gateways: GatewayManager | None = None
    store: Store | None = None
    """The append-only file of the Redis keys (``store_dir``)."""
    captures: Captures | None = None
    system: SystemAccount | None = None
    """The system account's requests and events (None with ``no_system_account``)."""

    @property
    def broker(self) -> Broker:
        return self.server.broker

    def set_client_urls(self, urls: tuple[str, ...]) -> None:
        """Where this node takes clients: what it advertises to them, and (unless the cluster
        settings say ``no_advertise``) to its route peers for theirs."""
        self.server.own_urls = urls
        if self.routes is not None and not self.routes.config.no_advertise:
            self.routes.advertise_clients(urls)
        self._cluster_changed()

    def lame_duck(self) -> None:
        """Enter lame duck mode (SIGUSR2): peers stop advertising this node to their clients, and
        the server moves its own clients away before it stops (see ``Server.lame_duck``)."""
        if self.routes is not None and self.routes.client_urls:
            self.routes.advertise_clients(())
        self.server.lame_duck()

    def _cluster_changed(self) -> None:
        self.server.advertise(self.routes.peer_client_urls() if self.routes is not None else [])

    @property
    def config(self) -> Config:
        return self.server.config

    async def run(
        self, listeners: Listeners, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until the server is shut down: then links stop at once, and clients once flushed.

        With a store, its file is replayed before any listener accepts a client, and closed (all
        of it fsynced) once the last client is gone."""
        if self.store is None:
            await self._serve(listeners, task_status)
            return
        self.store.load(self.broker)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.store.run)
                await self._serve(listeners, task_status)
                nursery.cancel_scope.cancel()
        finally:
            self.store.close()

    async def _serve(self, listeners: Listeners, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(self.server.serve, listeners.clients, redis=listeners.redis))
            links: trio.Nursery = await nursery.start(_open_links)
            if self.captures is not None:
                await links.start(self.captures.run)
            if self.system is not None:
                await links.start(self.system.run)
            if self.routes is not None:
                await links.start(self.routes.run, listeners.routes)
            if self.gateways is not None:
                await links.start(self.gateways.run, listeners.gateways)
            task_status.started()
            await self.server.stopping.wait()
            links.cancel_scope.cancel()


def assemble(config: Config, *, dial: Dial = trio.open_tcp_stream, seed: int | None = None) -> Node:
    """A node built from ``config``: clustered if it has ``cluster`` settings, joined to other
    clusters if it has ``gateway`` settings, capturing subjects into the streams it lists, and
    answering in its system account.

    Args:
        dial: how links open connections (the harness passes its memory network's).
        seed: makes queue picks, server id, backoff jitter and link names repeatable.
    """

    def rng() -> random.Random | None:
        return random.Random(seed) if seed is not None else None

    server = Server(config, broker=Broker(config, rng=rng()))
    node = Node(server)
    if config.store_dir is not None:
        node.store = Store(
            config.store_dir,
            executor=CommandExecutor,
            appendfsync=config.appendfsync,
            rewrite_percentage=config.rewrite_percentage,
            rewrite_min_size=config.rewrite_min_size,
        )
    if config.streams:
        node.captures = Captures(server.broker, config.streams)
        node.captures.subscribe()
    if server.broker.system_account is not None:
        node.system = SystemAccount(node, MonitorState(node, config.http_host))
        node.system.subscribe()
    if config.cluster is not None:
        node.routes = RouteManager(server.broker, config.cluster, server.flusher, dial=dial, rng=rng())
        node.routes.on_client_urls = node._cluster_changed
    if config.gateway is not None:
        node.gateways = GatewayManager(
            server.broker, config.gateway, server.flusher, routes=node.routes, dial=dial, rng=rng()
        )
    return node


async def _open_links(*, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
    """A nursery for the node's links, which stop (by cancellation) apart from the clients."""
    async with trio.open_nursery() as links:
        task_status.started(links)
        await trio.sleep_forever()
