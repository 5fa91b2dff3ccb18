"""CONFIG (GET, SET, RESETSTAT, REWRITE, HELP) over the registry of the parameters that mean
something on this node, as redis-server 7.2 answers it.

Each ``Param`` has a name (and aliases), reads its value from the node, and (unless it is
immutable) checks a new value, returning either redis-server's error text or what applies it. CONFIG
SET checks every name first (unknown, immutable, given twice: the first fault wins), then every
value, and applies them only if all are good: all or nothing.

CONFIG REWRITE: redis-server rewrites its ``redis.conf``; a node's configuration file is TOML or
nats-server's format, holding far more than these parameters, so it is never rewritten: the
command answers redis-server's error for a server without a configuration file when there is
none, and that rewriting failed otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from node.broker import Broker
from node.config.keyspace_events import INVALID, format_flags, parse_flags
from node.integers import string2ll
from node.redis_listeners import Rebind
from node.resp.commands.common import help_reply
from node.resp.commands.memory import POLICY, parse_memory, set_maxmemory
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.parser import MAX_BULK_LEN
from node.resp.tracking import Tracker
from node.resp.writer import OK, bulk
from routing import glob_match

__all__ = ["COMMANDS", "PARAMS", "Param"]

Apply = Callable[[], None]
Check = Callable[[Broker, bytes], "Apply | str"]
"""Checks a value: what applies it, or the error text."""

_LLONG_MAX: Final = 2**63 - 1
_SSIZE_MAX: Final = 2**63 - 1
_INT_MAX: Final = 2**31 - 1
_POLICIES: Final = (
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
)


class Param:
    """A parameter: ``get`` shows its value; ``check`` vets a new one. Without ``check``, a
    parameter redis-server never changes while it runs is ``immutable``; the others come from the
    node's configuration and may only be set to the value they have."""

    __slots__ = ("check", "get", "hidden", "immutable", "names")

    def __init__(
        self,
        names: Sequence[str],
        get: Callable[[Broker], bytes],
        check: Check | None = None,
        *,
        immutable: bool = False,
        hidden: bool = False,
    ) -> None:
        self.names = [name.encode() for name in names]
        self.get = get
        self.check = check if check is not None else _unchanged(get)
        self.immutable = immutable
        self.hidden = hidden
        """Shown by CONFIG GET only when asked for by name (a testing knob of redis-server's)."""


def _unchanged(get: Callable[[Broker], bytes]) -> Check:
    def check(broker: Broker, value: bytes) -> Apply | str:
        if value.lower() != get(broker).lower():
            return "the node's configuration sets it, and it cannot change while the node runs"
        return lambda: None

    return check


def _integer(
    low: int, high: int, store: Callable[[Broker, int], None], *, memory: bool = False
) -> Check:
    """A number (a memory value with ``memory``) between ``low`` and ``high``."""

    def check(broker: Broker, value: bytes) -> Apply | str:
        number = parse_memory(value) if memory else string2ll(value)
        if number is None:
            return (
                "argument must be a memory value"
                if memory
                else "argument couldn't be parsed into an integer"
            )
        if not low <= number <= high:
            return f"argument must be between {low} and {high} inclusive"
        return lambda: store(broker, number)

    return check


def _client_memory(broker: Broker, value: bytes) -> Apply | str:
    """``maxmemory-clients``: checked as redis-server checks it (bytes, or a percentage of
    ``maxmemory`` up to 100); no client is ever evicted here, so only 0 is taken."""
    number = parse_memory(value)
    if number is None:
        percent = string2ll(value[:-1]) if len(value) > 1 and value.endswith(b"%") else None
        if percent is None or percent < 0:
            return "argument must be a memory or percent value"
        if percent > 100:
            return "percentage argument must be less or equal to 100"
        number = percent
    elif number > _SSIZE_MAX:
        return f"argument must be between -100 and {_SSIZE_MAX} inclusive"
    if number:
        return "client eviction is not supported"
    return lambda: None


def _query_buffer_limit(broker: Broker, value: int) -> None:
    broker.redis_settings.query_buffer_limit = value
    for client in broker.clients.values():
        if isinstance(client, RespConnection):
            client.parser.max_request = value


def _enum(choices: Sequence[str], store: Callable[[Broker, str], None]) -> Check:
    def check(broker: Broker, value: bytes) -> Apply | str:
        word = value.decode("latin-1").lower()
        if word not in choices:
            return f"argument(s) must be one of the following: {', '.join(choices)}"
        return lambda: store(broker, word)

    return check


