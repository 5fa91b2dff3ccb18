"""Keyspace notifications, as redis-server 7.2 sends them: the publishing of one event (the classes
of events, and their ``notify-keyspace-events`` spelling, are ``node.config.keyspace_events``'s).

A write to a key announces what it did (``Database.notify``: a class and an event name such as
``xadd``) when ``notify-keyspace-events`` enables the class and at least one of ``K`` (keyspace) and
``E`` (keyevent): as a message on ``__keyspace@<db>__:<key>`` whose payload is the event's name,
and as one on ``__keyevent@<db>__:<event>`` whose payload is the key. Both are published in the
account that holds the key, through the node's ordinary publish path, so they reach Redis and NATS
subscribers and cross routes and gateways wherever someone is interested, like any channel.

**Subjects.** A channel is a subject (``routing.channels``): ``__keyevent@0__:xadd`` is a valid
literal subject (``@`` and ``:`` are ordinary characters in a token) and is used as it is, and so
is ``__keyspace@0__:<key>`` whenever it is one: a key with dots makes it several tokens
(``__keyspace@0__:orders.eu`` is two), so NATS clients may subscribe to ``__keyspace@0__:orders.>``.
A key with blanks, empty tokens or ``*``/``>`` tokens makes the channel a ``$R.``-hex subject,
which NATS clients cannot name but Redis clients subscribe to as usual.

**Cost.** With notifications off (the default) a write pays one test of ``Notifier.flags``. Events
caused by publishing an event (a stream capturing the notification subjects adds an entry, which
would announce itself again) are not announced: an event never begets another one.
"""

from __future__ import annotations

from collections.abc import Callable

from node.config.keyspace_events import (
    KEYEVENT,
    KEYSPACE,
)

__all__ = ["Notifier", "Publish"]

Publish = Callable[[str, bytes, bytes], None]
"""Publishes a message (account name, channel, payload) as PUBLISH would."""


class Notifier:
    """What ``notify-keyspace-events`` enables, and how events are published.

    ``flags`` is read on every write: 0 (nothing is sent, the default) unless both a class and a
    target are enabled, so one test tells whether anything is to be done; ``configured`` keeps the
    value as set, for CONFIG GET.
    """

    __slots__ = ("_emitting", "configured", "flags", "publish")

    def __init__(self) -> None:
        self.configured = 0
        self.flags = 0
        self.publish: Publish | None = None
        """Set by the node once it can publish (None: events go nowhere)."""
        self._emitting = False

    def configure(self, flags: int) -> None:
        self.configured = flags
        targets = flags & (KEYSPACE | KEYEVENT)
        self.flags = flags if targets and flags & ~(KEYSPACE | KEYEVENT) else 0

    def emit(self, account: str, db: int, event: bytes, key: bytes) -> None:
        """Publish ``event`` on ``key`` of database ``db`` of ``account`` (its class enabled)."""
        publish = self.publish
        if publish is None or self._emitting:
            return
        self._emitting = True
        try:
            if self.flags & KEYSPACE:
                publish(account, b"__keyspace@%d__:%b" % (db, key), event)
            if self.flags & KEYEVENT:
                publish(account, b"__keyevent@%d__:%b" % (db, event), key)
        finally:
            self._emitting = False
