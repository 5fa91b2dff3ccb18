"""Write ``node/resp/command_facts_data.py``: the facts COMMAND reports about each command the node
serves (group, version it appeared in, arity, flags, ACL categories, tips, key specs, the legacy
key range and the arguments' structure), read from redis-server's command descriptions (the JSON
files of its source tree's ``src/commands``).

Only facts are taken: no summary, complexity, history or note, which are prose. What redis-server
derives at start-up is derived here the same way, once: the flags COMMAND shows (in its order,
hidden ones left out) with ``movablekeys`` where the key specs are not one plain range, the
implicit ACL categories (``@write``, ``@read``, ``@slow`` ...), and the legacy first/last/step key
positions glued from the range specs.

Usage: ``python -m deploy.command_facts <redis source>/src/commands`` (then ``ruff format``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from node.resp.command_facts import Argument, CommandFacts, KeySpec
from node.resp.commands.table import COMMANDS

OUTPUT = Path(__file__).resolve().parent.parent / "node" / "resp" / "command_facts_data.py"

_SHOWN_FLAGS = (
    "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking", "loading",
    "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth", "no_mandatory_keys",
    "no_async_loading", "no_multi", "movablekeys", "allow_busy",
)  # fmt: skip
"""The command flags COMMAND INFO shows, in its order (the others are hidden)."""
_CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
    "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
    "connection", "transaction", "scripting",
)  # fmt: skip
"""The ACL categories, in the order COMMAND INFO lists them."""
_KEY_FLAGS = (
    "RO", "RW", "OW", "RM", "access", "update", "insert", "delete", "not_key", "incomplete",
    "variable_flags",
)  # fmt: skip
"""The key-spec flags, as COMMAND shows them and in its order."""


def _key_spec(spec: dict[str, Any]) -> KeySpec:
    given = {flag.lower() for flag in spec["flags"]}
    flags = tuple(flag for flag in _KEY_FLAGS if flag.lower() in given)
    begin = spec["begin_search"]
    if "index" in begin:
        start: tuple[str | int, ...] = ("index", begin["index"]["pos"])
    elif "keyword" in begin:
        start = ("keyword", begin["keyword"]["keyword"], begin["keyword"]["startfrom"])
    else:
        start = ("unknown",)
    find = spec["find_keys"]
    if "range" in find:
        how: tuple[str | int, ...] = (
            "range",
            find["range"]["lastkey"],
            find["range"]["step"],
            find["range"]["limit"],
        )
    elif "keynum" in find:
        keynum = find["keynum"]
        how = ("keynum", keynum["keynumidx"], keynum["firstkey"], keynum["step"])
    else:
        how = ("unknown",)
    return KeySpec(flags, start, how)


def _legacy_range(specs: list[KeySpec]) -> tuple[tuple[int, int, int], bool]:
    """The legacy (first, last, step) and whether the command has movable keys, as redis-server
    glues them from the range specs at start-up."""
    if not specs:
        return (0, 0, 0), False
    if len(specs) == 1 and specs[0].begin[0] == "index" and specs[0].find[0] == "range":
        spec = specs[0]
        pos, lastkey, step = int(spec.begin[1]), int(spec.find[1]), int(spec.find[2])
        last = lastkey + pos if lastkey >= 0 else lastkey
        return (pos, last, step), "incomplete" in spec.flags
    movable = False
    first, last, previous = 1 << 31, 0, 0
    for spec in specs:
        if spec.begin[0] != "index" or spec.find[0] != "range":
            movable = True
            continue
        pos, lastkey, step = int(spec.begin[1]), int(spec.find[1]), int(spec.find[2])
        if step != 1 or (previous and previous != pos - 1):
            movable = True
            continue
        movable = movable or "incomplete" in spec.flags
        first = min(first, pos)
        absolute = lastkey + pos if lastkey >= 0 else lastkey
        last = max(last % (1 << 32), absolute % (1 << 32))  # (unsigned, as redis-server compares)
        last = last - (1 << 32) if last >= 1 << 31 else last
        previous = last
    if first == 1 << 31:
        return (0, 0, 0), True
    return (first, last, 1), movable


def _arguments(given: list[dict[str, Any]]) -> tuple[Argument, ...]:
    return tuple(
        Argument(
            name=arg["name"],
            type=arg["type"],
            key_spec_index=arg.get("key_spec_index", -1),
            token=arg.get("token"),
            since=arg.get("since"),
            deprecated_since=arg.get("deprecated_since"),
            flags=tuple(f for f in ("optional", "multiple", "multiple_token") if arg.get(f)),
            arguments=_arguments(arg.get("arguments", [])),
            display=arg.get("display"),
        )
        for arg in given
    )


def facts_of(described: dict[str, Any]) -> CommandFacts:
    """One command's facts from its description."""
    specs = [_key_spec(spec) for spec in described.get("key_specs", [])]
    (first, last, step), movable = _legacy_range(specs)
    given = {flag.lower() for flag in described.get("command_flags", [])}
    if movable:
        given.add("movablekeys")
    flags = tuple(flag for flag in _SHOWN_FLAGS if flag in given)
    categories = {c.lower() for c in described.get("acl_categories", [])}
    if "write" in given:
        categories.add("write")
    if "readonly" in given and "scripting" not in categories:
        categories.add("read")
    if "admin" in given:
        categories |= {"admin", "dangerous"}
    for flag in ("pubsub", "fast", "blocking"):
        if flag in given:
            categories.add(flag)
    if "fast" not in categories:
        categories.add("slow")
    return CommandFacts(
        group=described["group"],
        since=described["since"],
        arity=described["arity"],
        flags=flags,
        categories=tuple(c for c in _CATEGORIES if c in categories),
        tips=tuple(tip.lower() for tip in described.get("command_tips", [])),
        key_specs=tuple(specs),
        legacy_keys=(first, last, step),
        variable_flags=any("variable_flags" in spec.flags for spec in specs),
        doc_flags=tuple(flag.lower() for flag in described.get("doc_flags", [])),
        deprecated_since=described.get("deprecated_since"),
        arguments=_arguments(described.get("arguments", [])),
    )


