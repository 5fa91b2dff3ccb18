"""Real pubmesh nodes for other projects' tests: one node, a cluster, or a super-cluster on free ports
of 127.0.0.1, started and stopped around a block (or by the pytest fixtures of ``.plugin``).

Nodes run in a background thread with a trio loop of their own, not in the test's loop and not in a
subprocess. So they serve asyncio clients (nats-py, redis-py's asyncio client), trio clients and
blocking clients alike, whatever loop the test runs, and start in milliseconds; and a test may look at
a node's state through ``RunningNode.call``, which runs a function in that loop. (A subprocess would
isolate a crash better, but starts far slower and shows nothing of its state.)

    with running_node() as node:
        nc = await nats.connect(node.client_url)
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

import attrs
import trio

from cluster.config import ClusterConfig, GatewayConfig
from node.config.options import Config, RedisConfig
from node.run.launch import NodeHandle, run_node

__all__ = [
    "RunningCluster",
    "RunningNode",
    "RunningSuperCluster",
    "running_cluster",
    "running_node",
    "running_supercluster",
]

T = TypeVar("T")

WAIT = 20.0
"""Seconds a node, or a cluster's links, may take to come up."""


class _Loop:
    """A trio loop in a daemon thread, whose nursery runs nodes until ``close``."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._failure: BaseException | None = None
        self._handles: list[NodeHandle] = []
        self._thread = threading.Thread(target=self._main, name="pubmesh-nodes", daemon=True)
        self._thread.start()
        if not self._ready.wait(WAIT) or self._token is None:
            raise RuntimeError(f"the nodes' trio loop did not start: {self._failure!r}")

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported by the next call from the test's thread
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            # A clean stop, as on SIGTERM: clients are told and flushed, ports released.
            with trio.move_on_after(WAIT):
                for handle in self._handles:
                    handle.shutdown()
                for handle in self._handles:
                    await handle.finished.wait()
            nursery.cancel_scope.cancel()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the loop (awaited if it is async) and return its result."""
        if self._failure is not None:
            raise RuntimeError("the nodes' trio loop has failed") from self._failure
        runner = trio.from_thread.run if inspect.iscoroutinefunction(fn) else trio.from_thread.run_sync
        return runner(fn, *args, trio_token=self._token)

    async def start(self, config: Config) -> NodeHandle:
        assert self._nursery is not None
        handle: NodeHandle = await self._nursery.start(run_node, config)
        self._handles.append(handle)
        return handle

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            stop = self._stop
            trio.from_thread.run_sync(stop.set, trio_token=self._token)
        self._thread.join(WAIT)


