"""The system account: a node's own request/reply services and its connection events, as nats-server's.

Every node subscribes, in the system account (``$SYS`` unless ``system_account`` names another),
to nats-server's monitoring requests:

- ``$SYS.REQ.SERVER.PING``: answered with the node's STATSZ;
- ``$SYS.REQ.SERVER.PING.<ENDPOINT>``: every node answers;
- ``$SYS.REQ.SERVER.<server id>.<ENDPOINT>``: only that node answers;

for the endpoints VARZ, CONNZ, SUBSZ, ROUTEZ, GATEWAYZ, HEALTHZ, ACCOUNTZ, STATSZ, IDZ, ACCSTATZ
(per account: connections, subscriptions, traffic), and pubmesh's own STREAMZ and RAFTZ (the
documents of /streamz and /raftz: streams, and replica groups with their leader, term, commit and
applied indexes and each peer's lag).
They are ordinary subscriptions, so their interest crosses routes and gateways like any other and a
PING published anywhere in the super-cluster reaches every node; a requester collects the answers on
its inbox. A request's body, when there is one, is a JSON object of the endpoint's options with
nats-server's names (CONNZ ``{"limit": 5, "state": 1}``), and of the filters every endpoint takes
(``server_name``, ``cluster``, ``host``, ``exact_match``, ``tags``, ``domain``): a node the filters
do not select stays silent. Answers come in nats-server's envelope, ``{"server": {...}, "data":
{...}}``, with ``{"error": {"code": 400, "description": ...}}`` in place of ``data`` for a body that
is not such an object, and code 500 for options the endpoint refuses; STATSZ answers ``{"server":
..., "statsz": ...}`` and IDZ ``{"name", "host", "id"}``, as there
(``node.monitoring.request_options`` reads the bodies). Documents are those of the HTTP monitoring
endpoints.

When a NATS client signs in, the node publishes ``$SYS.ACCOUNT.<account>.CONNECT`` in the system
account, and ``$SYS.ACCOUNT.<account>.DISCONNECT`` when it leaves (with its traffic and the close
reason): nats-server's ``io.nats.server.advisory.v1.client_connect`` and ``client_disconnect``
events. Only users of the system account can subscribe to them or send requests: other accounts'
subjects never meet it, and a node without users has no way into it at all, as in nats-server.

The core is sans-I/O: a request or an event is queued where it happens (in the publish path, or
where a connection opens or closes) and costs nothing more there; ``SystemAccount.run`` builds the
answers and publishes them. Both queues are bounded: a flood of requests loses requests, never
memory.
"""

from __future__ import annotations

import collections
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from node.accounts.account import Account
from node.broker import NATS_VERSION, Broker, Client
from node.connection import Connection
from node.monitoring import gojson
from node.monitoring.accountz import AccountzOptions, accountz, accstatz
from node.monitoring.connz import connz
from node.monitoring.gofmt import go_time
from node.monitoring.links import gatewayz, routez
from node.monitoring.pacing import Pacer
from node.monitoring.raftz import raftz
from node.monitoring.request_options import (
    RequestError,
    accstatz_options,
    connz_options,
    decode_options,
    gatewayz_options,
    routez_options,
    streamz_options,
    subsz_options,
)
from node.monitoring.state import BadRequest, MonitoredNode, MonitorState
from node.monitoring.streamz import streamz
from node.monitoring.subsz import subsz
from node.monitoring.varz import statsz, varz
from node.nats.client import ClientConnection
from routing import Message, Subscription, is_valid_literal_subject

__all__ = [
    "CONNECT_EVENT",
    "DISCONNECT_EVENT",
    "ENDPOINTS",
    "PING",
    "SystemAccount",
]

log = logging.getLogger("pubmesh")

