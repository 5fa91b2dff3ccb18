"""A node's parts and how they run: the server (and its broker), its route and gateway links, the
store, the replica groups, the streams that capture subjects, and the system account.

``Node.run`` serves until the server shuts down; how the parts are built from a configuration is
``node.run.assembly``'s to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import attrs
import trio

from cluster.gateways import GatewayManager
from cluster.replication.replicas import Replicas
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.broker import Broker
from node.config.options import Config
from node.data.capture import Captures
from node.data.store import Store
from node.monitoring.system import SystemAccount
from node.replicated.path import KeyRouter
from node.server import Server

__all__ = ["Listeners", "Node"]

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
    routes: RouteManager[Account] | None = None
    gateways: GatewayManager[Account] | None = None
    store: Store | None = None
    """The append-only file of the Redis keys (``store_dir``)."""
    replicas: Replicas | None = None
    """The replica groups this node is a member of (clustered, with a ``store_dir``)."""
    keys: KeyRouter | None = None
    """The Redis keys on replica groups (``[replication] members``)."""
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
        self.cluster_changed()

    def lame_duck(self) -> None:
        """Enter lame duck mode (SIGUSR2): the replica groups this node leads are handed to other
        voters, peers stop advertising this node to their clients, and the server moves its own
        clients away before it stops (see ``Server.lame_duck``)."""
        if self.replicas is not None:
            self.replicas.hand_over()
        if self.routes is not None and self.routes.client_urls:
            self.routes.advertise_clients(())
        self.server.lame_duck()

    def step_down(self) -> bool:
        """Hand the replica groups this node leads to other voters (``--signal stepdown``), and
        go on serving; False when it runs no groups."""
        if self.replicas is None:
            return False
        self.replicas.hand_over()
        return True

    def cluster_changed(self) -> None:
        """Tell this node's clients where its route peers take clients (the route manager calls
        this whenever those change)."""
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
        self.store.load(self.broker.keyspaces)
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
            if self.replicas is not None:
                await links.start(self.replicas.run)
            if self.keys is not None:
                await links.start(self.keys.run)
            if self.routes is not None:
                await links.start(self.routes.run, listeners.routes)
            if self.gateways is not None:
                await links.start(self.gateways.run, listeners.gateways)
            task_status.started()
            await self.server.stopping.wait()
            if self.replicas is not None:
                await self.replicas.handed_over()  # (lame duck mode: the groups it led first)
            links.cancel_scope.cancel()


async def _open_links(*, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
    """A nursery for the node's links, which stop (by cancellation) apart from the clients."""
    async with trio.open_nursery() as links:
        task_status.started(links)
        await trio.sleep_forever()
