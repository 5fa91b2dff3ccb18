"""What redis-server's command descriptions say of a command (COMMAND INFO, DOCS, GETKEYS and
GETKEYSANDFLAGS report it), as records, and finding a request's keys by its key specs.

The facts themselves are generated into ``node.resp.command_facts_data`` (``deploy.command_facts``)
for the commands the node serves. A key spec says where a command's keys begin (at an index, or
after a keyword searched for from an index on, or back from the end) and how many follow (a range
to an index or back from the end, possibly a fraction of what is left; or a count given by an
argument), with the flags of those keys: ``RO``/``RW``/``OW``/``RM`` and ``access``, ``update``,
``insert``, ``delete``. ``keys_by_specs`` reads a request's keys as redis-server's
``getKeysUsingKeySpecs`` does; a command whose keys' flags depend on its arguments
(``variable_flags``: SET with or without GET) has them worked out by ``variable_key_flags``.
"""

from __future__ import annotations

from typing import NamedTuple

from node.integers import string2ll

__all__ = ["Argument", "CommandFacts", "KeySpec", "keys_by_specs", "variable_key_flags"]


class KeySpec(NamedTuple):
    """Where some of a command's keys are, and what it does with them."""

    flags: tuple[str, ...]
    """As COMMAND shows them (``RW``, ``access`` ...), in its order."""
    begin: tuple[str | int, ...]
    """``("index", pos)``, ``("keyword", word, startfrom)`` or ``("unknown",)``."""
    find: tuple[str | int, ...]
    """``("range", lastkey, step, limit)``, ``("keynum", keynumidx, firstkey, step)`` or
    ``("unknown",)``."""


class Argument(NamedTuple):
    """One argument of a command's syntax (COMMAND DOCS)."""

    name: str
    type: str
    """``string``, ``integer``, ``double``, ``key``, ``pattern``, ``unix-time``, ``pure-token``,
    ``oneof`` or ``block`` (the last two have ``arguments``)."""
    key_spec_index: int = -1
    token: str | None = None
    since: str | None = None
    deprecated_since: str | None = None
    flags: tuple[str, ...] = ()
    """``optional``, ``multiple``, ``multiple_token``."""
    arguments: tuple[Argument, ...] = ()
    display: str | None = None


class CommandFacts(NamedTuple):
    """A command's facts, as redis-server 7.2 reports them."""

    group: str
    since: str
    arity: int
    flags: tuple[str, ...]
    """COMMAND INFO's flags, in its order (``movablekeys`` included where it applies)."""
    categories: tuple[str, ...]
    """ACL categories without the ``@``, the implicit ones included, in COMMAND INFO's order."""
    tips: tuple[str, ...]
    key_specs: tuple[KeySpec, ...]
    legacy_keys: tuple[int, int, int]
    """The first key, the last (negative: from the end) and the step, as COMMAND INFO shows them."""
    variable_flags: bool
    """Whether the keys' flags depend on the arguments (``variable_key_flags``)."""
    doc_flags: tuple[str, ...]
    deprecated_since: str | None
    arguments: tuple[Argument, ...]


def keys_by_specs(facts: CommandFacts, args: list[bytes]) -> list[tuple[int, tuple[str, ...]]] | None:
    """Where the keys of a request (``args``: the command's name first) are, with their flags;
    None if a spec cannot be followed on these arguments (as redis-server, then no keys at all)."""
    found: list[tuple[int, tuple[str, ...]]] = []
    count = len(args)
    for spec in facts.key_specs:
        if "not_key" in spec.flags:
            continue
        kind = spec.begin[0]
        if kind == "index":
            first = int(spec.begin[1])
        elif kind == "keyword":
            first = _after_keyword(args, str(spec.begin[1]), int(spec.begin[2]))
            if not first:
                continue
        else:
            return None
        how = spec.find[0]
        if how == "range":
            lastkey, step, limit = (int(n) for n in spec.find[1:])
            if lastkey >= 0:
                last = first + lastkey
            elif not limit:
                last = count + lastkey
            else:
                last = first + ((count - first) // limit + lastkey)
        elif how == "keynum":
            keynumidx, firstkey, step = (int(n) for n in spec.find[1:])
            if first + keynumidx >= count:
                return None
            number = string2ll(args[first + keynumidx])
            if number is None or number < 0:
                return None
            first += firstkey
            last = first + number - 1
        else:
            return None
        if last >= count or last < first or first >= count:
            return None
        found += [(i, spec.flags) for i in range(first, last + 1, step)]
        if "incomplete" in spec.flags:
            return None
    return found


def _after_keyword(args: list[bytes], keyword: str, startfrom: int) -> int:
    """The index after ``keyword`` searched for from ``startfrom`` on (back from the end when
    negative), but not in the last argument (nor the first); 0 if it is not there."""
    count = len(args)
    word = keyword.encode().lower()
    places = range(startfrom, count - 1) if startfrom > 0 else range(count + startfrom, 1, -1)
    for i in places:
        if args[i].lower() == word:
            return i + 1
    return 0


def variable_key_flags(name: str, args: list[bytes]) -> list[tuple[int, tuple[str, ...]]]:
    """The keys of a command whose keys' flags depend on its arguments, with those flags: SET's
    key is read too when GET is given (``RW access update``), else only overwritten
    (``OW update``)."""
    if name == "set":
        reads = any(arg.lower() == b"get" for arg in args[3:])
        return [(1, ("RW", "access", "update") if reads else ("OW", "update"))]
    raise ValueError(f"{name}: no rule for its keys' flags")