def _policy(broker: Broker, value: bytes) -> Apply | str:
    word = value.decode("latin-1").lower()
    if word not in _POLICIES:
        return f"argument(s) must be one of the following: {', '.join(_POLICIES)}"
    if word != POLICY.decode():
        return "only noeviction is supported"
    return lambda: None


def _appendonly(broker: Broker, value: bytes) -> Apply | str:
    word = value.lower()
    if word not in (b"yes", b"no"):
        return "argument must be 'yes' or 'no'"
    if (word == b"yes") != (broker.keyspaces.store is not None):
        return "the append only file is kept exactly when the node has a store directory"
    return lambda: None


def _notify(broker: Broker, value: bytes) -> Apply | str:
    flags = parse_flags(value)
    if flags is None:
        return INVALID
    return lambda: broker.keyspaces.notifier.configure(flags)


def _busy_threshold(broker: Broker, value: int) -> None:
    broker.scripts.busy_reply_threshold_ms = value


def _tracking_max_keys(broker: Broker, value: int) -> None:
    broker.keyspaces.tracking_max_keys = value
    tracker = broker.keyspaces.tracker
    if isinstance(tracker, Tracker):
        tracker.limit()


def _save(broker: Broker, value: bytes) -> Apply | str:
    if value.strip():
        return "Invalid save parameters" if not _valid_save(value) else "snapshots are not supported"
    return lambda: None


def _valid_save(value: bytes) -> bool:
    words = value.split()
    return len(words) % 2 == 0 and all(string2ll(word) is not None for word in words)


_CLASSES: Final = (b"normal", b"replica", b"slave", b"pubsub")


def _yes_no(store: Callable[[Broker, bool], None]) -> Check:
    def check(broker: Broker, value: bytes) -> Apply | str:
        word = value.lower()
        if word not in (b"yes", b"no"):
            return "argument must be 'yes' or 'no'"
        return lambda: store(broker, word == b"yes")

    return check


def _tracking(broker: Broker, on: bool) -> None:
    broker.redis_settings.latency_tracking = on


def _percentiles(broker: Broker, value: bytes) -> Apply | str:
    shares: list[float] = []
    for word in value.split():
        try:
            share = float(word)
        except ValueError:
            return "Invalid latency-tracking-info-percentiles parameters"
        if not 0.0 <= share <= 100.0:
            return "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
        shares.append(share)

    def apply() -> None:
        broker.redis_settings.latency_percentiles = shares

    return apply


def _show_percentiles(broker: Broker) -> bytes:
    return " ".join(f"{share:g}" for share in broker.redis_settings.latency_percentiles).encode()


def _output_limits(broker: Broker) -> bytes:
    settings = broker.redis_settings
    classes = (
        ("normal", settings.normal_limits),
        ("slave", settings.replica_limits),
        ("pubsub", settings.pubsub_limits),
    )
    return " ".join(f"{name} {h} {s} {t}" for name, (h, s, t) in classes).encode()


def _check_limits(broker: Broker, value: bytes) -> Apply | str:
    words = value.split()
    if len(words) % 4:
        return "Wrong number of arguments in buffer limit configuration."
    changes: list[tuple[bytes, tuple[int, int, int]]] = []
    for i in range(0, len(words), 4):
        name = words[i].lower()
        if name not in _CLASSES:
            return "Invalid client class specified in buffer limit configuration."
        hard, soft = parse_memory(words[i + 1]), parse_memory(words[i + 2])
        seconds = string2ll(words[i + 3])
        if hard is None or soft is None or seconds is None or seconds < 0:
            return "Error in hard, soft or soft_seconds setting in buffer limit configuration."
        changes.append((name, (hard, soft, seconds)))

    def apply() -> None:
        settings = broker.redis_settings
        for name, limits in changes:
            if name == b"normal":
                settings.normal_limits = limits
            elif name == b"pubsub":
                settings.pubsub_limits = limits
                for client in broker.clients.values():
                    if isinstance(client, RespConnection):
                        client.set_limits(*limits)
            else:
                settings.replica_limits = limits

    return apply


def _fsync(broker: Broker, policy: str) -> None:
    store = broker.keyspaces.store
    if store is not None:
        store.appendfsync = policy
    broker.redis_settings.appendfsync = policy


def _fsync_now(broker: Broker) -> bytes:
    store = broker.keyspaces.store
    return (store.appendfsync if store is not None else broker.redis_settings.appendfsync).encode()


def _number(read: Callable[[Broker], int]) -> Callable[[Broker], bytes]:
    return lambda broker: b"%d" % read(broker)


def _setter(attr: str) -> Callable[[Broker, int], None]:
    def store(broker: Broker, value: int) -> None:
        setattr(broker.redis_settings, attr, value)

    return store


