"""Accounts sharing subjects: stream and service imports, built from subscriptions alone.

A stream import works by shadow subscriptions, as in nats-server: when a subscription in the
importing account wants imported subjects, a shadow of it subscribes in the exporting account (on
the subjects there), and delivers what it gets to the original under the importing account's
subject. The shadow is interest like any other, so routes and gateways carry the exporter's messages
to the node where the subscriber is, and the publish path of every account stays as it was.

A service import is a queue subscription in the importing account, on the imported subject, on every
node (one queue group: the requester's own node serves it). It publishes each request in the
exporting account under the exported subject, its reply subject replaced by ``_R_.<node>.<token>``,
which this node listens to in the exporting account; the (first) response published there goes back
to the requester's reply subject in the importing account. Mappings are bounded in number and expire.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from node.accounts.account import Account
from node.config.options import Config
from routing import Message, Subscription, subjects_collide
from routing.subjectmap import SubjectMap

__all__ = ["MAX_RESPONSES", "RESPONSE_TTL", "ImportHost", "Responses", "install_imports"]

IMPORT_QUEUE = "_pubmesh_import"
"""The queue group of service imports' subscriptions (one member per node)."""
RESPONSE_PREFIX = b"_R_."
MAX_RESPONSES = 65_536
"""Requests through service imports awaiting a response, per node; past this the oldest is dropped."""
RESPONSE_TTL = 120.0
"""Seconds a request waits for its response (nats-server's default response threshold)."""
MAX_CHAIN = 4
"""Service imports one request may pass through (an import of an import...): a bound on loops."""


class ImportHost(Protocol):
    """What imports use of the node's broker (``node.broker.Broker``): its configuration and accounts,
    subscribing and publishing in an account, and its random source."""

    @property
    def config(self) -> Config: ...

    @property
    def server_id(self) -> str: ...

    @property
    def rng(self) -> random.Random: ...

    def account(self, name: str) -> Account: ...

    def subscribe(self, account: Account, sub: Subscription) -> None: ...

    def unsubscribe(self, account: Account, subs: Collection[Subscription]) -> None: ...

    def publish(self, account: Account, msg: Message) -> bool: ...


class Shadow:
    """Owns a subscription in an exporting account standing in for ``target`` in the importer."""

    __slots__ = ("filtered", "map", "target")

    def __init__(self, subjects: SubjectMap, target: Subscription, filtered: bool) -> None:
        self.map = subjects
        self.target = target
        self.filtered = filtered
        """Whether the shadow subscribes to more than the target wants (its pattern straddles the
        import), so each message is checked."""

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        subject = self.map.forward(msg.subject)
        target = self.target
        if self.filtered and not self.map.wants(target.subject, subject):
            return False
        return bool(target.owner.deliver(target, msg.with_subject(subject)))


class StreamImports:
    """One importing account's stream imports, and the shadows of its subscriptions."""

    def __init__(self, broker: ImportHost, imports: Sequence[tuple[Account, SubjectMap]]) -> None:
        self._broker = broker
        self._imports = imports
        self._shadows: dict[Subscription, list[tuple[Account, Subscription]]] = {}

    def subscribed(self, sub: Subscription) -> None:
        if isinstance(sub.owner, Shadow | ServiceImport | Responses):
            return  # internal subscriptions import nothing (so imports never chain into loops)
        shadows = []
        for exporter, subjects in self._imports:
            if subjects.covers(sub.subject):
                subject, filtered = subjects.backward(sub.subject), False
            elif subjects_collide(sub.subject, subjects.target):
                subject, filtered = subjects.source, True
            else:
                continue
            shadow = Subscription(subject, sub.queue, owner=Shadow(subjects, sub, filtered))
            self._broker.subscribe(exporter, shadow)
            shadows.append((exporter, shadow))
        if shadows:
            self._shadows[sub] = shadows

    def unsubscribed(self, subs: Collection[Subscription]) -> None:
        gone: dict[Account, list[Subscription]] = {}
        for sub in subs:
            for exporter, shadow in self._shadows.pop(sub, ()):
                gone.setdefault(exporter, []).append(shadow)
        for exporter, shadows in gone.items():
            self._broker.unsubscribe(exporter, shadows)


