"""Routes: the full mesh of links between the nodes of one cluster.

**Who dials.** A node given one seed learns the rest of the cluster by gossip: every HELLO lists the
peers its sender knows, and a newly joined peer is announced to all the others. Only a peer that
proved it knows the cluster's secret is listened to, only so many peers are taken from one frame
and kept unmet at once, and a peer known only from gossip is dialed with growing pauses and
forgotten after a few failures (a seed, or a peer once met, is redialed for good). Of two nodes, the
one with the lower server id owns the pair's connections: it dials every pooled connection and
redials any that drops. The other side dials only to introduce itself (a seed), so there is never
a contest of redials; and should both dial the same slot at once, the one dialed by the lower id
stays on both sides, since both apply the same rule.

**Pooling.** Each peer is reached over ``pool_size`` connections ("slots"), plus one per pinned
account. An account's interest and messages always travel on the same slot (a stable hash of its
name), which keeps them in order. A slot that is not up carries nothing: when it comes up, each
side sends the other a snapshot of its interest for that slot's accounts, so nothing announced
meanwhile is missed, and whatever the previous connection had carried is forgotten first.

**Client URLs.** Each HELLO carries where its sender takes clients, and a CLIENTS frame tells
every peer when that changes (a node in lame duck mode takes no more): the node hears of every
change among connected peers through ``on_client_urls``, and advertises the lot to its clients.

Each HELLO also carries where its sender takes Redis clients (``redis_url``): ``redis_peers``
lists them, for CLUSTER SLOTS and the like (``node.replicated``).

**Failure.** Any frame counts as a sign of life; heartbeats keep an idle link talking, and a link
silent for ``ping_max`` intervals is declared dead, because a partition leaves TCP connections open.
When a connection drops, the interest that arrived over it (its accounts' slices of the peer's
interest) is dropped at once, and its owner redials with exponential backoff and jitter.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import attrs
import trio

from cluster.config import ClusterConfig, parse_url
from cluster.connections import Dial, LinkManager
from cluster.frames import (
    MAX_PEERS,
    ClientUrls,
    Frame,
    Gateways,
    Gossip,
    KeysReply,
    KeysRequest,
    LinkError,
    PeerInfo,
    RaftFrame,
    RouteHello,
    Snapshot,
    SubAdd,
    SubRemove,
    encode,
)
from cluster.host import AccountT, NodeHost
from cluster.link import Link
from cluster.peer import Peer, Slot, peer_of
from routing import InterestChange, InvalidSubjectError
from transport.sessions import Flusher

__all__ = ["GatewayDirectory", "RedisPeer", "RouteManager"]

log = logging.getLogger("pubmesh")

MAX_UNMET_PEERS = MAX_PEERS
"""Peers heard of but never connected that a node keeps (and dials) at once; others are ignored."""
MAX_DIAL_FAILURES = 12
"""Failed dials after which a peer known only from gossip is forgotten."""
UNMET_BACKOFF_MAX = 30.0
"""The longest pause between dials of a peer known only from gossip."""


@attrs.frozen
class RedisPeer:
    """A route peer as CLUSTER SLOTS and the like describe it."""

    name: str
    redis_url: str
    """``host:port`` where it takes Redis clients ("" if it does not, or has not said)."""
    route_url: str
    connected: bool


class GatewayDirectory(Protocol):
    """What routes carry for a node's gateways: its gateway URL, and the other clusters known."""

    @property
    def url(self) -> str: ...

    def known(self) -> dict[str, tuple[str, ...]]:
        """Gateway URLs of the other clusters, by cluster name."""
        ...

    def learn(self, known: dict[str, tuple[str, ...]]) -> None:
        """A peer told of clusters (maybe some this node has not heard of)."""
        ...


def _nothing() -> None:
    pass