def _setting(
    attr: str, low: int, high: int, *, memory: bool = False
) -> tuple[Callable[[Broker], bytes], Check]:
    """A number kept in ``RedisSettings.<attr>``: how it is shown, and checked."""
    return (
        _number(lambda broker: int(getattr(broker.redis_settings, attr))),
        _integer(low, high, _setter(attr), memory=memory),
    )


def _hz(broker: Broker, value: int) -> None:
    broker.redis_settings.hz = min(max(value, 1), 500)


def _slowlog_len(broker: Broker, value: int) -> None:
    broker.redis_settings.slowlog_max_len = value
    broker.redis_stats.trim_slowlog()


def _redis_port(broker: Broker) -> bytes:
    listeners = broker.redis_listeners
    if listeners is not None:
        return b"%d" % listeners.port
    return b"%d" % (broker.config.redis.port if broker.config.redis is not None else 0)


def _move_port(broker: Broker, value: bytes) -> Apply | str:
    """``port``: the Redis front door moves to it (0: it stops listening), bound here already so
    that a port in use fails the whole CONFIG SET (``node.redis_listeners``)."""
    port = string2ll(value)
    if port is None:
        return "argument couldn't be parsed into an integer"
    if not 0 <= port <= 65535:
        return "argument must be between 0 and 65535 inclusive"
    listeners = broker.redis_listeners
    if listeners is None:
        return _unchanged(_redis_port)(broker, value)
    if port == listeners.port:
        return lambda: None
    return listeners.prepare(port)


def _bind(broker: Broker) -> bytes:
    redis = broker.config.redis
    return ((redis.host if redis is not None else None) or broker.config.host).encode()


def _constant(value: bytes) -> Callable[[Broker], bytes]:
    return lambda broker: value


PARAMS: Final = (
    Param(
        ["maxmemory"],
        _number(lambda broker: broker.keyspaces.maxmemory),
        _integer(0, 2**64 - 1, set_maxmemory, memory=True),
    ),
    Param(["maxmemory-policy"], _constant(POLICY), _policy),
    Param(["maxmemory-samples"], _constant(b"5")),  # (nothing is evicted: nothing is sampled)
    Param(["maxmemory-clients"], _constant(b"0"), _client_memory),
    Param(
        ["client-query-buffer-limit"],
        _number(lambda broker: broker.redis_settings.query_buffer_limit),
        _integer(1 << 20, _LLONG_MAX, _query_buffer_limit, memory=True),
    ),
    Param(
        ["appendonly"],
        lambda broker: b"yes" if broker.keyspaces.store is not None else b"no",
        _appendonly,
    ),
    Param(["appendfsync"], _fsync_now, _enum(("everysec", "always", "no"), _fsync)),
    Param(["stream-node-max-entries"], *_setting("stream_node_max_entries", 0, _LLONG_MAX)),
    Param(
        ["stream-node-max-bytes"],
        *_setting("stream_node_max_bytes", 0, _LLONG_MAX, memory=True),
    ),
    Param(
        ["list-max-listpack-size", "list-max-ziplist-size"],
        *_setting("list_max_listpack_size", -_INT_MAX - 1, _INT_MAX),
    ),
    Param(
        ["notify-keyspace-events"],
        lambda broker: format_flags(broker.keyspaces.notifier.configured),
        _notify,
    ),
    Param(
        ["tracking-table-max-keys"],
        _number(lambda broker: broker.keyspaces.tracking_max_keys),
        _integer(0, _LLONG_MAX, _tracking_max_keys),
    ),
    Param(
        ["busy-reply-threshold", "lua-time-limit"],
        _number(lambda broker: broker.scripts.busy_reply_threshold_ms),
        _integer(0, _LLONG_MAX, _busy_threshold),
    ),
    Param(["timeout"], *_setting("timeout", 0, _INT_MAX)),
    Param(["maxclients"], _number(lambda broker: broker.config.max_connections)),
    Param(["client-output-buffer-limit"], _output_limits, _check_limits),
    Param(["databases"], _constant(b"16"), immutable=True),
    Param(["daemonize"], _constant(b"no"), immutable=True),
    Param(["replicaof", "slaveof"], _constant(b""), immutable=True),
    Param(["save"], _constant(b""), _save),
    Param(["port"], _redis_port, _move_port),
    Param(["bind"], _bind),
    Param(["slowlog-log-slower-than"], *_setting("slowlog_log_slower_than", -1, _LLONG_MAX)),
    Param(
        ["slowlog-max-len"],
        _number(lambda broker: broker.redis_settings.slowlog_max_len),
        _integer(0, _LLONG_MAX, _slowlog_len),
    ),
    Param(
        ["latency-tracking"],
        lambda broker: b"yes" if broker.redis_settings.latency_tracking else b"no",
        _yes_no(_tracking),
    ),
    Param(["latency-tracking-info-percentiles"], _show_percentiles, _percentiles),
    Param(["latency-monitor-threshold"], *_setting("latency_monitor_threshold", 0, _LLONG_MAX)),
    Param(
        ["hz"],
        _number(lambda broker: broker.redis_settings.hz),
        _integer(0, _INT_MAX, _hz),
    ),
    Param(["proto-max-bulk-len"], _constant(b"%d" % MAX_BULK_LEN)),
    Param(["cluster-enabled"], _constant(b"no"), immutable=True),
    Param(["key-load-delay"], _constant(b"0"), hidden=True),  # (loading never waits per key)
)
"""Every parameter, in CONFIG GET's order."""

