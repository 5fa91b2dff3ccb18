"""WATCH of keys led by another node: the leader watches them for the client.

A client's WATCH of keys its node does not lead travels to the keys' leader (a ``KEYS`` request of
``WATCH key ...``), which watches them as its own clients' watches are kept (``node.data.keyspace``:
any change to one spoils the watch, a change applied from the log or a rebuild of the keys
included) under a token it answers with (``+<server name>/<random>``). The client's node keeps the
tokens in the connection's transaction (``Watched``); its EXEC carries them to the leader with the
queued commands (``pack_transaction``), and the leader runs the transaction only if every token is
known to it and unspoiled, else answers EXEC's null, as redis-server does for a watched key that
changed. Either way the tokens are used up. UNWATCH, DISCARD, RESET, an EXEC answered on the
client's node and the client's leaving release them: an ``UNWATCH token ...`` request to the node
that made them, which answers nothing.

An empty transaction (MULTI then EXEC, nothing queued) names no key to route by: its EXEC goes
to the node that made the tokens, which answers the empty array only if it still leads their keys
(confirmed by its group, as for a read) and none of them changed, else null.

A leader that is replaced between WATCH and EXEC never saw the tokens its successor is asked for:
the EXEC is answered null (the client retries, as after any change), never run unchecked. Tokens
are random, so a token from before a restart matches nothing. A node keeps at most
``MOST_WATCHES``: past that its oldest watch is dropped, and the EXEC that counted on it is
answered null (memory stays bounded whatever peers ask).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from functools import partial

from cluster.frames import KeysRequest
from cluster.placement import Layout, SlotGroup, hash_slot
from node.data.keyspace import Database
from node.replicated.asking import Send
from node.replicated.forwarded import (
    CLUSTERDOWN,
    CROSSSLOT,
    pack_transaction,
    request_keys,
    split_watched,
)
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, RESP2, RESP3, error

__all__ = [
    "MOST_WATCHES",
    "WATCH_ELSEWHERE",
    "RemoteWatches",
    "Watched",
    "Watching",
    "creator",
    "token_of",
]

WATCH_ELSEWHERE = "ERR a transaction watching keys, on keys led by another node"
"""An EXEC refused: its connection watches keys of two groups, or of one here and one elsewhere."""

MOST_WATCHES = 65_536
"""Watches a leader keeps for clients of other nodes at most."""
_TOKEN_BYTES = 12


class _Watch:
    """One WATCH made for a client of another node (a ``Watcher`` of its keys)."""

    __slots__ = ("database", "dirty", "keys")

    def __init__(self, database: Database, keys: list[bytes]) -> None:
        self.database = database
        self.keys = keys
        self.dirty = False

    def drop(self) -> None:
        for key in self.keys:
            self.database.unwatch(key, self)


class RemoteWatches:
    """The watches this node keeps for clients of other nodes, by token."""

    def __init__(self, node: str) -> None:
        self._prefix = node.encode() + b"/"
        self._watches: dict[bytes, _Watch] = {}

    def __len__(self) -> int:
        return len(self._watches)

    def watch(self, database: Database, keys: list[bytes]) -> bytes:
        """Watch ``keys`` of ``database``: the token that names the watch."""
        while len(self._watches) >= MOST_WATCHES:
            self._watches.pop(next(iter(self._watches))).drop()
        token = self._prefix + secrets.token_hex(_TOKEN_BYTES).encode()
        watch = self._watches[token] = _Watch(database, keys)
        for key in keys:
            database.watch(key, watch)
        return token

    def intact(self, tokens: list[bytes]) -> bool:
        """Whether every watch named is known here and none of its keys changed; the watches are
        used up either way."""
        intact = True
        for token in tokens:
            watch = self._watches.pop(token, None)
            if watch is None:
                intact = False
                continue
            watch.drop()
            intact = intact and not watch.dirty
        return intact

    def release(self, tokens: list[bytes]) -> None:
        """Forget the watches named (unknown tokens are ignored)."""
        for token in tokens:
            watch = self._watches.pop(token, None)
            if watch is not None:
                watch.drop()

    def key_of(self, token: bytes) -> bytes | None:
        """A key the watch named watches (None: no such watch here)."""
        watch = self._watches.get(token)
        return watch.keys[0] if watch is not None else None


def token_of(reply: bytes) -> bytes | None:
    """The token in a leader's answer to a forwarded WATCH (None: the answer is not one)."""
    if reply.startswith(b"+") and reply.endswith(b"\r\n") and b"/" in reply:
        return reply[1:-2]
    return None