@attrs.frozen
class RunningNode:
    """A node serving on 127.0.0.1, as a test sees it."""

    name: str
    client_url: str
    """``nats://127.0.0.1:<port>`` for NATS clients."""
    redis_url: str | None
    """``redis://127.0.0.1:<port>`` for Redis clients (None when started without ``redis``)."""
    monitoring_url: str | None
    """``http://127.0.0.1:<port>`` (``/varz``, ``/connz``, ``/healthz``...), or None without it."""
    handle: NodeHandle = attrs.field(repr=False)
    """The node itself: touch it only through ``call``, from its own loop."""
    _loop: _Loop = attrs.field(repr=False)

    @property
    def port(self) -> int:
        return self.handle.port

    @overload
    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T: ...

    @overload
    def call(self, fn: Callable[..., T], *args: Any) -> T: ...

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the node's loop (awaited if async): the safe way to look at its
        state, e.g. ``node.call(lambda: len(node.handle.server.broker.clients))``."""
        return self._loop.call(fn, *args)


@attrs.frozen
class RunningCluster:
    """Nodes joined by routes, every route up."""

    name: str
    nodes: tuple[RunningNode, ...]

    @property
    def client_urls(self) -> list[str]:
        """One URL per node, to give a client that should fail over between them."""
        return [n.client_url for n in self.nodes]

    def __getitem__(self, index: int) -> RunningNode:
        return self.nodes[index]

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[RunningNode]:
        return iter(self.nodes)

    def wait_for_interest(self, subject: str, account: str = "$G") -> None:
        """Block until every node knows someone wants ``subject`` (interest crosses routes and
        gateways a moment after a SUBSCRIBE, as in nats-server)."""
        _wait_for_interest(self.nodes, subject, account)


@attrs.frozen
class RunningSuperCluster:
    """Clusters joined by gateways, every gateway up: ``east`` of two nodes, ``west`` of one."""

    clusters: dict[str, RunningCluster]

    @property
    def nodes(self) -> tuple[RunningNode, ...]:
        return tuple(n for c in self.clusters.values() for n in c.nodes)

    def __getitem__(self, name: str) -> RunningCluster:
        return self.clusters[name]

    def wait_for_interest(self, subject: str, account: str = "$G") -> None:
        """Block until every node of every cluster knows someone wants ``subject``."""
        _wait_for_interest(self.nodes, subject, account)


@attrs.frozen
class _Ports:
    """Which listeners besides the client port a node opens."""

    redis: bool = True
    monitoring: bool = True


def _local(config: Config, name: str, ports: _Ports) -> Config:
    """``config`` on free ports of 127.0.0.1 (links too), named ``name`` unless it names itself."""
    changes: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 0,
        "http_host": "127.0.0.1",
        "server_name": config.server_name or name,
    }
    if ports.monitoring and config.https_port is None:
        changes["http_port"] = 0
    if ports.redis:
        changes["redis"] = (config.redis or RedisConfig()).evolve(host="127.0.0.1", port=0)
    return config.evolve(**changes)


def _running(loop: _Loop, handle: NodeHandle) -> RunningNode:
    http = handle.http_port
    scheme = "https" if handle.node.config.https_port is not None else "http"
    return RunningNode(
        name=handle.node.broker.server_name,
        client_url=handle.url,
        redis_url=f"redis://127.0.0.1:{handle.redis_port}" if handle.redis_port else None,
        monitoring_url=f"{scheme}://127.0.0.1:{http}" if http else None,
        handle=handle,
        loop=loop,
    )


def _until(loop: _Loop, predicate: Callable[[], bool], what: str) -> None:
    async def wait() -> None:
        with trio.move_on_after(WAIT):
            while not predicate():  # noqa: ASYNC110 (link state announces nothing)
                await trio.sleep(0.01)
            return
        raise TimeoutError(f"{what} within {WAIT} s")

    loop.call(wait)


def _wait_for_interest(nodes: tuple[RunningNode, ...], subject: str, account: str) -> None:
    if not nodes:
        return

    def known() -> bool:
        for node in nodes:
            broker = node.handle.node.broker
            local = broker.account(account).match(subject.encode())[0]
            if local.plain or local.queues:
                continue
            remote = [broker.route_interest, broker.gateway_interest]
            if not any(r.match_remote(account, subject).links for r in remote) and not any(
                r.match_remote(account, subject).queues for r in remote
            ):
                return False
        return True

    _until(nodes[0]._loop, known, f"interest in {subject!r} did not reach every node")


@contextmanager
def _loop() -> Iterator[_Loop]:
    loop = _Loop()
    try:
        yield loop
    finally:
        loop.close()


@contextmanager
def running_node(
    config: Config | None = None, *, redis: bool = True, monitoring: bool = True
) -> Iterator[RunningNode]:
    """One node on free ports of 127.0.0.1 (client, Redis and monitoring), whatever else ``config``
    says, for the duration of the block."""
    with _loop() as loop:
        handle = loop.call(
            loop.start, _local(config or Config(), "pubmesh-1", _Ports(redis, monitoring))
        )
        yield _running(loop, handle)


async def _start_cluster(
    loop: _Loop,
    base: Config,
    name: str,
    names: list[str],
    gateway: GatewayConfig | None,
    ports: _Ports,
) -> list[NodeHandle]:
    routes = ClusterConfig(name=name, host="127.0.0.1", port=0)
    handles: list[NodeHandle] = []
    for server_name in names:
        seeds = (f"nats://127.0.0.1:{handles[0].cluster_port}",) if handles else ()
        config = _local(base, server_name, ports).evolve(
            server_name=server_name, cluster=routes.evolve(seeds=seeds), gateway=gateway
        )
        handles.append(await loop.start(config))
    return handles


def _meshed(handles: list[NodeHandle]) -> Callable[[], bool]:
    def check() -> bool:
        for handle in handles:
            routes = handle.routes
            if routes is None:
                return False
            if sum(1 for p in routes.peers.values() if p.slots) < len(handles) - 1:
                return False
        return True

    return check


@contextmanager
def running_cluster(
    size: int = 3,
    config: Config | None = None,
    *,
    name: str = "pubmesh",
    redis: bool = True,
    monitoring: bool = True,
) -> Iterator[RunningCluster]:
    """``size`` nodes joined by routes into cluster ``name``, once every route is up."""
    names = [f"{name}-{i}" for i in range(1, size + 1)]
    with _loop() as loop:
        handles = loop.call(
            _start_cluster,
            loop,
            config or Config(),
            name,
            names,
            None,
            _Ports(redis, monitoring),
        )
        _until(loop, _meshed(handles), f"cluster {name!r} did not mesh")
        yield RunningCluster(name, tuple(_running(loop, h) for h in handles))


@contextmanager
def running_supercluster(
    config: Config | None = None, *, redis: bool = True, monitoring: bool = True
) -> Iterator[RunningSuperCluster]:
    """Cluster ``east`` (two nodes) and cluster ``west`` (one) joined by gateways, once every
    gateway link is up."""
    base = config or Config()
    with _loop() as loop:
        east_gw = GatewayConfig(name="east", host="127.0.0.1", port=0)
        east = loop.call(
            _start_cluster,
            loop,
            base,
            "east",
            ["east-1", "east-2"],
            east_gw,
            _Ports(redis, monitoring),
        )
        west_gw = GatewayConfig(
            name="west",
            host="127.0.0.1",
            port=0,
            gateways=(("east", (f"nats://127.0.0.1:{east[0].gateway_port}",)),),
        )
        west = loop.call(
            _start_cluster, loop, base, "west", ["west-1"], west_gw, _Ports(redis, monitoring)
        )
        everyone = [*east, *west]

        def linked() -> bool:
            for handle in everyone:
                gateways = handle.gateways
                other = "west" if handle in east else "east"
                remote = gateways.remotes.get(other) if gateways is not None else None
                if remote is None or remote.outbound is None:
                    return False
            return _meshed(east)()

        _until(loop, linked, "the gateways did not come up")
        yield RunningSuperCluster(
            {
                "east": RunningCluster("east", tuple(_running(loop, h) for h in east)),
                "west": RunningCluster("west", tuple(_running(loop, h) for h in west)),
            }
        )