class RouteManager(LinkManager[AccountT]):
    """A node's routes: accepting, dialing, registering and dropping links, and what flows over them.

    Args:
        host: the node.
        config: the cluster settings.
        flusher: the node's flusher (route input is delivered to client connections and back).
        dial: opens a stream to (host, port); the in-process harness passes one over memory.
        rng: the source of backoff jitter.
    """

    kind = "Route"

    def __init__(
        self,
        host: NodeHost[AccountT],
        config: ClusterConfig,
        flusher: Flusher,
        *,
        dial: Dial = trio.open_tcp_stream,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(host, config, flusher, dial=dial, rng=rng)
        self.config = config
        self.url = config.advertise or f"nats://{config.host}:{config.port}"
        self.peers: dict[str, Peer[AccountT]] = {}
        self._dialing: set[tuple[str, Slot]] = set()
        self._seeds: dict[str, trio.CancelScope] = {}
        """The seeds being introduced to, each with what stops that."""
        self.seed_ids: dict[str, str] = {}
        """The server id that last answered at each seed URL (this node's own, for a seed that is
        this node: one configuration can then list every node of the cluster)."""
        self.gateways: GatewayDirectory | None = None
        """The node's gateways, if it has any: routes tell peers about them."""
        self.interest_listeners: list[Callable[[InterestChange], None]] = []
        """Called as any peer's piece of interest appears (weight 1) or goes (weight 0); the
        gateways count these with local interest into the cluster's own."""
        host.interest_listeners.append(self._on_interest)
        self.client_urls: tuple[str, ...] = ()
        """Where this node takes clients, as its HELLO tells peers (see ``advertise_clients``)."""
        self._peer_client_urls: dict[str, tuple[str, ...]] = {}
        """Where each connected peer takes clients, by server id."""
        self.redis_url = ""
        """Where this node takes Redis clients (``host:port``), as its HELLO tells peers."""
        self.on_client_urls: Callable[[], None] = _nothing
        """Called when a connected peer's client URLs come, change or go."""
        self.on_raft: Callable[[str, RaftFrame], None] | None = None
        self.on_keys: Callable[[str, KeysRequest | KeysReply], None] | None = None
        """Takes forwarded Redis commands and their replies (``node.replicated.path``)."""
        """Takes each RAFT frame with the sending peer's server name (``cluster.replication``);
        None: the frames are dropped. It may raise ``LinkError`` to close the link."""

    # -- running -----------------------------------------------------------------------------

    async def run(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept routes on ``listeners`` and dial the seeds, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(
                partial(trio.serve_listeners, self._accept, list(listeners), handler_nursery=nursery)
            )
            for seed in self.config.seeds:
                self._start_seed(seed)
            task_status.started()

    def set_seeds(self, seeds: Sequence[str]) -> None:
        """Take a new list of seeds (a configuration reload): introduce this node to the new ones,
        and for those gone, stop and close the connections to the node at that address, as
        nats-server closes a route removed from its configuration. (A peer still configured with
        this node as its own seed, or met through gossip, may connect again.)"""
        self.config = self.config.evolve(seeds=tuple(seeds))
        for url in [u for u in self._seeds if u not in seeds]:
            self._seeds.pop(url).cancel()
            self.seed_ids.pop(url, None)
            address = parse_url(url)
            for peer in list(self.peers.values()):
                if _address(peer.url) == address:
                    del self.peers[peer.server_id]
                    for link in list(peer.slots.values()):
                        link.close("Route Removed")
            log.info("Removed route %s", url)
        for url in seeds:
            if url not in self._seeds:
                self._start_seed(url)

    def _start_seed(self, url: str) -> None:
        assert self._nursery is not None
        scope = self._seeds[url] = trio.CancelScope()

        async def introduce() -> None:
            with scope:
                await self._seed(url)

        self._nursery.start_soon(introduce)

    async def _accept(self, stream: trio.abc.Stream) -> None:
        await self._serve(stream, solicited=False)

    async def _dial_link(self, stream: trio.abc.Stream, slot: Slot) -> Link[AccountT]:
        def mark(link: Link[AccountT]) -> None:
            link.slot = slot

        return await self._serve(stream, solicited=True, setup=mark)

    # -- frames ------------------------------------------------------------------------------

    def _control(self, link: Link[AccountT], frame: Frame) -> None:
        kind = type(frame)
        if not link.registered:  # (a duplicate, or one being replaced: its peer speaks elsewhere)
            return
        if kind is SubAdd or kind is SubRemove or kind is Snapshot:
            self._interest(link, frame)  # type: ignore[arg-type]
        elif kind is Gossip:
            for info in frame.peers:  # type: ignore[union-attr]
                self._learn(info)
        elif kind is Gateways:
            if self.gateways is not None:
                self.gateways.learn(frame.known)  # type: ignore[union-attr]
        elif kind is ClientUrls:
            self._peer_clients(peer_of(link), frame.urls)  # type: ignore[union-attr]
        elif kind is RaftFrame:
            if self.on_raft is not None:
                self.on_raft(peer_of(link).name, frame)  # type: ignore[arg-type]
        elif kind is KeysRequest or kind is KeysReply:
            if self.on_keys is not None:
                self.on_keys(peer_of(link).name, frame)  # type: ignore[arg-type]
        else:
            raise LinkError(f"unexpected {kind.__name__} frame on a route")

    def _interest(self, link: Link[AccountT], frame: SubAdd | SubRemove | Snapshot) -> None:
        peer, account = peer_of(link), frame.account
        if not self.admits(account):
            return
        link.accounts.add(account)
        try:
            if isinstance(frame, SubAdd):
                self._add(peer, account, frame.subject, frame.queue, frame.weight)
            elif isinstance(frame, SubRemove):
                table = self.host.route_interest
                if table.apply_remote_sub(peer, account, frame.subject, frame.queue, remove=True):
                    self._tell(InterestChange(account, frame.subject, frame.queue, 0))
            else:
                for subject, queue, weight in frame.entries:
                    self._add(peer, account, subject, queue, weight)
        except InvalidSubjectError as exc:
            link.log(logging.WARNING, f"Ignoring invalid remote interest: {exc}")

    def _add(
        self, peer: Peer[AccountT], account: str, subject: str, queue: str | None, weight: int
    ) -> None:
        table = self.host.route_interest
        new = not table.weight(peer, account, subject, queue)
        table.apply_remote_sub(peer, account, subject, queue, weight)
        if new and self.interest_listeners:
            self._tell(InterestChange(account, subject, queue, 1))

    def _forget(self, peer: Peer[AccountT], account: str) -> None:
        """Drop one account's slice of a peer's interest, telling listeners what went."""
        table = self.host.route_interest
        gone = list(table.entries(peer, account)) if self.interest_listeners else []
        table.remove_remote_subs_for_account(peer, account)
        for entry in gone:
            self._tell(InterestChange(account, entry.subject, entry.queue, 0))

    def _tell(self, change: InterestChange) -> None:
        for listener in self.interest_listeners:
            listener(change)

    # -- handshake and registration ----------------------------------------------------------

    def _hello(self, link: Link[AccountT]) -> RouteHello:
        return RouteHello(
            id=self.server_id,
            name=self.host.server_name,
            cluster=self.config.name,
            url=self.url,
            pool_size=self.config.pool_size,
            pinned=self.config.pinned_accounts,
            peers=tuple(self._known_peers()),
            gateway_url=self.gateways.url if self.gateways is not None else "",
            slot=link.slot,
            connection=link.connection if link.slot is not None else "",
            client_urls=self.client_urls,
            redis_url=self.redis_url,
        )

    def _known_peers(self) -> list[PeerInfo]:
        """Peers worth telling others about: connected ones (a dead one would only haunt them)."""
        return [PeerInfo(p.server_id, p.name, p.url) for p in self.peers.values() if p.slots][:MAX_PEERS]

    def _handshake(self, link: Link[AccountT], info: Any) -> None:
        config = self.config
        if not isinstance(info, RouteHello):
            raise LinkError("a gateway's HELLO on a route")
        if info.cluster != config.name:
            theirs = info.cluster[:64]
            self._refuse(link, f'cluster name mismatch: this is "{config.name}", the peer "{theirs}"')
            return
        link.remote = info
        if not link.solicited:
            link.connection = info.connection
        if info.id == self.server_id:
            link.close("Route to self")  # (gossip can list this node's own URL)
            return
        pool = max(info.pool_size, config.pool_size)
        slot = link.slot if link.solicited else info.slot
        if slot is None or (isinstance(slot, int) and slot >= pool):
            raise LinkError(f"bad slot {slot!r}")
        peer = self._peer(info.id, info.name, info.url, pool, frozenset(config.pinned_accounts))
        peer.gateway_url = info.gateway_url
        peer.redis_url = info.redis_url
        current = peer.slots.get(slot)
        if current is not None and self._keeps(current, link, info.id):
            self._refuse(link, "duplicate route")
            return
        if current is not None:
            current.registered = False  # replaced: its interest is reset below, not dropped
            current.close("Replaced by a newer route")
        self._register(peer, slot, link, current)
        self._peer_clients(peer, info.client_urls)
        for known in info.peers:
            self._learn(known)

    def _keeps(self, current: Link[AccountT], new: Link[AccountT], peer_id: str) -> bool:
        """Whether ``current`` stays in its slot when ``new`` arrives for it: the connection dialed
        by the lower server id wins; between two dialed by the same node, the newer one."""
        lower = min(self.server_id, peer_id)

        def dialer(link: Link[AccountT]) -> str:
            return self.server_id if link.solicited else peer_id

        if (dialer(current) == lower) != (dialer(new) == lower):
            return dialer(current) == lower
        return False

    def _peer(
        self, peer_id: str, name: str, url: str, pool: int, pinned: frozenset[str]
    ) -> Peer[AccountT]:
        peer = self.peers.get(peer_id)
        if peer is None:
            # A node that restarted comes back with a new id at an old URL: forget the old one.
            for old in [p for p in self.peers.values() if p.url == url and not p.slots]:
                del self.peers[old.server_id]
            peer = Peer(peer_id, name, url, pool, pinned)
            self.peers[peer_id] = peer
        peer.update(name, url, pool, pinned)
        return peer

    def _register(
        self, peer: Peer[AccountT], slot: Slot, link: Link[AccountT], replaced: Link[AccountT] | None
    ) -> None:
        first = not peer.slots
        peer.met = True
        peer.slots[slot] = link
        link.slot, link.peer, link.registered = slot, peer, True
        if first:
            peer.disconnected = trio.Event()
            # (Back) up: tell the others, who may never have heard of it, or only while it was away.
            self._gossip_about(peer)
        for account in replaced.accounts if replaced is not None else ():
            self._forget(peer, account)
        self._send_snapshot(link, self.host.local_interest(lambda a: peer.slot_of(a) == slot))
        link.send(Gossip(self._known_peers()))
        if first and self.gateways is not None:
            known = self.gateways.known()
            if known:
                link.send(Gateways(known))
        link.log(logging.INFO, f"Route connection created ({peer.name}, slot {slot})")
        self._dial_missing(peer)

    def _dropped(self, link: Link[AccountT]) -> None:
        """A connection ended: forget what came over it, and redial it if this node owns it."""
        if not link.registered:
            return
        link.registered = False
        peer, slot = peer_of(link), link.slot
        assert slot is not None  # (a registered link has its slot)
        del peer.slots[slot]
        for account in link.accounts:
            self._forget(peer, account)
        link.log(logging.INFO, f"Route connection closed: {link.closing}")
        if not peer.slots:
            for account in {entry.account for entry in self.host.route_interest.entries(peer)}:
                self._forget(peer, account)
            peer.disconnected.set()
            self._peer_clients(peer, ())
        self._dial_missing(peer)

    def raft_pending(self, name: str) -> int | None:
        """Bytes waiting to go to the connected peer ``name`` on the link RAFT frames take (None:
        no link to it is up)."""
        for peer in self.peers.values():
            if peer.name == name and peer.slots:
                link = peer.slots.get(0) or next(iter(peer.slots.values()))
                return link.pending_bytes
        return None

    def send_raft(self, name: str, frame: RaftFrame | KeysRequest | KeysReply) -> bool:
        """Send a RAFT (or KEYS, KEYR) frame to the connected peer called ``name``, on its first
        slot up; False (dropped) if there is none."""
        for peer in self.peers.values():
            if peer.name == name and peer.slots:
                link = peer.slots.get(0) or next(iter(peer.slots.values()))
                link.send(frame)
                return True
        return False

    # -- client URLs -------------------------------------------------------------------------

    def peer_client_urls(self) -> list[str]:
        """Where the connected peers take clients, each URL once, in the order they came."""
        return list(dict.fromkeys(url for urls in self._peer_client_urls.values() for url in urls))

    def redis_peers(self) -> list[RedisPeer]:
        """Every peer this node knows of: where it takes Redis clients, its route URL, and whether
        a link to it is up."""
        return [RedisPeer(p.name, p.redis_url, p.url, bool(p.slots)) for p in self.peers.values()]

    def advertise_clients(self, urls: tuple[str, ...]) -> None:
        """Tell every peer (now, and in later HELLOs) where this node takes clients."""
        self.client_urls = urls
        frame = encode(ClientUrls(urls))
        for peer in self.peers.values():
            for link in peer.slots.values():
                link.send_bytes(frame)
                break

    def _peer_clients(self, peer: Peer[AccountT], urls: tuple[str, ...]) -> None:
        if self._peer_client_urls.get(peer.server_id, ()) == urls:
            return
        if urls:
            self._peer_client_urls[peer.server_id] = urls
        else:
            del self._peer_client_urls[peer.server_id]
        self.on_client_urls()

    # -- dialing -----------------------------------------------------------------------------

    def _learn(self, info: PeerInfo) -> None:
        """A connected peer named another: make sure someone will connect the pair."""
        if info.id == self.server_id or info.id in self.peers:
            return
        unmet = 0
        for known in self.peers.values():
            if known.url == info.url and known.slots:
                return  # that address answers as another node now (the named one restarted)
            unmet += not known.met
        if unmet >= MAX_UNMET_PEERS:
            return
        peer = self._peer(
            info.id, info.name, info.url, self.config.pool_size, frozenset(self.config.pinned_accounts)
        )
        self._dial_missing(peer)

    def _gossip_about(self, peer: Peer[AccountT]) -> None:
        """Tell every connected peer about one that just came up, so the mesh closes at once."""
        frame = encode(Gossip([PeerInfo(peer.server_id, peer.name, peer.url)]))
        for other in self.peers.values():
            if other is not peer:
                for link in other.slots.values():
                    link.send_bytes(frame)
                    break

    def _dial_missing(self, peer: Peer[AccountT]) -> None:
        """Dial every slot of ``peer`` that is down, if this node owns the pair's connections (only
        the first, until the peer is met: one that may not exist is not worth a pool of dials)."""
        if self._nursery is None or self.server_id > peer.server_id:
            return
        for slot in peer.all_slots() if peer.met else [0]:
            key = (peer.server_id, slot)
            if slot not in peer.slots and key not in self._dialing:
                self._dialing.add(key)
                self._nursery.start_soon(self._dial_slot, peer, slot)

    async def _dial_slot(self, peer: Peer[AccountT], slot: Slot) -> None:
        key = (peer.server_id, slot)
        delay, failures = 0.0, 0
        try:
            while True:
                wait, delay = self._backoff(delay, None if peer.met else UNMET_BACKOFF_MAX)
                await trio.sleep(wait)
                # Looked at after the wait: dialing a slot filled meanwhile would replace a good
                # connection, and lose what was in flight on it.
                if slot in peer.slots or self.peers.get(peer.server_id) is not peer:
                    return
                if not peer.met and failures >= MAX_DIAL_FAILURES:
                    del self.peers[peer.server_id]
                    log.info("Forgetting route peer %s at %s: never reached", peer.name, peer.url)
                    return
                failures += 1
                stream = await self._connect(peer.url)
                if stream is None:
                    continue
                link = await self._dial_link(stream, slot)
                if link.peer is peer and link.closing == "Replaced by a newer route":
                    return  # the peer's own connection took the slot; it is not ours to redial
        finally:
            self._dialing.discard(key)

    async def _seed(self, url: str) -> None:
        """Keep introducing this node at a seed URL until the seed's node owns the connections,
        and again whenever that node is lost entirely."""
        delay = 0.0
        while True:
            wait, delay = self._backoff(delay)
            await trio.sleep(wait)
            stream = await self._connect(url)
            if stream is None:
                continue
            link = await self._dial_link(stream, 0)
            if link.remote is None:
                continue
            self.seed_ids[url] = link.remote.id
            if link.remote.id == self.server_id:
                return  # the seed is this node: nobody to introduce it to
            # Refused or replaced, the link still said who is there: while that node is connected
            # (over links its side dialed, say), there is nothing to introduce.
            peer = self.peers.get(link.remote.id)
            if peer is not None and peer.slots:
                delay = 0.0
                await peer.disconnected.wait()

    # -- interest ----------------------------------------------------------------------------

    def _on_interest(self, change: InterestChange) -> None:
        """Local interest changed: tell every peer, on the account's slot, right away."""
        if not self.peers:
            return
        if change.withdrawn:
            frame = encode(SubRemove(change.account, change.subject, change.queue))
        else:
            frame = encode(SubAdd(change.account, change.subject, change.queue, change.weight))
        for peer in self.peers.values():
            link = peer.slots.get(peer.slot_of(change.account))
            if link is not None:
                link.send_bytes(frame)

    def tell_gateways(self, known: dict[str, tuple[str, ...]]) -> None:
        """Pass news of other clusters to every connected peer."""
        frame = encode(Gateways(known))
        for peer in self.peers.values():
            for link in peer.slots.values():
                link.send_bytes(frame)
                break


def _address(url: str) -> tuple[str, int] | None:
    try:
        return parse_url(url)
    except ValueError:
        return None