PING = "$SYS.REQ.SERVER.PING"
"""Every node answers with its STATSZ (nats-server's older form of ``PING.STATSZ``)."""
ENDPOINTS = (
    "VARZ",
    "CONNZ",
    "SUBSZ",
    "ROUTEZ",
    "GATEWAYZ",
    "HEALTHZ",
    "ACCOUNTZ",
    "STATSZ",
    "IDZ",
    "ACCSTATZ",
    "STREAMZ",
    "RAFTZ",
)
CONNECT_EVENT = "$SYS.ACCOUNT.{}.CONNECT"
DISCONNECT_EVENT = "$SYS.ACCOUNT.{}.DISCONNECT"
_CONNECT_TYPE = "io.nats.server.advisory.v1.client_connect"
_DISCONNECT_TYPE = "io.nats.server.advisory.v1.client_disconnect"
_STATSZ_BROADCAST = "$SYS.SERVER.{}.STATSZ"
"""Where a STATSZ request without a reply subject is answered (nats-server's periodic subject)."""

REQUESTS_QUEUED = 256
"""Requests waiting for an answer at most; more are dropped (and counted) until the queue drains."""
BODY_MAX = 16 * 1024
"""Bytes of options a request may carry; a larger body is answered with an error, not kept."""
EVENTS_QUEUED = 4096
"""Events waiting to be published at most; past that the oldest are dropped."""


# -- events ----------------------------------------------------------------------------------------

_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class EventIds:
    """Event ids shaped like nats-server's (NUIDs: 22 characters of base 62), a random prefix and a
    sequence, unique without coordination between nodes."""

    def __init__(self) -> None:
        self._prefix = "".join(_DIGITS[b % 62] for b in os.urandom(12))
        self._seq = int.from_bytes(os.urandom(5)) % 62**10

    def next(self) -> str:
        self._seq = (self._seq + 1) % 62**10
        seq, digits = self._seq, []
        for _ in range(10):
            seq, digit = divmod(seq, 62)
            digits.append(_DIGITS[digit])
        return self._prefix + "".join(reversed(digits))


def _user_name(client: Connection) -> str:
    """Who the client signed in as, as nats-server's events show it (a token is never shown)."""
    user = client.user
    if user is None:
        return ""
    if user.user:
        return user.user
    return "[REDACTED]" if user.token else ""


def client_info(client: Connection, *, stop_ns: int = 0) -> dict[str, Any]:
    """nats-server's ``ClientInfo`` of a connect (or, with ``stop_ns``, a disconnect) event; empty
    fields are left out as there."""
    info: dict[str, Any] = {"start": go_time(client.start_ns)}
    if client.host:
        info["host"] = client.host
    info |= {"id": client.cid, "acc": client.account.name}
    if user := _user_name(client):
        info["user"] = user
    for key, option in (("name", "name"), ("lang", "lang"), ("ver", "version")):
        value = client.options.get(option)
        if value:
            info[key] = str(value)
    if stop_ns:
        if client.rtt_ns:
            info["rtt"] = client.rtt_ns  # (a Go Duration: nanoseconds)
        info["stop"] = go_time(stop_ns)
    return info | {"name_tag": client.account.name, "kind": "Client", "client_type": client.kind}


def _connect_fields(client: Connection) -> dict[str, Any]:
    return {"client": client_info(client)}


def _disconnect_fields(client: Connection) -> dict[str, Any]:
    """What a disconnect event adds: the client's traffic (``sent`` is what it sent) and why it went."""
    return {
        "client": client_info(client, stop_ns=client.stop_ns or time.time_ns()),
        "sent": {"msgs": client.in_msgs, "bytes": client.in_bytes},
        "received": {"msgs": client.out_msgs, "bytes": client.out_bytes},
        "reason": client.closing or "",
    }


@attrs.define
class _Request:
    endpoint: str
    reply: bytes
    body: bytes | None
    """None: too large to keep (answered with an error)."""


# -- the service -----------------------------------------------------------------------------------