def creator(token: bytes) -> str:
    """The server name of the node that made ``token``."""
    return token.rpartition(b"/")[0].decode(errors="replace")


class Watched:
    """The keys one connection WATCHes on other nodes: their replica group and the tokens the
    leaders answered (``node.resp.transaction.Transaction.remote``)."""

    __slots__ = ("_release", "group", "tokens")

    def __init__(self, group: str, release: Callable[[list[bytes]], None]) -> None:
        self.group = group
        self.tokens: list[bytes] = []
        self._release = release

    def take(self) -> list[bytes]:
        """The tokens, for an EXEC that uses them up (they are not released after)."""
        tokens, self.tokens = self.tokens, []
        return tokens

    def release(self) -> None:
        """The watch ends without an EXEC that uses it: the leaders may forget it."""
        if self.tokens:
            self._release(self.take())


Forward = Callable[[SlotGroup, KeysRequest], Awaitable[bytes]]
"""Has a group's leader carry out a request: its reply (``KeyRouter.forward``)."""
Ask = Callable[[str, KeysRequest], Awaitable[bytes]]
"""Has one node, by server name, answer a request itself: its reply (``KeyRouter.ask``)."""
Barrier = Callable[[SlotGroup], Awaitable[bool]]
"""Whether this node still leads a group, confirmed by a majority of it (a read barrier)."""


