"""The command table a Redis connection dispatches requests by, as redis-server's command table:
one ``Command`` record per command (its name, arity, handler, flags and subcommands) and the
``CommandTable`` that finds them by name.

The records are generic in the connection their handlers take (``node.resp.connection``), so this
module knows nothing of it; the commands themselves are in ``node.resp.commands``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Generic, TypeVar

__all__ = ["FLAGS", "Command", "CommandTable"]

C = TypeVar("C")

FLAGS: Final = {
    "write": "changes keys (redis-server's flag): refused while the journal cannot be written",
    "readonly": "reads keys and changes nothing else (redis-server's flag)",
    "denyoom": "may add data (redis-server's flag): refused past ``maxmemory``",
    "admin": "administers the node (redis-server's flag): not shown to MONITOR clients",
    "no_auth": "runs before the client signs in (redis-server's flag)",
    "noscript": "refused to scripts (redis-server's flag)",
    "skip_monitor": "shown to MONITOR clients by its handler, before the commands it runs "
    "(redis-server's flag)",
    "on_keys": "answered as a command on keys is (``write`` and ``readonly`` imply it): its reply "
    "may wait on the journal's commit, and becomes the journal's error if that fails (EXEC, for "
    "what it runs)",
    "subscribed": "runs in RESP2's subscribed mode",
    "no_multi": "refused inside MULTI (redis-server's flag)",
    "unqueued": "runs at once inside MULTI rather than being queued",
    "ends_multi": "ends a transaction: runs at once inside MULTI, even past ``maxmemory``",
}
"""The flags a command may carry, and what each means. The last three stand for lists of commands
in redis-server's ``processCommand``."""


class Command(Generic[C]):
    """An entry of the command table.

    Args:
        name: lowercase; a subcommand's is ``container|sub`` (error texts quote it).
        arity: as redis-server checks it (negative: at least that many arguments, the name
            included).
        handler: what runs it, given the connection and the request's arguments (None: a
            container that needs a subcommand).
        flags: words of ``FLAGS`` separated by blanks, as redis-server's table wrote them.
        subcommands: a container's (CLIENT, XGROUP ...).
        keys: where its keys are, as redis-server's legacy key positions: the first key's
            index, the last's (negative: from the end), the step between them ((0, 0, 0): no
            keys at fixed places).

    The flags are also kept as booleans, read as each request is checked. Whether a request runs
    before sign-in, in subscribed mode, or at once inside MULTI, and whether it is on keys, goes by
    the flags of the command named first; whether it may add data or changes keys goes by those
    of its subcommand, if it has one.
    """

    __slots__ = (
        "admin",
        "arity",
        "denyoom",
        "ends_multi",
        "flags",
        "handler",
        "key",
        "keys",
        "name",
        "no_auth",
        "no_multi",
        "noscript",
        "on_keys",
        "queueable",
        "subcommands",
        "subscribed",
        "unmonitored",
        "writes",
    )

    def __init__(
        self,
        name: str,
        arity: int,
        handler: Callable[[C, list[bytes]], None] | None,
        flags: str = "",
        subcommands: Sequence[Command[C]] = (),
        *,
        keys: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        self.name = name
        self.keys = keys
        self.key = name.encode()
        self.arity = arity
        self.handler = handler
        self.flags = frozenset(flags.split())
        unknown = self.flags.difference(FLAGS)
        if unknown:
            raise ValueError(f"{name}: unknown flags {sorted(unknown)}")
        self.subcommands: dict[bytes, Command[C]] | None = (
            {sub.key.partition(b"|")[2]: sub for sub in subcommands} if subcommands else None
        )
        self.admin = "admin" in self.flags
        self.writes = "write" in self.flags
        self.on_keys = self.writes or bool(self.flags & {"readonly", "on_keys"})
        self.denyoom = "denyoom" in self.flags
        self.no_auth = "no_auth" in self.flags
        self.noscript = "noscript" in self.flags
        self.no_multi = "no_multi" in self.flags
        self.unmonitored = self.admin or "skip_monitor" in self.flags
        self.subscribed = "subscribed" in self.flags
        self.ends_multi = "ends_multi" in self.flags
        self.queueable = not (self.ends_multi or "unqueued" in self.flags)


class CommandTable(Generic[C]):
    """The commands a connection serves, in the order COMMAND lists them."""

    def __init__(self, commands: Iterable[Command[C]]) -> None:
        self.by_name: dict[bytes, Command[C]] = {command.key: command for command in commands}
        """By lowercase name."""
        self._as_sent = {**self.by_name, **{name.upper(): c for name, c in self.by_name.items()}}
        """By name as clients send it nearly always (all lowercase or all uppercase), so looking
        one up seldom needs a lowercased copy of the name."""

    def find(self, name: bytes) -> Command[C] | None:
        """The command called ``name`` (in any case), if there is one."""
        return self._as_sent.get(name) or self.by_name.get(name.lower())

    def __iter__(self) -> Iterator[bytes]:
        """The lowercase names."""
        return iter(self.by_name)

    def __len__(self) -> int:
        return len(self.by_name)