class SystemAccount:
    """A node's system account services: the request subscriptions and the connection events.

    Args:
        node: the node (its broker must have a system account).
        monitor: the monitoring state its documents are built with (shared with the HTTP server,
            so both report the same request counts and monitoring port).
    """

    cid = 0
    """The connection id /subsz lists the node's own subscriptions under."""

    def __init__(self, node: MonitoredNode, monitor: MonitorState) -> None:
        broker = node.broker
        if broker.system_account is None:
            raise ValueError("the node runs without a system account")
        self.node = node
        self.broker: Broker = broker
        self.account: Account = broker.system_account
        self.monitor = monitor
        self.ids = EventIds()
        self.seq = 0
        """Messages sent (each answer's and event's ``server.seq``)."""
        self.dropped = 0
        """Requests dropped because too many were waiting."""
        self._endpoints: dict[str, str] = {PING: "STATSZ"}
        for endpoint in ENDPOINTS:
            for subject in (
                f"$SYS.REQ.SERVER.PING.{endpoint}",
                f"$SYS.REQ.SERVER.{broker.server_id}.{endpoint}",
            ):
                self._endpoints[subject] = endpoint
        self.subscriptions = [
            Subscription(subject, sid=b"%d" % i, owner=self) for i, subject in enumerate(self._endpoints)
        ]
        self._requests: collections.deque[_Request] = collections.deque()
        self._events: collections.deque[tuple[str, dict[str, Any]]] = collections.deque(
            maxlen=EVENTS_QUEUED
        )
        self._wake: Callable[[], None] | None = None

    def subscribe(self) -> None:
        """Subscribe to the requests (announced to routes and gateways as usual) and listen for
        clients signing in and leaving."""
        for sub in self.subscriptions:
            self.broker.subscribe(self.account, sub)
        self.broker.internal_subscriptions.extend(self.subscriptions)
        self.broker.events = self

    # -- in the publish path, and where connections open and close: queue, nothing more -----------

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """A request: queued for ``run`` to answer (or dropped, with too many waiting)."""
        if len(self._requests) >= REQUESTS_QUEUED:
            self.dropped += 1
            return False
        body = msg.payload if len(msg.payload) <= BODY_MAX else None
        self._requests.append(_Request(self._endpoints[sub.subject], msg.reply or b"", body))
        self._poke()
        return True

    def connected(self, client: Client) -> None:
        if isinstance(client, ClientConnection):
            self._event(CONNECT_EVENT, _CONNECT_TYPE, client, _connect_fields)

    def disconnected(self, client: Client) -> None:
        if isinstance(client, ClientConnection) and client.connected:
            self._event(DISCONNECT_EVENT, _DISCONNECT_TYPE, client, _disconnect_fields)

    def _event(
        self,
        subject: str,
        kind: str,
        client: Connection,
        fields: Callable[[Connection], dict[str, Any]],
    ) -> None:
        """Queue an event, unless nobody anywhere wants it: then it costs one lookup, nothing is
        built."""
        subject = subject.format(client.account.name)
        if not is_valid_literal_subject(subject) or not self._wanted(subject):
            return
        event: dict[str, Any] = {
            "type": kind,
            "id": self.ids.next(),
            "timestamp": go_time(time.time_ns()),
            "server": None,  # (filled in when sent, with its sequence number)
        }
        self._events.append((subject, event | fields(client)))
        self._poke()

    def _wanted(self, subject: str) -> bool:
        local, routes, gateways = self.account.match(subject.encode())
        return bool(
            local.plain
            or local.queues
            or routes.links
            or routes.queues
            or gateways.links
            or gateways.queues
        )

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake()

    # -- answering -------------------------------------------------------------------------------

    def identity(self) -> tuple[str, str, str]:
        """The node's name, host and cluster (its gateway's name in a super-cluster, as there)."""
        node, cluster = self.node, ""
        if node.gateways is not None:
            cluster = node.gateways.name
        elif node.routes is not None:
            cluster = node.routes.config.name
        return self.broker.server_name, self.broker.config.host, cluster

    def server_info(self) -> dict[str, Any]:
        """nats-server's ``ServerInfo``: who sends, and the sequence number of what it sends."""
        name, host, cluster = self.identity()
        self.seq += 1
        info: dict[str, Any] = {"name": name, "host": host, "id": self.broker.server_id}
        if cluster:
            info["cluster"] = cluster
        return info | {
            "ver": NATS_VERSION,
            "jetstream": False,
            "flags": 0,
            "seq": self.seq,
            "time": go_time(time.time_ns()),
        }

    def selected(self, options: Mapping[str, Any]) -> bool:
        """Whether a request's filters select this node (nats-server's ``filterRequest``): by
        name, host and cluster, exactly or as substrings; no node has tags or a JetStream domain."""
        exact = options.get("exact_match", False)
        for option, have in zip(("server_name", "host", "cluster"), self.identity(), strict=True):
            wanted = options.get(option, "")
            if wanted and (wanted != have if exact else wanted not in have):
                return False
        return not options.get("tags") and not options.get("domain")

    async def answer(self, endpoint: str, body: bytes | None) -> dict[str, Any] | None:
        """The whole answer to one request, or None when its filters leave this node out."""
        if endpoint == "IDZ":  # (nats-server reads no options for it)
            name, host, _ = self.identity()
            return {"name": name, "host": host, "id": self.broker.server_id}
        try:
            if body is None:
                raise RequestError(400, f"request body larger than {BODY_MAX} bytes")
            options = decode_options(endpoint, body)
            if not self.selected(options):
                return None
            data = await self._document(endpoint, options)
        except RequestError as exc:
            return {
                "server": self.server_info(),
                "error": {"code": exc.code, "description": exc.description},
            }
        except BadRequest as exc:
            return {"server": self.server_info(), "error": {"code": 500, "description": str(exc)}}
        if endpoint == "STATSZ":
            return {"server": self.server_info(), "statsz": data}
        return {"server": self.server_info(), "data": data}

    async def _document(self, endpoint: str, options: Mapping[str, Any]) -> dict[str, Any]:
        state, broker, node, pace = self.monitor, self.broker, self.node, Pacer()
        if endpoint == "HEALTHZ":
            return {"status": "ok", "status_code": 200}
        if endpoint == "STATSZ":
            return await statsz(state, pace)
        if endpoint == "VARZ":
            return await varz(state, pace)
        if endpoint == "ACCOUNTZ":
            return await accountz(broker, AccountzOptions(options.get("account", "")), pace)
        if endpoint == "ACCSTATZ":
            return await accstatz(broker, accstatz_options(options), pace)
        if endpoint == "RAFTZ":
            return raftz(node)
        async with state.listing:
            if endpoint == "CONNZ":
                return await connz(broker, connz_options(options), pace)
            if endpoint == "SUBSZ":
                return await subsz(broker, subsz_options(options), pace)
            if endpoint == "ROUTEZ":
                return await routez(node, routez_options(options), pace)
            if endpoint == "STREAMZ":
                return await streamz(node, streamz_options(options), pace)
            return await gatewayz(node, gatewayz_options(options), pace)

    async def _respond(self, request: _Request) -> None:
        """Answer one request; a failure is logged and answered as an internal error, and the
        service goes on."""
        reply = request.reply
        if not reply:
            if request.endpoint != "STATSZ":
                return  # (nobody to answer)
            reply = _STATSZ_BROADCAST.format(self.broker.server_id).encode()
        if not is_valid_literal_subject(reply.decode("utf-8", "surrogateescape")):
            return
        try:
            answer = await self.answer(request.endpoint, request.body)
        except Exception:
            log.exception("system account: could not answer a %s request", request.endpoint)
            answer = {
                "server": self.server_info(),
                "error": {"code": 500, "description": f"internal error answering {request.endpoint}"},
            }
        if answer is not None:
            await self._send(reply, answer)

    async def _send(self, subject: bytes, doc: dict[str, Any]) -> None:
        pace = Pacer()
        pieces: list[str] = []
        for piece in gojson.iterencode(doc):
            pieces.append(piece)
            await pace.tick()
        payload = "".join(pieces).encode()
        self.broker.publish(self.account, Message(subject, None, None, payload))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish queued events and answer queued requests, one at a time, until cancelled."""
        due = trio.Event()
        self._wake = due.set
        task_status.started()
        try:
            while True:
                while self._events or self._requests:
                    while self._events:
                        subject, event = self._events.popleft()
                        event["server"] = self.server_info()
                        await self._send(subject.encode(), event)
                    if self._requests:
                        await self._respond(self._requests.popleft())
                await due.wait()
                due = trio.Event()
                self._wake = due.set
        finally:
            self._wake = None