_BY_NAME: Final = {name: param for param in PARAMS for name in param.names}


def _config_get(conn: RespConnection, args: list[bytes]) -> None:
    found: dict[bytes, Param] = {}
    for pattern in args[2:]:
        if not any(c in pattern for c in b"[*?"):
            param = _BY_NAME.get(pattern.lower())
            if param is not None and pattern not in found:
                found[pattern] = param
            continue
        for param in PARAMS:
            for name in param.names:
                if param.hidden or name in found:
                    continue
                if glob_match(pattern, name, nocase=True):
                    found[name] = param
    broker = conn.broker
    conn.reply(conn.writer.map((bulk(name), bulk(p.get(broker))) for name, p in found.items()))


def _failed(name: bytes, why: str) -> str:
    shown = name.decode("utf-8", "surrogateescape")
    return f"CONFIG SET failed (possibly related to argument '{shown}') - {why}"


def _config_set(conn: RespConnection, args: list[bytes]) -> None:
    """All the pairs or none, checked in redis-server's order (an alias is a parameter of its
    own there: given with its other name, it is no duplicate, and the last one given wins)."""
    if len(args) % 2:
        conn.error("syntax error")
        return
    chosen: list[tuple[Param, bytes]] = []
    for name in args[2::2]:
        key = name.lower()
        param = _BY_NAME.get(key)
        if param is None:
            shown = name.decode("utf-8", "surrogateescape")
            conn.error(f"Unknown option or number of arguments for CONFIG SET - '{shown}'")
            return
        if param.immutable:
            conn.error(_failed(name, "can't set immutable config"))
            return
        if (param, key) in chosen:
            conn.error(_failed(name, "duplicate parameter"))
            return
        chosen.append((param, key))
    appliers: list[Apply] = []
    for (param, key), value in zip(chosen, args[3::2], strict=True):
        outcome = param.check(conn.broker, value)
        if isinstance(outcome, str):
            for prepared in appliers:
                if isinstance(prepared, Rebind):
                    prepared.abandon()
            conn.error(_failed(key, outcome))
            return
        appliers.append(outcome)
    for apply in appliers:
        apply()
    conn.reply(OK)


def _config_resetstat(conn: RespConnection, args: list[bytes]) -> None:
    conn.broker.redis_stats.reset()
    keyspaces = conn.broker.keyspaces
    keyspaces.hits = keyspaces.misses = 0
    conn.reply(OK)


def _config_rewrite(conn: RespConnection, args: list[bytes]) -> None:
    if conn.broker.config_file is None:
        conn.error("The server is running without a config file")
    else:
        conn.error(
            "Rewriting config file: the node's configuration file is not in redis.conf's format "
            "and is left as it is"
        )


_HELP: Final = [
    b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GET <pattern>",
    b"    Return parameters matching the glob-like <pattern> and their values.",
    b"SET <directive> <value>",
    b"    Set the configuration <directive> to <value>.",
    b"RESETSTAT",
    b"    Reset statistics reported by the INFO command.",
    b"REWRITE",
    b"    Rewrite the configuration file.",
    b"HELP",
    b"    Print this help.",
]

COMMANDS: Final = (
    Command(
        "config",
        -2,
        None,
        subcommands=[
            Command("config|get", -3, _config_get, "admin noscript"),
            Command("config|set", -4, _config_set, "admin noscript"),
            Command("config|resetstat", 2, _config_resetstat, "admin noscript"),
            Command("config|rewrite", 2, _config_rewrite, "admin noscript"),
            Command("config|help", 2, help_reply(_HELP)),
        ],
    ),
)