class Watching:
    """Both sides of WATCH across nodes, for the command path (``node.replicated.path``).

    Args:
        node: this node's server name.
        layout: the keys' placement.
        send: sends a frame to a route peer by server name.
        leads: whether this node leads a group and may run its commands now.
        forward: has a group's leader carry out a request.
        ask: has one node answer a request (an empty transaction: the watches' maker).
        barrier: confirms this node still leads a group.
    """

    def __init__(
        self,
        node: str,
        layout: Layout,
        *,
        send: Send,
        leads: Callable[[SlotGroup], bool],
        forward: Forward,
        ask: Ask,
        barrier: Barrier,
    ) -> None:
        self.node = node
        self.layout = layout
        self._send = send
        self._leads = leads
        self._forward = forward
        self._ask = ask
        self._barrier = barrier
        self.kept = RemoteWatches(node)
        """Keys watched here for clients of other nodes."""

    # -- the client's node ------------------------------------------------------------------------

    def watch(self, conn: RespConnection, keys: list[bytes]) -> bool:
        """WATCH: False when this node leads the keys (watched here, as without replicas); else
        the keys' leader is asked to watch them."""
        slots = {hash_slot(key) for key in keys}
        if len(slots) > 1:
            conn.error(CROSSSLOT)
            return True
        group = self.layout.group_of_slot(slots.pop())
        if self._leads(group):
            return False
        conn.awaiting = partial(self._watch_at_leader, conn, group, keys)
        return True

    async def _watch_at_leader(self, conn: RespConnection, group: SlotGroup, keys: list[bytes]) -> None:
        request = KeysRequest(0, conn.account.name, conn.db, 0, [b"WATCH", *keys])
        reply = await self._forward(group, request)
        token = token_of(reply)
        if token is None:
            conn.reply(reply if reply.startswith(b"-") else error(CLUSTERDOWN))
            return
        if conn.closing is not None:  # (the client left meanwhile: nothing will use the watch)
            self.release([token])
            return
        transaction = conn.transaction
        remote = transaction.remote
        if not isinstance(remote, Watched):
            remote = transaction.remote = Watched(group.name, self.release)
        elif remote.group != group.name:
            remote.group = ""  # (watches in several groups: no EXEC can count on them all)
        remote.tokens.append(token)
        conn.reply(OK)

    def exec(self, conn: RespConnection, command: Command[RespConnection]) -> bool:
        """EXEC of a connection that WATCHes keys led elsewhere: it runs where they are watched
        (False: answered as anywhere, here)."""
        transaction = conn.transaction
        remote = transaction.remote
        assert isinstance(remote, Watched)
        if transaction.queued is None or transaction.failed or transaction.dirty:
            return False  # (no MULTI, EXECABORT, or a null array)
        keys = [key for queued in transaction.queued for key in request_keys(queued)]
        slots = {hash_slot(key) for key in keys}
        if len(slots) > 1:
            conn.reject(command, CROSSSLOT)
            return True
        group = self.layout.group_of_slot(slots.pop()) if slots else None
        if transaction.watching or not remote.group or (group and group.name != remote.group):
            conn.reject(command, WATCH_ELSEWHERE)
            return True
        tokens = remote.take()
        args = pack_transaction(transaction.queued, tokens)
        transaction.discard()
        request = KeysRequest(0, conn.account.name, conn.db, 0, args, conn.writer.version)
        if group is None:  # (an empty transaction: the node that made the watches answers)
            conn.awaiting = partial(self._exec_at_maker, conn, creator(tokens[0]), request)
        else:
            conn.awaiting = partial(self._exec_at_leader, conn, group, request)
        return True

    async def _exec_at_leader(self, conn: RespConnection, group: SlotGroup, exec: KeysRequest) -> None:
        conn.reply(await self._forward(group, exec))

    async def _exec_at_maker(self, conn: RespConnection, maker: str, exec: KeysRequest) -> None:
        if maker == self.node:
            watched, _ = split_watched(exec.args)
            conn.reply(await self.settle(watched, exec.protocol))
        else:
            conn.reply(await self._ask(maker, exec))

    def release(self, tokens: list[bytes]) -> None:
        """Have the nodes that made the tokens forget their watches."""
        for token in tokens:
            made_by = creator(token)
            if made_by == self.node:
                self.kept.release([token])
            else:
                self._send(made_by, KeysRequest(0, "", 0, 0, [b"UNWATCH", token]))

    # -- the leader -------------------------------------------------------------------------------

    def keep(self, database: Database, keys: list[bytes]) -> bytes:
        """A forwarded WATCH: watch the keys here for the client; the reply names the watch."""
        return b"+%s\r\n" % self.kept.watch(database, keys)

    async def settle(self, watched: list[bytes], protocol: int) -> bytes:
        """EXEC of an empty transaction that counts on watches made here: the array of no
        replies if this node still leads their keys (confirmed by its group, as for a read) and
        none of them changed; else null, as for any EXEC once the leader changed."""
        key = self.kept.key_of(watched[0]) if watched else None
        group = self.layout.group_of(key) if key is not None else None
        if group is None or not self._leads(group) or not await self._barrier(group):
            self.release(watched)
            return (RESP3 if protocol == 3 else RESP2).null_array
        return self.checked(watched, [b"EXEC"], protocol) or b""

    def checked(self, watched: list[bytes], args: list[bytes], protocol: int) -> bytes | None:
        """The answer to a forwarded EXEC that counts on watches, which it uses up (None: run
        it): null if one was not made here or is spoiled; an empty transaction's array."""
        made_here = [token for token in watched if creator(token) == self.node]
        intact = self.kept.intact(made_here) and len(made_here) == len(watched)
        self.release([token for token in watched if token not in made_here])
        if not intact:
            return (RESP3 if protocol == 3 else RESP2).null_array
        return b"*0\r\n" if len(args) == 1 else None  # (an empty transaction: nothing to run)
