"""Client-side caching's server half (CLIENT TRACKING), as redis-server 7.2 does it: which clients
may hold which keys, and the invalidation messages a change to one of them sends.

**Modes.** In the default mode the keys a tracking client reads (the key arguments of the read-only
commands of ``KEY_POSITIONS``) are remembered with its id; the next change to such a key sends one
invalidation to each client remembered for it, and forgets them. OPTIN remembers only the reads of
a command after ``CLIENT CACHING yes`` (OPTOUT: all but those after ``CLIENT CACHING no``). In BCAST
mode nothing is remembered: every change to a key that starts with one of the client's prefixes
(the empty prefix by default) is sent, the keys changed by one batch of a client's requests
gathered into one message per prefix.
NOLOOP leaves out the changes the client made itself. FLUSHDB and FLUSHALL send every tracking
client of the account a null invalidation ("everything").

**Messages.** A RESP3 client gets ``>2 invalidate [keys]`` pushes. With ``REDIRECT id`` they go to
that connection instead: as pushes if it speaks RESP3, else (RESP2) as ``message`` deliveries on
``__redis__:invalidate`` when it is in subscribed mode; if it has gone, the tracking client (in
RESP3) gets ``>2 tracking-redir-broken id`` each time an invalidation is due. An invalidation due
to the client whose command made the change goes after that command's reply (the connection holds
pushes made while a command runs).

**Where changes come from.** Every change to a key reaches ``Database.touch`` (commands, expiry
lazy and active, stream capture, journal replay), which tells the node's ``Tracker`` while any
client tracks (``Keyspaces.tracker``; None otherwise, so a write then pays one test). Keys are
remembered per account (each account has its own keys) and, as in redis-server, whatever the
database. The table holds at most ``Keyspaces.tracking_max_keys`` keys (``tracking-table-max-keys``):
past it the oldest remembered keys are invalidated and forgotten, as redis-server evicts them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from node.data.keyspaces import Keyspaces
from node.resp.writer import Writer

__all__ = [
    "KEY_POSITIONS",
    "ClientTracking",
    "Tracker",
    "TrackingClient",
    "info",
    "keys_of",
]

KEY_POSITIONS: Final[dict[bytes, tuple[int, int, int]]] = {
    b"get": (1, 1, 1),
    b"strlen": (1, 1, 1),
    b"getrange": (1, 1, 1),
    b"substr": (1, 1, 1),
    b"getbit": (1, 1, 1),
    b"mget": (1, -1, 1),
    b"lcs": (1, 2, 1),
    b"exists": (1, -1, 1),
    b"type": (1, 1, 1),
    b"ttl": (1, 1, 1),
    b"pttl": (1, 1, 1),
    b"xlen": (1, 1, 1),
    b"xrange": (1, 1, 1),
    b"xrevrange": (1, 1, 1),
    b"xpending": (1, 1, 1),
    b"xinfo|stream": (2, 2, 1),
    b"xinfo|groups": (2, 2, 1),
    b"xinfo|consumers": (2, 2, 1),
}
"""The read-only commands whose keys a tracking client's reads remember (redis-server's
``CMD_READONLY`` commands with keys), by name (a subcommand's as ``container|sub``): the first key
argument, the last (negative: counted from the end), and the step between them. XREAD's keys are
found after its STREAMS word (``keys_of``)."""

_INVALIDATE: Final = b">2\r\n$10\r\ninvalidate\r\n"
_CHANNEL_MESSAGE: Final = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n"


def keys_of(name: bytes, args: list[bytes]) -> list[bytes]:
    """The keys a read-only command named ``name`` reads (none for a command not tracked)."""
    if name == b"xread":
        for i in range(1, len(args)):
            if args[i].lower() == b"streams":
                rest = args[i + 1 :]
                return rest[: len(rest) // 2]
        return []
    positions = KEY_POSITIONS.get(name)
    if positions is None:
        return []
    first, last, step = positions
    if last < 0:
        last += len(args)
    return args[first : last + 1 : step]


def info(keyspaces: Keyspaces) -> dict[str, int]:
    """INFO's tracking fields: ``tracking_clients`` (its Clients section) and the
    ``tracking_total_keys``, ``tracking_total_items`` and ``tracking_total_prefixes`` of its Stats
    section."""
    tracker = keyspaces.tracker
    if not isinstance(tracker, Tracker):
        tracker = None
    return {
        "tracking_clients": len(tracker.clients) if tracker else 0,
        "tracking_total_keys": tracker.total_keys if tracker else 0,
        "tracking_total_items": tracker.items if tracker else 0,
        "tracking_total_prefixes": tracker.total_prefixes if tracker else 0,
    }


def _keys(keys: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(keys) + b"".join(b"$%d\r\n%b\r\n" % (len(k), k) for k in keys)


class ClientTracking:
    """One connection's CLIENT TRACKING state (while tracking is on)."""

    __slots__ = (
        "account",
        "bcast",
        "broken",
        "caching",
        "noloop",
        "optin",
        "optout",
        "prefixes",
        "redirect",
    )

    def __init__(self, account: str, redirect: int) -> None:
        self.account = account
        """The account whose keys are tracked (that of the connection when tracking began)."""
        self.redirect = redirect
        """The connection invalidations go to (0: this one)."""
        self.bcast = self.optin = self.optout = self.noloop = False
        self.broken = False
        """The redirect connection has gone."""
        self.caching = False
        """CLIENT CACHING was given for the next command (or transaction)."""
        self.prefixes: dict[bytes, None] = {}
        """BCAST's prefixes, in the order given."""

    def flags(self) -> list[bytes]:
        """CLIENT TRACKINGINFO's flags, in redis-server's order."""
        flags = [b"on"]
        if self.bcast:
            flags.append(b"bcast")
        if self.optin:
            flags += [b"optin", b"caching-yes"] if self.caching else [b"optin"]
        if self.optout:
            flags += [b"optout", b"caching-no"] if self.caching else [b"optout"]
        if self.noloop:
            flags.append(b"noloop")
        if self.broken:
            flags.append(b"broken_redirect")
        return flags


class TrackingClient(Protocol):
    """What the tracker needs of a connection."""

    cid: int
    tracking: ClientTracking | None
    writer: Writer

    @property
    def subscribed(self) -> bool: ...

    def push_out(self, data: bytes) -> None:
        """Send ``data`` out of band (after the reply of a command running now)."""
        ...


class _Prefix:
    """The clients tracking one BCAST prefix, and the keys with it changed since the last send
    (key -> id of the client whose command changed it, 0: none)."""

    __slots__ = ("clients", "keys")

    def __init__(self) -> None:
        self.clients: dict[int, TrackingClient] = {}
        self.keys: dict[bytes, int] = {}


class Tracker:
    """The node's tracking tables (a ``KeyTracker`` for ``Keyspaces``).

    Args:
        keyspaces: whose changes it hears of while any client tracks.
        lookup: the connection with an id, if it is still there (a redirect's target).
    """

    def __init__(self, keyspaces: Keyspaces, lookup: Callable[[int], TrackingClient | None]) -> None:
        self.keyspaces = keyspaces
        self.lookup = lookup
        self.clients: dict[int, TrackingClient] = {}
        """The connections with tracking on."""
        self.keys: dict[str, dict[bytes, dict[int, None]]] = {}
        """Account -> key -> the ids of the clients that may hold it, in the order remembered."""
        self.items = 0
        """(key, client) pairs remembered (INFO's ``tracking_total_items``)."""
        self.prefixes: dict[str, dict[bytes, _Prefix]] = {}
        """Account -> BCAST prefix -> who tracks it."""
        self.current: TrackingClient | None = None
        """The connection whose command runs now (None: a change made by no client)."""

    # -- counters (INFO) -------------------------------------------------------------------------

    @property
    def total_keys(self) -> int:
        """Keys remembered (INFO's ``tracking_total_keys``)."""
        return sum(len(table) for table in self.keys.values())

    @property
    def total_prefixes(self) -> int:
        """BCAST prefixes tracked (INFO's ``tracking_total_prefixes``)."""
        return sum(len(table) for table in self.prefixes.values())

    # -- clients ---------------------------------------------------------------------------------

    def enable(self, client: TrackingClient, state: ClientTracking, prefixes: list[bytes]) -> None:
        """Turn tracking on for ``client`` (or change its options), with BCAST's new prefixes."""
        old = client.tracking
        if old is not None:
            state.account, state.prefixes, state.caching = old.account, old.prefixes, old.caching
        client.tracking = state
        self.clients[client.cid] = client
        self.keyspaces.tracker = self
        if state.bcast:
            table = self.prefixes.setdefault(state.account, {})
            for prefix in prefixes or [b""]:
                table.setdefault(prefix, _Prefix()).clients[client.cid] = client
                state.prefixes[prefix] = None

    def disable(self, client: TrackingClient) -> None:
        """Turn tracking off for ``client`` (what it was remembered for is skipped when due)."""
        state = client.tracking
        if state is None:
            return
        client.tracking = None
        self.clients.pop(client.cid, None)
        table = self.prefixes.get(state.account)
        if table is not None:
            for prefix in state.prefixes:
                entry = table.get(prefix)
                if entry is not None:
                    entry.clients.pop(client.cid, None)
                    if not entry.clients:
                        del table[prefix]
            if not table:
                del self.prefixes[state.account]
        if not self.clients:  # (nobody left to tell: writes stop paying for the tables)
            self.keys.clear()
            self.items = 0
            self.prefixes.clear()
            if self.keyspaces.tracker is self:
                self.keyspaces.tracker = None

    # -- reads -----------------------------------------------------------------------------------

    def remember(self, client: TrackingClient, name: bytes, args: list[bytes]) -> None:
        """``client`` ran the command ``name``: remember the keys it read, if it tracks them."""
        state = client.tracking
        if state is None or state.bcast:
            return
        if (state.optin and not state.caching) or (state.optout and state.caching):
            return
        keys = keys_of(name, args)
        if not keys:
            return
        table = self.keys.setdefault(state.account, {})
        cid = client.cid
        for key in keys:
            ids = table.get(key)
            if ids is None:
                ids = table[key] = {}
            if cid not in ids:
                ids[cid] = None
                self.items += 1
        limit = self.keyspaces.tracking_max_keys
        if limit and (len(table) > limit or (len(self.keys) > 1 and self.total_keys > limit)):
            self.limit()

    def limit(self) -> None:
        """Invalidate the oldest keys remembered until no more than ``tracking_max_keys`` are."""
        limit = self.keyspaces.tracking_max_keys
        if not limit:
            return
        current, self.current = self.current, None
        try:
            for table in self.keys.values():
                while table and self.total_keys > limit:
                    self._invalidate(table, next(iter(table)))
        finally:
            self.current = current

    # -- changes (the KeyTracker side) -----------------------------------------------------------

    def changed(self, account: str, key: bytes) -> None:
        prefixes = self.prefixes.get(account)
        if prefixes:
            writer = self.current.cid if self.current is not None else 0
            for prefix, entry in prefixes.items():
                if key.startswith(prefix):
                    entry.keys[key] = writer
            if self.current is None:
                self.send_broadcasts()
        table = self.keys.get(account)
        if table and key in table:
            self._invalidate(table, key)

    def _invalidate(self, table: dict[bytes, dict[int, None]], key: bytes) -> None:
        ids = table.pop(key)
        self.items -= len(ids)
        message = b"*1\r\n$%d\r\n%b\r\n" % (len(key), key)
        for cid in ids:
            target = self.clients.get(cid)
            if target is None:
                continue
            state = target.tracking
            if state is None or state.bcast or (state.noloop and target is self.current):
                continue
            self._send(target, state, message)

    def flushed(self, account: str) -> None:
        table = self.keys.pop(account, None)
        if table:
            self.items -= sum(len(ids) for ids in table.values())
        for client in list(self.clients.values()):
            state = client.tracking
            if state is not None and state.account == account:
                self._send(client, state, client.writer.null)

    def send_broadcasts(self) -> None:
        """Send BCAST clients the keys with their prefixes changed since the last time (called
        once a client's batch of requests has run, as redis-server sends them before it next
        waits for input, and at once for a change no command made): prefix by prefix and key by
        key in byte order, as redis-server's radix trees hold them."""
        for table in self.prefixes.values():
            due = sorted((item for item in table.items() if item[1].keys), key=lambda item: item[0])
            for _, entry in due:
                keys, entry.keys = entry.keys, {}
                order = sorted(keys)
                everything = _keys(order)
                for client in list(entry.clients.values()):
                    state = client.tracking
                    if state is None:
                        continue
                    if state.noloop:
                        theirs = [key for key in order if keys[key] != client.cid]
                        if theirs:
                            self._send(client, state, _keys(theirs))
                    else:
                        self._send(client, state, everything)

    def _send(self, client: TrackingClient, state: ClientTracking, payload: bytes) -> None:
        """One invalidation message (``payload``: an encoded array of keys, or a null)."""
        target = client
        if state.redirect:
            found = self.lookup(state.redirect)
            if found is None:
                state.broken = True
                if client.writer.version == 3:
                    client.push_out(b">2\r\n$21\r\ntracking-redir-broken\r\n:%d\r\n" % state.redirect)
                return
            target = found
        if target.writer.version == 3:
            target.push_out(_INVALIDATE + payload)
        elif target is not client and target.subscribed:
            target.push_out(_CHANNEL_MESSAGE + payload)
