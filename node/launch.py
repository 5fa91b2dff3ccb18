"""Starting a whole node: client listeners, the monitoring server, and a clean stop.

``run_node`` is what the command line runs and what end-to-end tests start: it binds the configured
ports (port 0 picks a free one), reports what it bound through ``task_status``, and returns after
``shutdown()`` once every connection has been closed and flushed.
"""

from __future__ import annotations

import logging
import socket
from functools import partial

import attrs
import trio

from cluster.config import ClusterConfig, GatewayConfig
from cluster.gateways import GatewayManager
from cluster.routes import RouteManager
from node.config import Config
from node.server import Server

__all__ = ["NodeHandle", "run_node"]

log = logging.getLogger("pubmesh")


@attrs.define
class NodeHandle:
    """A running node, as its starter sees it."""

    server: Server
    host: str
    port: int
    http_port: int | None = None
    cluster_port: int | None = None
    routes: RouteManager | None = None
    gateway_port: int | None = None
    gateways: GatewayManager | None = None
    finished: trio.Event = attrs.field(factory=trio.Event)
    """Set once the node has stopped: ports released, connections closed."""
    _stopped: trio.Event = attrs.field(factory=trio.Event)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def shutdown(self) -> None:
        """Ask the node to stop; ``run_node`` returns once it has."""
        self.server.shutdown()
        self._stopped.set()


async def run_node(
    config: Config, *, task_status: trio.TaskStatus[NodeHandle] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run a node until its handle's ``shutdown`` is called (or this task is cancelled)."""
    server = Server(config)
    listeners = await trio.open_tcp_listeners(config.port, host=config.host)
    port = listeners[0].socket.getsockname()[1]
    server.broker.port = port
    handle = NodeHandle(server, config.host, port)
    try:
        await _serve(server, config, listeners, handle, task_status)
    finally:
        handle.finished.set()
    log.info("Server Exiting..")


async def _serve(
    server: Server,
    config: Config,
    listeners: list[trio.SocketListener],
    handle: NodeHandle,
    task_status: trio.TaskStatus[NodeHandle],
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, listeners)
        # Links run until cancelled; clients and monitoring stop when asked (below, and through
        # the same event), flushing what they hold.
        links: trio.Nursery = await nursery.start(_open_links)
        if config.cluster is not None:
            handle.routes, handle.cluster_port = await _start_routes(links, server, config.cluster)
        if config.gateway is not None:
            handle.gateways, handle.gateway_port = await _start_gateways(
                links, server, config.gateway, handle.routes
            )
        if config.http_port is not None:
            from node.monitor import serve_monitoring  # hypercorn loads only when monitoring is on

            handle.http_port = await nursery.start(
                partial(
                    serve_monitoring,
                    server.broker,
                    config.http_host,
                    config.http_port,
                    shutdown=handle._stopped,
                )
            )
            log.info("Starting http monitor on %s:%d", config.http_host, handle.http_port)
        log.info("Listening for client connections on %s:%d", handle.host, handle.port)
        log.info("Server is ready")
        task_status.started(handle)
        await handle._stopped.wait()
        links.cancel_scope.cancel()


async def _listen(
    host: str, port: int, advertise: str | None
) -> tuple[list[trio.SocketListener], int, str]:
    """Bind links' listeners: (listeners, the port bound, the URL to give peers)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    port = listeners[0].socket.getsockname()[1]
    name = host if host not in ("0.0.0.0", "::", "") else socket.gethostname()
    return listeners, port, advertise or f"nats://{name}:{port}"


async def _start_routes(
    nursery: trio.Nursery, server: Server, cluster: ClusterConfig
) -> tuple[RouteManager, int]:
    listeners, port, url = await _listen(cluster.host, cluster.port, cluster.advertise)
    cluster = attrs.evolve(cluster, port=port, advertise=url)
    manager = RouteManager(server.broker, cluster, server.flusher)
    server.broker.routes = manager
    await nursery.start(manager.run, listeners)
    log.info("Listening for route connections on %s:%d (cluster %s)", cluster.host, port, cluster.name)
    for seed in cluster.seeds:
        log.info("Route seed: %s", seed)
    return manager, port


async def _start_gateways(
    nursery: trio.Nursery,
    server: Server,
    gateway: GatewayConfig,
    routes: RouteManager | None,
) -> tuple[GatewayManager, int]:
    listeners, port, url = await _listen(gateway.host, gateway.port, gateway.advertise)
    gateway = gateway.evolve(port=port, advertise=url)
    manager = GatewayManager(server.broker, gateway, server.flusher, routes=routes)
    server.broker.gateways = manager
    await nursery.start(manager.run, listeners)
    log.info("Listening for gateway connections on %s:%d (gateway %s)", gateway.host, port, gateway.name)
    for name, urls in gateway.gateways:
        log.info("Gateway %s: %s", name, ", ".join(urls))
    return manager, port


async def _open_links(*, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED) -> None:
    """A nursery for the node's links, which stop (by cancellation) apart from the clients."""
    async with trio.open_nursery() as links:
        task_status.started(links)
        await trio.sleep_forever()