def _source(record: Any) -> str:
    """A record (or a tuple of them) as Python source, fields at their defaults left out."""
    if isinstance(record, tuple) and not hasattr(record, "_fields"):
        inner = ", ".join(_source(item) for item in record)
        return f"({inner},)" if len(record) == 1 else f"({inner})"
    if not hasattr(record, "_fields"):
        return repr(record)
    defaults = type(record)._field_defaults
    fields = [
        f"{name}={_source(value)}"
        for name, value in zip(record._fields, record, strict=True)
        if name not in defaults or value != defaults[name]
    ]
    return f"{type(record).__name__}({', '.join(fields)})"


def read_descriptions(directory: Path) -> dict[str, dict[str, Any]]:
    """Every description, by the name COMMAND uses (``container|sub`` for a subcommand)."""
    found = {}
    for path in sorted(directory.glob("*.json")):
        for name, described in json.loads(path.read_text()).items():
            container = described.get("container")
            key = f"{container}|{name}" if container else name
            found[key.lower()] = described
    return found


def served() -> list[str]:
    """The names of the commands and subcommands the node serves."""
    names = []
    for command in COMMANDS.by_name.values():
        names.append(command.name)
        names += [sub.name for sub in (command.subcommands or {}).values()]
    return names


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    descriptions = read_descriptions(Path(argv[0]))
    missing = [name for name in served() if name not in descriptions]
    if missing:
        print(f"no description of {missing}", file=sys.stderr)
        return 1
    lines = [
        '"""Generated by ``python -m deploy.command_facts`` from redis-server 7.2\'s command',
        'descriptions: facts only (see ``node.resp.command_facts``). Do not edit."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        "from node.resp.command_facts import Argument, CommandFacts, KeySpec",
        "",
        "FACTS: Final[dict[str, CommandFacts]] = {",
    ]
    for name in sorted(served()):
        lines.append(f"    {name!r}: {_source(facts_of(descriptions[name]))},")
    lines.append("}")
    OUTPUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUTPUT} ({len(served())} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
