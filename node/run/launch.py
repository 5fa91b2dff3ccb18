"""Starting a whole node: client listeners, the monitoring server, and a clean stop.

``run_node`` is what the command line runs and what end-to-end tests start: it binds the configured
ports (port 0 picks a free one), reports what it bound through ``task_status``, and returns after
``shutdown()`` once every connection has been closed and flushed.
"""

from __future__ import annotations

import logging
import os
import socket
from functools import partial

import attrs
import trio

from cluster.gateways import GatewayManager
from cluster.routes import RouteManager
from node.accounts.account import Account
from node.config.options import RANDOM_PORT, Config
from node.nats.discovery import own_urls
from node.run.assembly import assemble
from node.run.node import Listeners, Node
from node.server import Server

__all__ = ["NodeHandle", "StartupError", "run_node"]

log = logging.getLogger("pubmesh")


class StartupError(Exception):
    """The node could not start (a port it cannot bind); the message says so as nats-server would."""


@attrs.define
class NodeHandle:
    """A running node, as its starter sees it."""

    node: Node
    host: str
    port: int
    http_port: int | None = None
    """The monitoring port (HTTPS when the configuration asks for ``https_port``)."""
    cluster_port: int | None = None
    gateway_port: int | None = None
    redis_port: int | None = None
    """The Redis (RESP) port, when the configuration has ``redis``."""
    finished: trio.Event = attrs.field(factory=trio.Event)
    """Set once the node has stopped: ports released, connections closed."""

    @property
    def server(self) -> Server:
        return self.node.server

    @property
    def routes(self) -> RouteManager[Account] | None:
        return self.node.routes

    @property
    def gateways(self) -> GatewayManager[Account] | None:
        return self.node.gateways

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def shutdown(self) -> None:
        """Ask the node to stop; ``run_node`` returns once it has."""
        self.server.shutdown()

    def lame_duck(self) -> None:
        """Enter lame duck mode; ``run_node`` returns once every client has been moved away."""
        self.node.lame_duck()


async def run_node(
    config: Config, *, task_status: trio.TaskStatus[NodeHandle] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a node until its handle's ``shutdown`` is called (or this task is cancelled)."""
    clients = await _bind(config.host, config.port)
    port = clients[0].socket.getsockname()[1]
    listeners = Listeners(clients)
    cluster_port = gateway_port = None
    if config.cluster is not None:
        routes, cluster_port, url = await _listen(
            config.cluster.host, config.cluster.port, config.cluster.advertise
        )
        listeners = attrs.evolve(listeners, routes=routes)
        config = config.evolve(cluster=config.cluster.evolve(port=cluster_port, advertise=url))
    if config.gateway is not None:
        gateways, gateway_port, url = await _listen(
            config.gateway.host, config.gateway.port, config.gateway.advertise
        )
        listeners = attrs.evolve(listeners, gateways=gateways)
        config = config.evolve(gateway=config.gateway.evolve(port=gateway_port, advertise=url))
    redis_port = None
    if config.redis is not None:
        redis_host = config.redis.host or config.host
        redis = await _bind(redis_host, config.redis.port)
        redis_port = redis[0].socket.getsockname()[1]
        listeners = attrs.evolve(listeners, redis=redis)
        config = config.evolve(redis=config.redis.evolve(host=redis_host, port=redis_port))
    node = assemble(config)
    node.broker.port = port
    node.broker.stop = node.server.shutdown
    node.set_client_urls(own_urls(config.host, port, config.client_advertise))
    handle = NodeHandle(
        node,
        config.host,
        port,
        cluster_port=cluster_port,
        gateway_port=gateway_port,
        redis_port=redis_port,
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(node.run, listeners)
            _log_links(config)
            https = config.https_port is not None
            monitor_port = config.https_port if https else config.http_port
            if monitor_port is not None:
                from node.monitoring.server import (
                    serve_monitoring,  # hypercorn loads only when monitoring is on
                )

                handle.http_port = await nursery.start(
                    partial(
                        serve_monitoring,
                        node,
                        config.http_host,
                        max(monitor_port, 0),
                        shutdown=node.server.stopping,
                        tls=config.tls if https else None,
                    )
                )
                scheme = "https" if https else "http"
                log.info("Starting %s monitor on %s:%d", scheme, config.http_host, handle.http_port)
            log.info("Listening for client connections on %s:%d", handle.host, handle.port)
            if config.redis is not None:
                log.info("Listening for Redis connections on %s:%d", config.redis.host, redis_port)
            if config.tls is not None:
                log.info("TLS required for client connections")
            log.info("Server is ready")
            task_status.started(handle)
    finally:
        handle.finished.set()
    log.info("Server Exiting..")


def _log_links(config: Config) -> None:
    if config.cluster is not None:
        cluster = config.cluster
        log.info(
            "Listening for route connections on %s:%d (cluster %s)",
            cluster.host,
            cluster.port,
            cluster.name,
        )
        for seed in cluster.seeds:
            log.info("Route seed: %s", seed)
    if config.gateway is not None:
        gateway = config.gateway
        log.info(
            "Listening for gateway connections on %s:%d (gateway %s)",
            gateway.host,
            gateway.port,
            gateway.name,
        )
        for name, urls in gateway.gateways:
            log.info("Gateway %s: %s", name, ", ".join(urls))


async def _listen(
    host: str, port: int, advertise: str | None
) -> tuple[list[trio.SocketListener], int, str]:
    """Bind links' listeners: (listeners, the port bound, the URL to give peers)."""
    listeners = await _bind(host, port)
    port = listeners[0].socket.getsockname()[1]
    name = host if host not in ("0.0.0.0", "::", "") else socket.gethostname()
    return listeners, port, advertise or f"nats://{name}:{port}"


async def _bind(host: str, port: int) -> list[trio.SocketListener]:
    """Listen on ``host:port`` (``RANDOM_PORT`` or 0: a free port).

    Raises:
        StartupError: the port cannot be bound (in use, say).
    """
    try:
        return await trio.open_tcp_listeners(0 if port == RANDOM_PORT else port, host=host)
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise StartupError(f'Error listening on port: {host}:{port}, "bind: {reason}"') from exc
