"""What a node knows and does, without I/O: accounts, connections, and the one publish path.

Every message, whatever brought it in (a NATS client, a route, a gateway, an internal publisher),
enters ``Broker.publish`` in one shape: account, subject, reply, headers, payload and origin. Whatever
can take a delivery (a client connection, an internal consumer) implements ``Subscriber``; the
broker neither knows nor cares which protocol it speaks. Adding a front door therefore never touches
the NATS codec, and a new kind of subscriber never touches the publish path.
"""

from __future__ import annotations

import base64
import collections
import os
import platform
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Protocol

from cluster.host import Consumer, Forwarder, ReplyMapping
from node.accounts.account import DEFAULT_ACCOUNT, Account
from node.accounts.auth import Authenticator
from node.config.keyspace_events import parse_flags
from node.config.options import Config, RedisConfig
from node.data.keyspaces import Keyspaces
from node.redis_listeners import RedisListeners
from node.redis_state.settings import RedisSettings
from node.redis_state.stats import RedisStats
from node.scripting.registry import Scripts
from routing import (
    EMPTY_MATCH,
    InterestChange,
    InterestTracker,
    Message,
    Origin,
    PatternIndex,
    PatternSubscriber,
    Publication,
    RemoteInterest,
    SubListResult,
    Subscriber,
    Subscription,
    channel_subject,
    pattern_subject,
    plan_delivery,
    subject_channel,
)

__all__ = [
    "NATS_VERSION",
    "VERSION",
    "Broker",
    "ClientEvents",
]

VERSION = "0.1.0"
"""pubmesh's own version (``pubmesh --version``, the log, the monitoring index page)."""

NATS_VERSION = "2.10.0"
"""The nats-server feature level pubmesh speaks, reported as ``version`` in INFO, /varz and the
system account's answers: client libraries parse it (semver) to decide which features to use.
2.10 is the last level whose client-visible core protocol pubmesh has in full (headers,
no-responders, the system account's requests and events); 2.11 added message tracing, which it
has not. JetStream is not implied: INFO never announces it, whatever the version says."""

RUNTIME = "python" + platform.python_version()
"""What INFO's and /varz's ``go`` field carries here: the runtime, as nats-server reports Go's."""

CLOSED_KEPT = 10_000
"""Closed connections remembered for ``/connz?state=closed`` (nats-server's MaxClosedClients)."""


class Owner(Subscriber, Protocol):
    """A subscriber /subsz lists subscriptions under: a client connection, or one of the node's own
    services (``internal_subscriptions``)."""

    cid: int
    account: Account


class Client(Owner, Consumer, Protocol):
    """A connection the broker tracks: counted, listed by /connz, closed on shutdown."""

    in_msgs: int
    in_bytes: int
    out_msgs: int
    out_bytes: int

    @property
    def authenticated(self) -> bool:
        """Signed in, or needing no credentials: False while the node waits for them."""
        ...

    def close(self, reason: str) -> None: ...

    def update_info(self, *, lame_duck: bool = False) -> None:
        """The node's INFO changed (its cluster's URLs, or lame duck mode begins)."""
        ...

    def reload(self) -> None:
        """The node's configuration was reloaded."""
        ...


class ClientEvents(Protocol):
    """Told when a client signs in (CONNECT accepted) and when one is gone: the system account's
    advisories (``node.monitoring.system``). Called on those two occasions only, never per message."""

    def connected(self, client: Client) -> None: ...

    def disconnected(self, client: Client) -> None: ...


SLOW_CONSUMER = "Slow Consumer"
"""How the close reason of every connection cut as a slow consumer begins."""


def new_server_id(rng: random.Random | None = None) -> str:
    """A 56-character id shaped like nats-server's (an 'N' and base32), unique per process start
    (or, from a seeded ``rng``, the same in every run of a reproducible test)."""
    noise = rng.randbytes(35) if rng is not None else os.urandom(35)
    return "N" + base64.b32encode(noise).decode()[:55]


class KeyRouting(Protocol):
    """What a Redis connection asks before and after a command on keys runs, when keys are
    replicated (``node.replicated.path.KeyRouter``)."""

    def route(self, conn: Any, command: Any, args: list[bytes]) -> bool:
        """Whether the command was answered (or sent on) without running here."""
        ...

    def ran(self, conn: Any) -> None:
        """The command ran here: its changes go to the group."""
        ...

    def script_refusal(self, keys: list[bytes], *, cross_slot: bool) -> str | None:
        """Why a running script's command may not reach these keys here (None: it may)."""
        ...

    def cluster(self, conn: Any, args: list[bytes]) -> bool:
        """Answer a CLUSTER subcommand describing the placement; False: not one it describes."""
        ...

    def holds_back(self, conn: Any, command: Any, args: list[bytes]) -> bool:
        """Whether the command waits for writes its connection sent to other nodes (then it
        runs once they are answered)."""
        ...

    def watch(self, conn: Any, keys: list[bytes]) -> bool:
        """Whether a WATCH of ``keys`` was answered (or sent on) without watching them here."""
        ...


