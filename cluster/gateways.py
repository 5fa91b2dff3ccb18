"""Gateways: links between clusters, over which a message travels only if the far side wants it.

**Direction.** Every node dials one node of every other cluster (its *outbound* link to that
cluster) and accepts links dialed by other clusters' nodes (*inbound*). Messages flow only along
outbound links; interest flows only back along them, from the node that accepted. A frame the wrong
way is a protocol error.

**Interest.** Over each inbound link a node announces its whole cluster's interest: its own
subscriptions and those its routes report, counted per (account, subject, queue), announced when a
count goes 0 -> 1 and withdrawn when it goes 1 -> 0. So a remote cluster hears of a subject once,
however many subscribers it has here, and a queue group only as present (weight 1): across gateways
a cluster either serves a group or not. Interest-only from the first message: with no announcement,
nothing is sent. When an outbound link drops, everything learned over it is forgotten at once.

**Discovery.** Configured URLs get a node started; each HELLO carries the sender's cluster's gateway
URLs (its own and those its route peers told it) and the clusters it knows. A node that is dialed by
a cluster it has not heard of dials back (an implicit gateway), and what a node learns of other
clusters (new ones, and new URLs of known ones) it passes to its route peers, so every node of a
cluster ends up with a link to every cluster and knows every URL any of them heard. News is taken
only from peers that proved they know the secret, and only so many clusters are kept; a cluster
only heard of is dialed with growing pauses and forgotten after a few failures (a configured one,
or one ever reached, is redialed for good).

**Replies** leaving through a gateway are mapped (see ``cluster.replies``) so the first reply to a
request cannot be lost to interest still on its way.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from functools import partial
from typing import Any

import trio

from cluster.config import GatewayConfig
from cluster.connections import Dial, LinkManager
from cluster.frames import (
    MAX_CLUSTERS,
    Frame,
    GatewayHello,
    LinkError,
    Snapshot,
    SubAdd,
    SubRemove,
    encode,
)
from cluster.host import AccountT, NodeHost
from cluster.link import Link
from cluster.peer import Gateway, gateway_of
from cluster.replies import ReplyRouter, short_hash
from cluster.routes import MAX_DIAL_FAILURES, UNMET_BACKOFF_MAX, RouteManager
from routing import InterestChange, InterestTracker, InvalidSubjectError, Origin
from transport.sessions import Flusher

__all__ = ["GatewayManager"]

log = logging.getLogger("pubmesh")


class GatewayManager(LinkManager[AccountT]):
    """A node's gateways: its outbound link to each other cluster, the inbound links from them,
    and the cluster-wide interest it announces.

    Args:
        host: the node.
        config: the gateway settings.
        flusher: the node's flusher.
        routes: the node's routes, if its cluster has more than this node: their interest counts
            as the cluster's, and news of other clusters travels over them.
        dial: opens a stream to (host, port); the in-process harness passes one over memory.
        rng: the source of backoff jitter and of which remote node to dial.
    """

    kind = "Gateway"

    def __init__(
        self,
        host: NodeHost[AccountT],
        config: GatewayConfig,
        flusher: Flusher,
        *,
        routes: RouteManager[AccountT] | None = None,
        dial: Dial = trio.open_tcp_stream,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(host, config, flusher, dial=dial, rng=rng)
        self.config = config
        self.name = config.name
        self._url = config.advertise or f"nats://{config.host}:{config.port}"
        self.routes = routes
        self.remotes: dict[str, Gateway[AccountT]] = {}
        """Other clusters by name, configured or learned."""
        self.interest = InterestTracker(queue_weights=False)
        """The whole cluster's interest, as announced to other clusters."""
        self._local_groups: set[tuple[str, str, str]] = set()
        self.replies = ReplyRouter(
            config.name,
            host.server_id,
            routes.peers if routes is not None else {},
            config.reply_ttl,
            trio.current_time,
        )
        host.map_replies(self.replies)
        for change in host.local_interest():
            self._on_local(change)
        host.interest_listeners.append(self._on_local)
        if routes is not None:
            for entry in host.route_interest.entries():
                self._count(InterestChange(entry.account, entry.subject, entry.queue, 1), 1)
            routes.interest_listeners.append(self._on_route)
            routes.gateways = self
        for name, urls in config.gateways:
            self._remote(name, urls).configured = True

    @property
    def url(self) -> str:
        """This node's gateway URL, as other clusters should dial it."""
        return self._url

    def cluster_urls(self) -> list[str]:
        """Gateway URLs of this cluster's nodes that are up: this one and its connected peers."""
        urls = [self._url]
        if self.routes is not None:
            urls += [p.gateway_url for p in self.routes.peers.values() if p.slots and p.gateway_url]
        return urls

    # -- running -----------------------------------------------------------------------------

    async def run(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept gateway links on ``listeners`` and keep one outbound link to every cluster known."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(
                partial(trio.serve_listeners, self._accept, list(listeners), handler_nursery=nursery)
            )
            for gateway in self.remotes.values():
                nursery.start_soon(self._keep_outbound, gateway)
            nursery.start_soon(self._tick)
            task_status.started()

    async def _accept(self, stream: trio.abc.Stream) -> None:
        await self._serve(stream, solicited=False, origin=Origin.GATEWAY)

    async def _keep_outbound(self, gateway: Gateway[AccountT]) -> None:
        """Keep a link to some node of ``gateway``'s cluster, redialing with backoff (or, for one
        only heard of, until it has failed too often)."""
        delay, failures = 0.0, 0

        def expect(link: Link[AccountT]) -> None:
            link.peer = gateway

        while True:
            unmet = not (gateway.configured or gateway.connections or gateway.inbound)
            wait, delay = self._backoff(delay, UNMET_BACKOFF_MAX if unmet else None)
            await trio.sleep(wait)
            unmet = not (gateway.configured or gateway.connections or gateway.inbound)
            if unmet and failures >= MAX_DIAL_FAILURES:
                self._forget(gateway)
                return
            failures += 1
            if not gateway.urls:
                continue
            stream = await self._connect(self._rng.choice(gateway.urls))
            if stream is None:
                continue
            made = gateway.connections
            await self._serve(stream, solicited=True, takes_messages=False, setup=expect)
            if gateway.connections != made:
                delay = 0.0  # it was up: try again at once, then back off

    async def _tick(self) -> None:
        """Forget expired reply mappings; keep the queue preference in round-trip order."""
        while True:
            await trio.sleep(self.config.ping_interval)
            self.replies.purge()
            self._reorder()

    def _reorder(self) -> None:
        up = [gateway for gateway in self.remotes.values() if gateway.outbound is not None]
        order: list[Gateway[AccountT]] = sorted(up, key=lambda gateway: gateway.rtt)
        self.host.set_gateway_order(order)

    # -- handshake ---------------------------------------------------------------------------

    def _hello(self, link: Link[AccountT]) -> GatewayHello:
        return GatewayHello(
            id=self.server_id,
            name=self.host.server_name,
            gateway=self.name,
            url=self._url,
            urls=tuple(self.cluster_urls()[:MAX_CLUSTERS]),
            gateways=self.known(),
        )

    def _handshake(self, link: Link[AccountT], info: Any) -> None:
        if not isinstance(info, GatewayHello):
            raise LinkError("a route's HELLO on a gateway")
        server_id, name, urls = info.id, info.gateway, info.urls
        link.remote = info
        if name == self.name:
            self._refuse(link, f'gateway "{name}" is this cluster')
            return
        if link.solicited and name != gateway_of(link).name:
            self._refuse(link, f'expected gateway "{gateway_of(link).name}", reached "{name[:64]}"')
            return
        if not link.solicited:
            link.connection = server_id
        if not self._has_room(name):
            self._refuse(link, "too many clusters known")
            return
        gateway = self._remote(name, urls, reported=True)
        if link.solicited:
            self._register_outbound(gateway, link)
        else:
            self._register_inbound(gateway, server_id, link)
        self.learn(info.gateways)

    def _register_outbound(self, gateway: Gateway[AccountT], link: Link[AccountT]) -> None:
        if gateway.outbound is not None:  # (cannot happen: one dialing task per cluster)
            raise LinkError("a second outbound link")
        gateway.outbound = link
        gateway.connections += 1
        link.registered = True
        self._reorder()
        link.log(logging.INFO, f"Outbound gateway connection to {gateway.name!r} registered")

    def _register_inbound(
        self, gateway: Gateway[AccountT], server_id: str, link: Link[AccountT]
    ) -> None:
        old = gateway.inbound.get(server_id)
        if old is not None:
            old.registered = False
            old.close("Replaced by a newer gateway link")
        gateway.inbound[server_id] = link
        link.peer, link.registered = gateway, True
        self._send_snapshot(link, self.interest.snapshot())
        link.log(logging.INFO, f"Inbound gateway connection from {gateway.name!r} registered")

    def _dropped(self, link: Link[AccountT]) -> None:
        if not link.registered:
            return
        link.registered = False
        gateway = gateway_of(link)
        if link.solicited:
            gateway.outbound = None
            self.host.gateway_interest.remove_remote_subs(gateway)
            self._reorder()
        elif gateway.inbound.get(link.connection) is link:
            del gateway.inbound[link.connection]
        way = "Outbound" if link.solicited else "Inbound"
        link.log(logging.INFO, f"{way} gateway connection closed: {link.closing}")

    # -- other clusters ----------------------------------------------------------------------

    def known(self) -> dict[str, tuple[str, ...]]:
        """Gateway URLs of every other cluster known, by cluster name."""
        return {name: tuple(gateway.urls) for name, gateway in self.remotes.items()}

    def learn(self, known: dict[str, tuple[str, ...]]) -> None:
        """News of clusters from a route peer or a remote HELLO: dial any that are new."""
        for name, urls in known.items():
            if name and name != self.name and self._has_room(name):
                self._remote(name, urls)

    def _has_room(self, name: str) -> bool:
        """Whether cluster ``name`` is known, or may be (at most ``MAX_CLUSTERS`` are)."""
        return name in self.remotes or len(self.remotes) < MAX_CLUSTERS

    def _remote(self, name: str, urls: Sequence[str], *, reported: bool = False) -> Gateway[AccountT]:
        """The cluster called ``name``, created on first mention (then dialed, and its news passed
        to route peers); ``urls`` are added to what is known of it, up to ``MAX_CLUSTERS`` of them
        beside the configured ones. What one of its own nodes ``reported`` goes first, so fresh
        news outlives stale (a node's HELLO lists only the peers it had routes to when it sent it,
        so it adds to what is known and never replaces it)."""
        gateway = self.remotes.get(name)
        if gateway is None:
            gateway = Gateway(name, self.replies.prefix)
            self.remotes[name] = gateway
            self.replies.gateways[short_hash(name)] = gateway
            if self._nursery is not None:
                self._nursery.start_soon(self._keep_outbound, gateway)
        known = set(gateway.urls)
        configured = dict(self.config.gateways).get(name, ())
        order = [*configured, *urls, *gateway.urls] if reported else [*gateway.urls, *urls]
        gateway.urls = list(dict.fromkeys(order))[: max(MAX_CLUSTERS, len(configured))]
        news = tuple(url for url in gateway.urls if url not in known)
        if self.routes is not None and news:  # (a gateway links to one node of a cluster: its
            self.routes.tell_gateways({name: news})  # route peers may have heard of others)
        return gateway

    def _forget(self, gateway: Gateway[AccountT]) -> None:
        """A cluster only heard of was never reached: stop dialing it."""
        if self.remotes.get(gateway.name) is gateway:
            del self.remotes[gateway.name]
            self.replies.gateways.pop(short_hash(gateway.name), None)
            log.info("Forgetting gateway %r: never reached", gateway.name)

    # -- interest ----------------------------------------------------------------------------

    def _control(self, link: Link[AccountT], frame: Frame) -> None:
        kind = type(frame)
        if kind is SubAdd or kind is SubRemove or kind is Snapshot:
            if not link.solicited:
                raise LinkError("interest on an inbound gateway link")
            if link.registered:
                self._interest(link, frame)  # type: ignore[arg-type]
        else:
            raise LinkError(f"unexpected {kind.__name__} frame on a gateway")

    def _interest(self, link: Link[AccountT], frame: SubAdd | SubRemove | Snapshot) -> None:
        table, gateway, account = self.host.gateway_interest, gateway_of(link), frame.account
        if not self.admits(account):
            return
        link.accounts.add(account)
        try:
            if isinstance(frame, SubAdd):
                table.apply_remote_sub(gateway, account, frame.subject, frame.queue, 1)
            elif isinstance(frame, SubRemove):
                table.apply_remote_sub(gateway, account, frame.subject, frame.queue, remove=True)
            else:
                for subject, queue, _ in frame.entries:
                    table.apply_remote_sub(gateway, account, subject, queue, 1)
        except InvalidSubjectError as exc:
            link.log(logging.WARNING, f"Ignoring invalid remote interest: {exc}")

    def _on_local(self, change: InterestChange) -> None:
        """This node's interest changed: plain interest comes and goes; a queue group counts once
        however many members it has here."""
        if change.queue is None:
            self._count(change, 1 if change.weight else -1)
            return
        key = (change.account, change.subject, change.queue)
        if change.weight and key not in self._local_groups:
            self._local_groups.add(key)
            self._count(change, 1)
        elif not change.weight and key in self._local_groups:
            self._local_groups.discard(key)
            self._count(change, -1)

    def _on_route(self, change: InterestChange) -> None:
        """A route peer's piece of interest appeared (weight 1) or went (weight 0)."""
        self._count(change, 1 if change.weight else -1)

    def _count(self, change: InterestChange, delta: int) -> None:
        announced = self.interest.update(change.account, change.subject, change.queue, delta)
        if announced is None:
            return
        if announced.withdrawn:
            frame = encode(SubRemove(announced.account, announced.subject, announced.queue))
        else:
            frame = encode(SubAdd(announced.account, announced.subject, announced.queue, 1))
        for gateway in self.remotes.values():
            for link in gateway.inbound.values():
                link.send_bytes(frame)
