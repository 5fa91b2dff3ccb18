"""Asking every node of the super-cluster for its documents, through the system account, from inside
the node: what the dashboard is built from.

A ``Survey`` holds an inbox subscription in the system account (no client connection, no
credentials: it lives in the node) and, while open, subscriptions to the connect and disconnect
advisories. ``ask`` publishes one ``$SYS.REQ.SERVER.PING.<ENDPOINT>`` request per endpoint asked
(of ``REQUESTS``), each with a reply subject naming the round and the endpoint, and collects the
answers until every endpoint has as many as there are nodes expected (then a short grace for nodes
not yet known), or until ``TIMEOUT``. Answers of an earlier round are ignored.

Everything arrives in the publish path (``deliver``), where it is only kept: at most
``ANSWERS_MAX`` answers per round and ``ADVISORIES_MAX`` advisories; the JSON is read afterwards,
in ``ask``'s task. Each answer's document (its ``data``, or STATSZ's ``statsz``) is returned with
the name of the node that sent it as ``server_name`` and the envelope's ``server`` (id, cluster,
version, and the time the answer was made).
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Collection
from typing import Any

import trio

from node.accounts.account import Account
from node.broker import Broker
from node.monitoring.system import CONNECT_EVENT, DISCONNECT_EVENT
from routing import Message, Subscription

__all__ = ["ADVISORIES_MAX", "ANSWERS_MAX", "GRACE", "REQUESTS", "TIMEOUT", "Survey"]

REQUESTS: tuple[tuple[str, bytes], ...] = (
    ("STATSZ", b""),
    ("ROUTEZ", b""),
    ("GATEWAYZ", b""),
    ("ACCSTATZ", b'{"include_unused":true}'),
    ("STREAMZ", b'{"limit":100}'),
)
"""The endpoints a round may ask, in the order they are asked, and the body of each request. A
node's figures come from STATSZ, not VARZ: VARZ walks the node's keyspace (for its streams block),
STATSZ does not."""
TIMEOUT = 0.8
"""Seconds a round waits for answers at most."""
GRACE = 0.05
"""Seconds a round still waits once every expected node has answered (for one not yet known)."""
ANSWERS_MAX = 4096
"""Answers kept per round; more are dropped."""
ADVISORIES_MAX = 256
"""Advisories kept until read; past that the oldest are dropped."""


class Survey:
    """The node's requester in the system account.

    Args:
        broker: the node's broker.
        account: its system account.
    """

    def __init__(self, broker: Broker, account: Account) -> None:
        self.broker = broker
        self.account = account
        self.prefix = "_INBOX.DASHBOARD." + os.urandom(8).hex() + "."
        self._inbox = Subscription(self.prefix + ">", sid=b"dashboard", owner=self)
        self._events = [
            Subscription(subject.format("*"), sid=b"dashboard-%d" % i, owner=self)
            for i, subject in enumerate((CONNECT_EVENT, DISCONNECT_EVENT))
        ]
        self._round = 0
        self._answers: list[tuple[str, bytes]] = []
        self._arrived = trio.Event()
        self.advisories: collections.deque[tuple[float, bytes]] = collections.deque(
            maxlen=ADVISORIES_MAX
        )
        """(time received, payload) of each advisory not yet read (``take_advisories``)."""
        self.opened = False

    def open(self) -> None:
        """Subscribe to the answers and the advisories."""
        if not self.opened:
            for sub in (self._inbox, *self._events):
                self.broker.subscribe(self.account, sub)
            self.opened = True

    def close(self) -> None:
        """Unsubscribe (nothing is asked or kept until opened again)."""
        if self.opened:
            self.broker.unsubscribe(self.account, [self._inbox, *self._events])
            self.opened = False
            self.advisories.clear()

    # -- in the publish path ---------------------------------------------------------------------

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        if sub is not self._inbox:
            self.advisories.append((time.time(), msg.payload))
            return True
        round_, _, endpoint = msg.subject[len(self.prefix) :].partition(b".")
        if round_ != b"%d" % self._round or len(self._answers) >= ANSWERS_MAX:
            return False
        self._answers.append((endpoint.decode("ascii", "replace"), msg.payload))
        self._arrived.set()
        return True

    # -- a round ---------------------------------------------------------------------------------

    def take_advisories(self) -> list[tuple[float, bytes]]:
        taken = list(self.advisories)
        self.advisories.clear()
        return taken

    def _complete(self, endpoints: Collection[str], expected: int) -> bool:
        if expected <= 0:
            return False
        counts = collections.Counter(endpoint for endpoint, _ in self._answers)
        return all(counts[endpoint] >= expected for endpoint in endpoints)

    async def ask(self, endpoints: Collection[str], expected: int) -> dict[str, list[dict[str, Any]]]:
        """One round: the ``endpoints`` (of ``REQUESTS``) asked of every node, answers collected
        until each has ``expected`` answers (plus ``GRACE``) or ``TIMEOUT``. Returns per endpoint
        the document of each answer that has one."""
        self._round += 1
        self._answers = []
        asked = [(endpoint, body) for endpoint, body in REQUESTS if endpoint in endpoints]
        for endpoint, body in asked:
            reply = f"{self.prefix}{self._round}.{endpoint}".encode()
            subject = f"$SYS.REQ.SERVER.PING.{endpoint}".encode()
            self.broker.publish(self.account, Message(subject, reply, None, body))
        with trio.move_on_after(TIMEOUT):
            while not self._complete(endpoints, expected):
                self._arrived = trio.Event()
                await self._arrived.wait()
            await trio.sleep(GRACE)
        answers, self._answers = self._answers, []
        self._round += 1  # (late answers to this round are not kept)
        found: dict[str, list[dict[str, Any]]] = {endpoint: [] for endpoint, _ in asked}
        for endpoint, payload in answers:
            data = _data(payload)
            if endpoint in found and data is not None:
                found[endpoint].append(data)
        return found


def _data(payload: bytes) -> dict[str, Any] | None:
    """An answer's document, with its sender's name as ``server_name`` and its envelope's
    ``server``; None for an error answer or anything that does not read as an answer."""
    try:
        envelope = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(envelope, dict):
        return None
    data, server = envelope.get("data", envelope.get("statsz")), envelope.get("server")
    if not isinstance(data, dict) or not isinstance(server, dict):
        return None
    name = server.get("name")
    if not isinstance(name, str) or not name:
        return None
    return data | {"server_name": name, "server": server}