class Broker:
    """The state of one node and its publish path.

    Args:
        config: the node's configuration.
        rng: where queue-group picks and the server id come from (seed it to make a run
            reproducible).
    """

    def __init__(self, config: Config, *, rng: random.Random | None = None) -> None:
        self.config = config
        self.server_id = new_server_id(rng)
        self.server_name = config.server_name or self.server_id
        self.port = config.port
        """The client port; the launcher replaces 0 with the one the system picked."""
        self.start_ns = time.time_ns()
        self.rng = rng or random.Random()
        self.auth = Authenticator(config)
        self.route_interest: RemoteInterest[Forwarder] = RemoteInterest()
        """What this node's routes announced (written by the cluster, read by ``publish``)."""
        self.gateway_interest: RemoteInterest[Forwarder] = RemoteInterest()
        """What remote clusters announced over gateways."""
        self.gateway_order: Sequence[Forwarder] = ()
        """Gateways by preference (lowest round trip first) for queue groups served remotely."""
        self.interest = InterestTracker()
        """Local interest, counted per (account, subject, queue): what peers must be told."""
        self.interest_listeners: list[Callable[[InterestChange], None]] = []
        """Called with each change of local interest, in order (the cluster's links listen)."""
        self.keyspaces = Keyspaces()
        self.key_router: KeyRouting | None = None
        """Carries commands on keys to the replica groups that hold them (None: keys are this
        node's alone)."""
        """Every account's keys (Redis streams)."""
        self.scripts = Scripts()
        """Every account's Lua scripts and function libraries."""
        self.keyspaces.maxmemory = config.redis.maxmemory if config.redis is not None else 0
        events = parse_flags(config.redis.notify_keyspace_events.encode()) if config.redis else 0
        self.keyspaces.notifier.configure(events or 0)
        self.keyspaces.notifier.publish = self._publish_event
        redis = config.redis or RedisConfig()
        self.redis_settings = RedisSettings(
            (redis.hard_limit, redis.soft_limit, int(redis.soft_seconds))
        )
        """The Redis front door's run-time parameters (CONFIG SET)."""
        self.redis_stats = RedisStats(self.redis_settings)
        """What the Redis front door counts (INFO, SLOWLOG, LATENCY) and its MONITOR clients."""
        self.config_file: str | None = None
        """The configuration file the node was started from (CONFIG REWRITE writes to it)."""
        self.stop: Callable[[], None] | None = None
        """Stops the whole node (Redis's SHUTDOWN); set by whoever runs it (None: nothing does)."""
        self.redis_listeners: RedisListeners | None = None
        """Where the Redis front door listens, which CONFIG SET port moves (set by the server)."""
        self.replies: ReplyMapping | None = None
        """Reply mapping across gateways (set up with them; None keeps the publish path lean)."""
        self.accounts: dict[str, Account] = {}
        self.system_account: Account | None = None
        """Where the node's own services answer and its events go; None with ``no_system_account``."""
        for name in (DEFAULT_ACCOUNT, *(a.name for a in config.accounts)):
            self.account(name)
        if not config.no_system_account:
            self.system_account = self.account(config.system_account)
        self.events: ClientEvents | None = None
        """Told of clients signing in and leaving (the system account's advisories), if anyone is."""
        self.internal_subscriptions: list[Subscription] = []
        """Subscriptions the node holds itself (the system account's requests), which /subsz lists
        beside clients' ones, as nats-server does: they are interest routes and gateways carry."""
        self.clients: dict[int, Client] = {}
        self.connect_urls: list[str] = []
        """Where clients may connect across the cluster: INFO's ``connect_urls`` (the server keeps
        it as route peers come and go; empty on a node alone)."""
        self.congested: set[Consumer] = set()
        """Consumers past their stall threshold since the last producer paused for them."""
        self.closed: collections.deque[Client] = collections.deque(maxlen=CLOSED_KEPT)
        self._next_cid = 0
        self.total_connections = 0
        self.accepted: collections.Counter[type] = collections.Counter()
        """Client connections accepted since start, by class (NATS, Redis)."""
        self.slow_consumers = 0
        """Client connections cut as slow consumers."""
        self.slow_links: collections.Counter[str] = collections.Counter()
        """Links cut as slow consumers, by kind ("Route", "Gateway")."""
        self.stale_connections = 0
        # Traffic of connections that have closed, by class, so totals survive them.
        self._closed_traffic: dict[type, list[int]] = {}

    def identity(self) -> dict[str, Any]:
        """Who this node is, in the fields (and order) INFO and /varz both start with."""
        return {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": NATS_VERSION,
            "proto": 1,
            "go": RUNTIME,
            "host": self.config.host,
            "port": self.port,
        }

    # -- connections -----------------------------------------------------------------------------

    def next_cid(self) -> int:
        self._next_cid += 1
        return self._next_cid

    def at_connection_limit(self) -> bool:
        return len(self.clients) >= self.config.max_connections

    def add_client(self, client: Client) -> None:
        self.clients[client.cid] = client
        self.total_connections += 1
        self.accepted[type(client)] += 1

    def client_connected(self, client: Client) -> None:
        """A client has signed in (its CONNECT accepted, so its account is known)."""
        if self.events is not None:
            self.events.connected(client)

    def remove_client(self, client: Client) -> None:
        if self.clients.pop(client.cid, None) is not None:
            self.closed.append(client)
            for traffic in (
                self._closed_traffic.setdefault(type(client), [0, 0, 0, 0]),
                client.account.closed_traffic,
            ):
                traffic[0] += client.in_msgs
                traffic[1] += client.in_bytes
                traffic[2] += client.out_msgs
                traffic[3] += client.out_bytes
            if client.closing is not None and client.closing.startswith(SLOW_CONSUMER):
                client.account.slow_consumers += 1
            if self.events is not None:
                self.events.disconnected(client)

    def count_slow_link(self, kind: str) -> None:
        self.slow_links[kind] += 1

    def traffic(self, kind: type | None = None) -> tuple[int, int, int, int]:
        """Messages and bytes in and out since start: (in_msgs, in_bytes, out_msgs, out_bytes), of
        client connections of one class when ``kind`` is given, else of all."""
        totals = [0, 0, 0, 0]
        for cls, closed in self._closed_traffic.items():
            if kind is None or cls is kind:
                for i in range(4):
                    totals[i] += closed[i]
        for client in self.clients.values():
            if kind is not None and type(client) is not kind:
                continue
            totals[0] += client.in_msgs
            totals[1] += client.in_bytes
            totals[2] += client.out_msgs
            totals[3] += client.out_bytes
        return totals[0], totals[1], totals[2], totals[3]

    def pending_output(self) -> int:
        """Bytes queued for client connections and not yet written (their output buffers)."""
        total = 0
        for client in self.clients.values():
            total += client.pending_bytes
        return total

    def account(self, name: str) -> Account:
        """The account called ``name``, created on first use."""
        account = self.accounts.get(name)
        if account is None:
            account = Account(name, self.route_interest, self.gateway_interest)
            self.accounts[name] = account
        return account

    def _publish_event(self, account: str, channel: bytes, payload: bytes) -> None:
        """Publish a keyspace notification as PUBLISH would (``node.data.notifications``)."""
        self.publish(self.account(account), Message(channel_subject(channel), None, None, payload))

    def set_gateway_order(self, order: Sequence[Forwarder]) -> None:
        self.gateway_order = order

    def map_replies(self, router: ReplyMapping) -> None:
        self.replies = router

    # -- interest --------------------------------------------------------------------------------

    def subscribe(self, account: Account, sub: Subscription) -> None:
        """Add a local subscription, and tell peers if it is the first interest of its kind.

        Raises:
            InvalidSubjectError: its subject breaks the token rules.
        """
        account.sublist.insert(sub)
        change = self.interest.update(account.name, sub.subject, sub.queue)
        if change is not None:
            self._announce(change)
        if account.imports is not None:
            account.imports.subscribed(sub)

    def unsubscribe(self, account: Account, subs: Collection[Subscription]) -> None:
        """Remove local subscriptions (one, or all of a closing connection's), telling peers about
        interest that is gone, one announcement per key however many subscriptions it had."""
        if len(subs) == 1:
            for sub in subs:
                account.sublist.remove(sub)
        else:
            account.sublist.remove_batch(subs)
        deltas: dict[tuple[str, str | None], int] = {}
        for sub in subs:
            key = (sub.subject, sub.queue)
            deltas[key] = deltas.get(key, 0) - 1
        for change in self.interest.update_batch(account.name, deltas):
            self._announce(change)
        if account.imports is not None:
            account.imports.unsubscribed(subs)

    def _announce(self, change: InterestChange) -> None:
        for listener in self.interest_listeners:
            listener(change)

    def local_interest(self, where: Callable[[str], bool] | None = None) -> Iterator[InterestChange]:
        """Local interest as announcements, for a peer whose link has just opened (of the accounts
        ``where`` keeps; all by default)."""
        interest = self.interest
        accounts = None if where is None else [a for a in interest.accounts() if where(a)]
        changes: Iterator[InterestChange] = interest.snapshot(accounts)
        return changes

    def subscribe_pattern(self, account: Account, pattern: bytes, owner: PatternSubscriber) -> None:
        """Add a Redis pattern subscription, announced to peers as interest in the pattern (they
        send over what matches it, ``routing.channels``)."""
        if account.patterns is None:
            account.patterns = PatternIndex()
        account.patterns.add(pattern, owner)
        change = self.interest.update(account.name, pattern_subject(pattern))
        if change is not None:
            self._announce(change)

    def unsubscribe_pattern(self, account: Account, pattern: bytes, owner: PatternSubscriber) -> None:
        """Remove one owner's pattern subscription (an unknown one is ignored)."""
        if account.patterns is not None and account.patterns.subscribed(pattern, owner):
            account.patterns.remove(pattern, owner)
            change = self.interest.update(account.name, pattern_subject(pattern), delta=-1)
            if change is not None:
                self._announce(change)

    def subscriptions(self) -> Iterator[tuple[Account, Subscription]]:
        for account in self.accounts.values():
            for sub in account.sublist:
                yield account, sub

    # -- the publish path ------------------------------------------------------------------------

    def publish(
        self,
        account: Account,
        msg: Message,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
    ) -> bool:
        """Deliver one message to everyone interested in it; return whether anyone took it.

        Args:
            exclude: an owner whose subscriptions must not receive it (a publisher with echo off).
            queues: for a message from another node, the queue groups it asked this node to serve.
        """
        count, forwarded = self.publish_counted(account, msg, exclude, origin, queues)
        return count > 0 or forwarded

    def publish_counted(
        self,
        account: Account,
        msg: Message,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
    ) -> tuple[int, bool]:
        """``publish``, telling how it went: how many local subscribers took the message (Redis's
        PUBLISH reply), and whether a link took a copy."""
        replies = self.replies
        if replies is not None and replies.claims(account.name, msg.subject, msg.reply):
            routed = replies.route(Publication(account.name, msg, exclude, origin, queues))
            if isinstance(routed, bool):
                return 0, routed
            # Local subscribers get ``local``, links ``msg``, and ``skip`` (a gateway the reply
            # already went back through) gets nothing, but has taken it.
            p = routed
            local = p.local if p.local is not None else p.msg
            count, forwarded = self._deliver(
                account, p.msg, local, p.exclude, p.origin, p.queues, p.skip
            )
            return count, forwarded or p.skip is not None
        return self._deliver(account, msg, msg, exclude, origin, queues, None)

    def _deliver(
        self,
        account: Account,
        msg: Message,
        local_msg: Message,
        exclude: object,
        origin: Origin,
        queues: Collection[str],
        skip: object,
    ) -> tuple[int, bool]:
        """Deliver one message; return how many local subscribers took it, and whether a link
        took a copy."""
        result, routes, gateways = account.match(msg.subject)
        links: Mapping[Forwarder, tuple[str, ...]]
        if routes is EMPTY_MATCH and gateways is EMPTY_MATCH:
            if not result.plain and not result.queues:
                if account.patterns is None:
                    return 0, False
                return self._deliver_patterns(account.patterns, local_msg, exclude), False
            local, links = plan_delivery(origin, result, self.rng, queues=queues, exclude=exclude)
        else:
            local, links = plan_delivery(
                origin,
                result,
                self.rng,
                routes=routes,
                gateways=gateways,
                gateway_order=self.gateway_order,
                queues=queues,
                exclude=exclude,
            )
        count = 0
        for sub in local:
            if sub.owner.deliver(sub, local_msg) or (
                sub.queue is not None and self._another_member(result, sub, exclude, local_msg)
            ):
                count += 1
        if account.patterns is not None:
            count += self._deliver_patterns(account.patterns, local_msg, exclude)
        forwarded = False
        if links:
            name = account.name
            for link, names in links.items():
                if link is not skip:
                    link.forward(name, msg, names)
                    forwarded = True
        return count, forwarded

    def _deliver_patterns(
        self, patterns: PatternIndex[PatternSubscriber], msg: Message, exclude: object
    ) -> int:
        """Deliver to Redis pattern subscriptions matching the message's channel, oldest pattern
        first (after the channel's own subscribers, as redis-server orders them)."""
        if not len(patterns):
            return 0
        count = 0
        channel = subject_channel(msg.subject)
        for pattern, owners in patterns.match(channel):
            for owner in owners:
                if owner is not exclude and owner.deliver_pattern(pattern, channel, msg):
                    count += 1
        return count

    def _another_member(
        self, result: SubListResult, failed: Subscription, exclude: object, msg: Message
    ) -> bool:
        """The picked member of a queue group could not take the message (closing, over its
        auto-unsubscribe limit, filtered): try the others in random order, as nats-server does."""
        for group in result.queues:
            if group[0].queue == failed.queue:
                others = [m for m in group if m is not failed and m.owner is not exclude]
                self.rng.shuffle(others)
                return any(m.owner.deliver(m, msg) for m in others)
        return False