class ServiceImport:
    """Owns the importing account's subscription to one imported service."""

    __slots__ = ("exporter", "importer", "map", "responses")

    def __init__(
        self, importer: Account, exporter: Account, subjects: SubjectMap, responses: Responses
    ) -> None:
        self.importer, self.exporter = importer, exporter
        self.map = subjects
        self.responses = responses

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        request = msg.with_subject(self.map.forward(msg.subject))
        return self.responses.request(self.importer, self.exporter, request)


class Responses:
    """This node's requests through service imports awaiting their response.

    Args:
        broker: the node.
        tag: names this node in mapped reply subjects (unique in the super-cluster).
        clock: seconds, for expiry.
    """

    def __init__(
        self, broker: ImportHost, tag: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._broker = broker
        self.prefix = RESPONSE_PREFIX + tag.encode() + b"."
        self._clock = clock
        self._pending: collections.OrderedDict[bytes, tuple[Account, Account, bytes, float]] = (
            collections.OrderedDict()
        )
        """Token -> (importing account, exporting account, reply there, when to forget it)."""
        self._listening: dict[Account, Subscription] = {}
        self._chain = 0

    def __len__(self) -> int:
        return len(self._pending)

    def listen(self, exporter: Account) -> None:
        """Take responses published in ``exporter`` to this node's mapped replies."""
        if exporter not in self._listening:
            sub = Subscription(self.prefix.decode() + ">", owner=self)
            self._listening[exporter] = sub
            self._broker.subscribe(exporter, sub)

    def request(self, importer: Account, exporter: Account, msg: Message) -> bool:
        """Publish a request in ``exporter``, remembering where its response goes."""
        if self._chain >= MAX_CHAIN:
            return False
        token = None
        if msg.reply is not None:
            token = self._remember(importer, exporter, msg.reply)
            msg = msg.with_reply(self.prefix + token)
        self._chain += 1
        try:
            delivered = self._broker.publish(exporter, msg)
        finally:
            self._chain -= 1
        if not delivered and token is not None:
            del self._pending[token]
        return delivered

    def _remember(self, importer: Account, exporter: Account, reply: bytes) -> bytes:
        now = self._clock()
        pending = self._pending
        while pending and (len(pending) >= MAX_RESPONSES or next(iter(pending.values()))[3] <= now):
            pending.popitem(last=False)
        rng = self._broker.rng
        token = b"%x" % rng.getrandbits(64)
        while token in pending:
            token = b"%x" % rng.getrandbits(64)
        pending[token] = (importer, exporter, reply, now + RESPONSE_TTL)
        return token

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """A response in an exporting account: on to the requester, once."""
        token = msg.subject[len(self.prefix) :]
        entry = self._pending.get(token)
        if entry is None:
            return False
        importer, exporter, reply, expires = entry
        if self._listening.get(exporter) is not sub:
            return False  # (the token was handed to another account)
        del self._pending[token]
        if expires <= self._clock():
            return False
        return self._broker.publish(importer, Message(reply, None, msg.headers, msg.payload))


def install_imports(broker: ImportHost) -> None:
    """Set up the imports ``broker.config`` lists (before any client connects): whoever builds the
    broker installs them, once."""
    responses: Responses | None = None
    for config in broker.config.accounts:
        importer = broker.account(config.name)
        streams = [
            (broker.account(i.account), SubjectMap(i.subject, i.to))
            for i in config.imports
            if not i.service
        ]
        if streams:
            importer.imports = StreamImports(broker, streams)
        for imp in config.imports:
            if not imp.service:
                continue
            if responses is None:
                responses = Responses(broker, broker.server_id[1:13])
            exporter = broker.account(imp.account)
            responses.listen(exporter)
            owner = ServiceImport(importer, exporter, SubjectMap(imp.to, imp.subject), responses)
            broker.subscribe(importer, Subscription(imp.to, IMPORT_QUEUE, owner=owner))
