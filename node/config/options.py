"""A node's configuration: defaults as nats-server's, a file (TOML, or nats-server's own format read
by ``node.config.natsconf``), and command-line overrides.

Names follow nats-server's options so that its users recognise them (``max_payload``, ``ping_interval``,
``authorization``, ``accounts``), and the limits default to the values nats-server's code uses
(which differ from some of its documentation: control lines 4096 bytes, auth timeout 2 s, pending
64 MiB).
"""

from __future__ import annotations

import difflib
import math
import os
import ssl
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from cluster.config import ClusterConfig, GatewayConfig, parse_url
from node.accounts.subjectmap import SubjectMap, is_subset
from node.config import natsconf
from node.nats.protocol import MAX_CONTROL_LINE, MAX_PAYLOAD
from routing import is_valid_subject, subject_is_literal, subjects_collide
from transport.tls import TlsConfig, client_context, server_context

__all__ = [
    "RANDOM_PORT",
    "SYSTEM_ACCOUNT",
    "AccountConfig",
    "Config",
    "ConfigError",
    "ExportConfig",
    "ImportConfig",
    "Permissions",
    "RedisConfig",
    "StreamConfig",
    "UnknownOption",
    "UserConfig",
    "check_tls",
    "check_urls",
    "reconcile_names",
]

MAX_PENDING = 64 * 1024 * 1024
DEFAULT_PORT = 4222
DEFAULT_HTTP_PORT = 8222
RANDOM_PORT = -1
"""A port given as -1 is any free one, as in nats-server (0 works too)."""
SYSTEM_ACCOUNT = "$SYS"
"""nats-server's default system account, which exists without being configured."""
FSYNC_POLICIES = ("always", "everysec", "no")


class ConfigError(ValueError):
    """A configuration file or flag that does not make sense; the message says where."""


class UnknownOption(ConfigError):
    """A key no table of that name has, with a hint: the known name it is closest to, or that
    pubmesh lacks that nats-server option. ``table`` is the mapping it was found in, so that a
    reader that knows where each key came from can say so."""

    def __init__(self, table: dict[str, Any], key: str, known: Iterable[str], where: str) -> None:
        if key in _UNSUPPORTED:
            hint = f" ({_UNSUPPORTED[key]})"
        else:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.table, self.key = table, key
        self.what = f"unknown option {key!r}{hint}"
        super().__init__(f"{where}: {self.what}")


_LACKING = "a nats-server option pubmesh does not support"
_UNSUPPORTED = {
    name: _LACKING
    for name in (
        "jetstream", "leafnodes", "leaf", "mqtt", "websocket", "ws", "operator", "operators",
        "resolver", "trusted", "trusted_keys", "mappings", "maps",
        "syslog", "remote_syslog", "logtime", "logtime_utc", "trace_verbose",
        "max_traced_msg_len", "prof_port", "http_base_path",
        "connect_error_reports", "reconnect_error_reports", "server_tags", "no_header_support",
        "disable_sublist_cache", "max_sub_tokens", "ocsp", "proxy_protocol", "nkey", "nkeys",
        "allow_responses", "allowed_connection_types", "default_permissions",
        "cipher_suites", "curve_preferences", "insecure", "pinned_certs", "write_timeout",
    )
} | {"authorization": "pubmesh authenticates routes and gateways with 'secret'"}  # fmt: skip


@attrs.frozen
class SubjectRule:
    """Subjects allowed and denied for one direction; an empty ``allow`` allows everything."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@attrs.frozen
class Permissions:
    """What a user may publish to and subscribe to.

    A subscribe entry may name a queue group after a space (``"jobs.> workers"``): it then applies
    to that group only, as in nats-server.
    """

    publish: SubjectRule = SubjectRule()
    subscribe: SubjectRule = SubjectRule()


@attrs.frozen
class UserConfig:
    """One way in: a user/password pair or a token, leading into one account."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    account: str = "$G"
    permissions: Permissions | None = None


@attrs.frozen
class ExportConfig:
    """Subjects an account offers to others (``exports``): a stream (messages published in it) or
    a service (requests its responders answer)."""

    subject: str
    service: bool = False
    accounts: tuple[str, ...] | None = None
    """The accounts that may import it; None: any account."""


@attrs.frozen
class ImportConfig:
    """Subjects an account takes from another's exports (``imports``)."""

    account: str
    """The exporting account."""
    subject: str
    """The subject in the exporting account."""
    to: str
    """The same subject in the importing account: where a stream's messages appear, where a
    service's requests are published (``prefix`` and ``to`` both end up here)."""
    service: bool = False


@attrs.frozen
class AccountConfig:
    name: str
    exports: tuple[ExportConfig, ...] = ()
    imports: tuple[ImportConfig, ...] = ()


@attrs.frozen
class RedisConfig:
    """The Redis (RESP) front door: where it listens, redis-server's pub/sub output limits
    (``client-output-buffer-limit pubsub 32mb 8mb 60``) and its ``maxmemory``."""

    host: str | None = None
    """None: the client address."""
    port: int = 6379
    hard_limit: int = 32 * 1024 * 1024
    """Pending output bytes past which a subscriber is closed at once."""
    soft_limit: int = 8 * 1024 * 1024
    """Pending output bytes a subscriber may stay above for ``soft_seconds`` at most."""
    soft_seconds: float = 60.0
    maxmemory: int = 0
    """Bytes the keys and clients' output buffers may hold before commands that add data are
    refused, as redis-server's ``maxmemory`` with ``maxmemory-policy noeviction`` (0: no limit)."""

    def evolve(self, **changes: Any) -> RedisConfig:
        return attrs.evolve(self, **changes)


@attrs.frozen
class StreamConfig:
    """A stream that captures what is published on ``subjects`` in ``account`` (``[[streams]]``):
    held by the node whose configuration names it, at key ``name`` of the account's database 0."""

    name: str
    subjects: tuple[str, ...]
    account: str = "$G"
    maxlen: int = 0
    """Entries kept at most, trimmed a block at a time as ``XADD MAXLEN ~`` does (0: no limit)."""
    max_age: float = 0.0
    """Seconds an entry is kept, trimmed a block at a time as ``XADD MINID ~`` does (0: no limit)."""
    max_bytes: int = 0
    """Bytes the stream may hold (as MEMORY USAGE counts them): the oldest entries go, a block at
    a time, to keep it under (0: no limit)."""


@attrs.frozen
class Config:
    """Everything a node needs to start; immutable once built."""

    server_name: str = ""
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    http_host: str = "0.0.0.0"
    http_port: int | None = None
    https_port: int | None = None
    """Monitoring over HTTPS (with ``tls``'s certificate) instead of ``http_port``."""
    max_payload: int = MAX_PAYLOAD
    max_control_line: int = MAX_CONTROL_LINE
    max_pending: int = MAX_PENDING
    max_connections: int = 64 * 1024
    max_subscriptions: int = 0
    ping_interval: float = 120.0
    ping_max: int = 2
    auth_timeout: float = 2.0
    write_deadline: float = 10.0
    users: tuple[UserConfig, ...] = ()
    tls: TlsConfig | None = None
    """TLS for clients (after the INFO, as nats-server); None serves them in plain text."""
    cluster: ClusterConfig | None = None
    """Route settings; None runs a node on its own."""
    gateway: GatewayConfig | None = None
    """Gateway settings; None keeps the node's cluster to itself."""
    accounts: tuple[AccountConfig, ...] = ()
    redis: RedisConfig | None = None
    """The Redis front door; None runs none."""
    streams: tuple[StreamConfig, ...] = ()
    """Streams this node holds, capturing subjects."""
    no_auth_user: str | None = None
    debug: bool = False
    log_file: str | None = None
    """Where the log goes (appended to; reopened on SIGUSR1); None: stderr."""
    pid_file: str | None = None
    """A file holding the process id while the node runs."""
    ports_file_dir: str | None = None
    """A directory to write ``pubmesh_<pid>.ports`` into: the URLs the node listens on, as JSON."""
    store_dir: str | None = None
    """Where Redis keys are kept across restarts (an append-only file); None keeps them in memory."""
    appendfsync: str = "everysec"
    """When the append-only file is fsynced: ``always`` (before replies), ``everysec``, ``no``."""
    rewrite_percentage: int = 100
    """Rewrite the append-only file when it has grown by this many percent (0: only on BGREWRITEAOF)."""
    rewrite_min_size: int = 64 * 1024 * 1024
    client_advertise: str | None = None
    """``host[:port]`` this node gives clients (in ``connect_urls``) and peers to give theirs;
    by default the address it listens on."""
    lame_duck_duration: float = 120.0
    """Seconds over which lame duck mode closes the clients, the grace period included."""
    lame_duck_grace_period: float = 10.0
    """Seconds lame duck mode waits before it starts closing clients."""
    system_account: str = SYSTEM_ACCOUNT
    """The account the node's own services and events live in (``node.monitoring.system``): only its
    users reach them."""
    no_system_account: bool = False
    """Run no system account at all (nats-server's ``no_system_account``)."""

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def evolve(self, **changes: Any) -> Config:
        return attrs.evolve(self, **changes)


_DURATION = "duration"
"""Seconds, or Go's duration syntax as nats-server reads it (``"2m"``, ``"1.5s"``, ``"1h30m"``)."""
_SIZE = "size"
"""Bytes, or a size with nats-server's units (``"64KB"``, ``"2MiB"``; ``"1K"`` is 1000)."""
_SCALARS: dict[str, type | str] = {
    "server_name": str,
    "host": str,
    "port": int,
    "http_host": str,
    "http_port": int,
    "https_port": int,
    "max_payload": _SIZE,
    "max_control_line": _SIZE,
    "max_pending": _SIZE,
    "max_connections": int,
    "max_subscriptions": int,
    "ping_interval": _DURATION,
    "ping_max": int,
    "auth_timeout": _DURATION,
    "write_deadline": _DURATION,
    "no_auth_user": str,
    "debug": bool,
    "log_file": str,
    "pid_file": str,
    "ports_file_dir": str,
    "store_dir": str,
    "appendfsync": str,
    "rewrite_percentage": int,
    "rewrite_min_size": _SIZE,
    "client_advertise": str,
    "lame_duck_duration": _DURATION,
    "lame_duck_grace_period": _DURATION,
    "system_account": str,
    "no_system_account": bool,
}
_ALIASES = {
    "listen": None,
    "name": "server_name",
    "net": "host",
    "http": None,
    "https": None,
    "trace": "debug",
    "logfile": "log_file",
    "pidfile": "pid_file",
    "monitor_port": "http_port",
    "max_conn": "max_connections",
    "max_subs": "max_subscriptions",
    "system": "system_account",
    "no_system": "no_system_account",
    "no_sys_acc": "no_system_account",
}


def load(path: str | Path) -> Config:
    """Read a configuration file: nats-server's format if it is named ``*.conf``, TOML if it is
    named ``*.toml``, and otherwise TOML if it parses as TOML, else nats-server's format.

    Raises:
        ConfigError: unreadable, in neither format, or with a key or value that does not fit.
    """
    where = str(path)
    try:
        text = _read(where)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    as_toml = ""
    if not where.endswith(".conf"):
        try:
            return from_mapping(tomllib.loads(text), where=where)
        except tomllib.TOMLDecodeError as exc:
            if where.endswith(".toml"):
                raise ConfigError(f"{where}: {exc}") from exc
            as_toml = f" (nor is it TOML: {exc})"
    try:
        table = natsconf.parse(text, file=where, read=_read, env=os.environ)
    except natsconf.ConfError as exc:
        if not as_toml and _is_toml(text):
            as_toml = " (it is TOML: name it *.toml)"
        raise ConfigError(f"{exc}{as_toml}") from exc
    return _from_nats(table, where)


def _is_toml(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def _from_nats(table: natsconf.Table, where: str) -> Config:
    """The Config a nats-server file describes, read by ``from_mapping`` like TOML; an unknown key
    is reported at its file and line, and one that served as a ``$variable`` is no option at all,
    as in nats-server."""
    while True:
        try:
            return from_mapping(table, where=where)
        except UnknownOption as exc:
            if not isinstance(exc.table, natsconf.Table) or exc.key not in exc.table.positions:
                raise
            if exc.key in exc.table.variables:
                del exc.table[exc.key]
                continue
            raise ConfigError(f"{exc.table.positions[exc.key]}: {exc.what}") from None


_SECTIONS = ("tls", "authorization", "cluster", "gateway", "redis", "accounts", "streams")


def from_mapping(data: dict[str, Any], *, where: str = "config") -> Config:
    """Build a Config from parsed TOML (or any mapping of the same shape)."""
    fields: dict[str, Any] = {}
    users: list[UserConfig] = []
    accounts: list[AccountConfig] = []
    streams: tuple[StreamConfig, ...] = ()
    for key, value in data.items():
        name = _ALIASES.get(key, key)
        if key == "listen":
            fields.update(_host_port(value, f"{where}: listen"))
        elif key == "http":
            http = _host_port(value, f"{where}: http")
            fields["http_host"], fields["http_port"] = http["host"], http["port"]
        elif key == "https":
            https = _host_port(value, f"{where}: https")
            fields["http_host"], fields["https_port"] = https["host"], https["port"]
        elif key == "tls":
            fields["tls"] = _tls(_table(value, f"{where}: tls"), f"{where}: tls", clients=True)
        elif key == "authorization":
            body = _table(value, f"{where}: authorization")
            users += _authorization(body, f"{where}: authorization")
            if "timeout" in body:
                fields["auth_timeout"] = _scalar(
                    body["timeout"], _DURATION, f"{where}: authorization.timeout"
                )
        elif key == "cluster":
            fields["cluster"] = _cluster(_table(value, f"{where}: cluster"), f"{where}: cluster")
        elif key == "gateway":
            fields["gateway"] = _gateway(_table(value, f"{where}: gateway"), f"{where}: gateway")
        elif key == "redis":
            fields["redis"] = _redis(_table(value, f"{where}: redis"), f"{where}: redis")
        elif key == "streams":
            streams = _streams(value, f"{where}: streams")
        elif key == "accounts":
            for account, body in _table(value, f"{where}: accounts").items():
                spot = f"{where}: accounts.{account}"
                _only(_table(body, spot), {"users", "exports", "imports"}, spot)
                accounts.append(
                    AccountConfig(
                        account,
                        exports=_exports(body.get("exports", []), f"{spot}: exports"),
                        imports=_imports(body.get("imports", []), f"{spot}: imports"),
                    )
                )
                for user in body.get("users", []):
                    users.append(_user(_table(user, spot), spot, account))
        elif name in _SCALARS:
            fields[name] = _scalar(value, _SCALARS[name], f"{where}: {key}")
        else:
            raise UnknownOption(data, key, {*_SCALARS, *_ALIASES, *_SECTIONS}, where)
    _check_users(users, where)
    no_auth_user = fields.get("no_auth_user")
    if no_auth_user is not None and no_auth_user not in {u.user for u in users}:
        raise ConfigError(
            f"{where}: no_auth_user: {no_auth_user!r} is not a user of authorization or of an account"
        )
    if fields.get("appendfsync", "everysec") not in FSYNC_POLICIES:
        raise ConfigError(f"{where}: appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
    known = {"$G", *(a.name for a in accounts)}
    _check_sharing(accounts, where)
    system = fields.get("system_account", SYSTEM_ACCOUNT)
    if system not in known | {SYSTEM_ACCOUNT}:
        raise ConfigError(f"{where}: system_account: {system!r} is not an account of accounts")
    if system == "$G":
        raise ConfigError(f"{where}: system_account: the global account cannot be the system account")
    known.add(system)
    for stream in streams:
        if stream.account not in known:
            raise ConfigError(f"{where}: streams: {stream.name!r}: unknown account {stream.account!r}")
    config = Config(**fields, users=tuple(users), accounts=tuple(accounts), streams=streams)
    check_tls(config, where)
    check_lame_duck(config, where)
    return config


def check_lame_duck(config: Config, where: str) -> None:
    """The client URL to advertise must be one, and lame duck mode's grace period must end
    before its duration does (nats-server's rules; its 30 s least duration is not enforced).

    Raises:
        ConfigError: if not.
    """
    if config.client_advertise is not None:
        parse_advertise(config.client_advertise, config.port, f"{where}: client_advertise")
    if config.lame_duck_grace_period < 0 or config.lame_duck_duration <= 0:
        raise ConfigError(f"{where}: lame duck duration and grace period cannot be negative")
    if config.lame_duck_grace_period >= config.lame_duck_duration:
        raise ConfigError(
            f"{where}: lame_duck_grace_period ({config.lame_duck_grace_period:g}s) must be "
            f"shorter than lame_duck_duration ({config.lame_duck_duration:g}s)"
        )


def parse_advertise(advertise: str, port: int, where: str = "client_advertise") -> tuple[str, int]:
    """``host[:port]`` (or ``[ipv6]:port``), the port defaulting to ``port``, as nats-server reads
    ``client_advertise``.

    Raises:
        ConfigError: no host, or a port that is not one.
    """
    text = advertise.strip().split("://", 1)[-1]
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ConfigError(f"{where}: bad port in {advertise!r}")
        port = int(port_text)
    if not host or any(c.isspace() or c in "/@" for c in host):
        raise ConfigError(f"{where}: bad host in {advertise!r}")
    return host, port


_TLS_OPTIONS: dict[str, type | str] = {
    "cert_file": str,
    "key_file": str,
    "ca_file": str,
    "verify": bool,
    "timeout": _DURATION,
    "verify_and_map": bool,
    "handshake_first": bool,
}
_CLIENT_ONLY = ("verify_and_map", "handshake_first")


def _tls(body: dict[str, Any], where: str, *, clients: bool = False) -> TlsConfig:
    """nats-server's ``tls`` block: cert_file, key_file, ca_file, verify, timeout, and for client
    listeners verify_and_map and handshake_first."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _TLS_OPTIONS or (key in _CLIENT_ONLY and not clients):
            raise UnknownOption(
                body, key, _TLS_OPTIONS.keys() - (() if clients else _CLIENT_ONLY), where
            )
        fields[key] = _scalar(value, _TLS_OPTIONS[key], f"{where}: {key}")
    if fields.get("timeout", 1.0) <= 0:
        raise ConfigError(f"{where}: timeout must be positive")
    return TlsConfig(**fields)


def check_tls(config: Config, where: str = "config") -> None:
    """Check that every TLS setting can be used (files readable, certificate matching its key),
    and that HTTPS monitoring has a certificate, raising ``ConfigError`` otherwise."""
    if config.http_port is not None and config.https_port is not None:
        raise ConfigError(f"{where}: can't specify both HTTP and HTTPS monitoring ports")
    if config.https_port is not None and config.tls is None:
        raise ConfigError(f"{where}: TLS cert and key required for HTTPS")
    settings = [("tls", config.tls, False)]
    if config.cluster is not None:
        settings.append(("cluster.tls", config.cluster.tls, True))
    if config.gateway is not None:
        settings.append(("gateway.tls", config.gateway.tls, True))
    for name, tls, dials in settings:
        if tls is None:
            continue
        try:
            server_context(tls)
            if dials:
                client_context(tls)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"{where}: {name}: {exc}") from exc


_CLUSTER_OPTIONS: dict[str, tuple[str, type | str]] = {
    "name": ("name", str),
    "host": ("host", str),
    "port": ("port", int),
    "secret": ("secret", str),
    "advertise": ("advertise", str),
    "pool_size": ("pool_size", int),
    "ping_interval": ("ping_interval", _DURATION),
    "ping_max": ("ping_max", int),
    "max_pending": ("max_pending", _SIZE),
    "write_deadline": ("write_deadline", _DURATION),
    "max_accounts": ("max_accounts", int),
    "no_advertise": ("no_advertise", bool),
}


def _cluster(body: dict[str, Any], where: str) -> ClusterConfig:
    """nats-server's ``cluster`` block: listen, name, routes, pool_size, accounts (pinned)."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "listen":
            hostport = _host_port(value, f"{where}: listen")
            fields["host"], fields["port"] = hostport["host"], hostport["port"]
        elif key == "routes":
            if not isinstance(value, list) or not all(isinstance(u, str) for u in value):
                raise ConfigError(f"{where}: routes must be a list of URLs")
            fields["seeds"] = tuple(check_urls(value, where))
        elif key == "redis":
            fields["redis"] = _redis(_table(value, f"{where}: redis"), f"{where}: redis")
        elif key == "accounts":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise ConfigError(f"{where}: accounts must be a list of account names")
            fields["pinned_accounts"] = tuple(value)
        elif key == "tls":
            fields["tls"] = _tls(_table(value, f"{where}: tls"), f"{where}: tls")
        elif key in _CLUSTER_OPTIONS:
            name, kind = _CLUSTER_OPTIONS[key]
            fields[name] = _scalar(value, kind, f"{where}: {key}")
        else:
            raise UnknownOption(
                body, key, {*_CLUSTER_OPTIONS, "listen", "routes", "accounts", "tls"}, where
            )
    if fields.get("pool_size", 1) < 1:
        raise ConfigError(f"{where}: pool_size must be at least 1")
    return ClusterConfig(**fields)


_GATEWAY_OPTIONS: dict[str, tuple[str, type | str]] = {
    "name": ("name", str),
    "host": ("host", str),
    "port": ("port", int),
    "secret": ("secret", str),
    "advertise": ("advertise", str),
    "ping_interval": ("ping_interval", _DURATION),
    "ping_max": ("ping_max", int),
    "reply_ttl": ("reply_ttl", _DURATION),
    "max_pending": ("max_pending", _SIZE),
    "write_deadline": ("write_deadline", _DURATION),
    "max_accounts": ("max_accounts", int),
}


def _gateway(body: dict[str, Any], where: str) -> GatewayConfig:
    """nats-server's ``gateway`` block: name, listen, and ``gateways`` (remote clusters, each a
    table with ``name`` and ``url`` or ``urls``)."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "listen":
            hostport = _host_port(value, f"{where}: listen")
            fields["host"], fields["port"] = hostport["host"], hostport["port"]
        elif key == "gateways":
            if not isinstance(value, list):
                raise ConfigError(f"{where}: gateways must be a list of tables")
            fields["gateways"] = tuple(_remote_gateway(_table(g, where), where) for g in value)
        elif key == "tls":
            fields["tls"] = _tls(_table(value, f"{where}: tls"), f"{where}: tls")
        elif key in _GATEWAY_OPTIONS:
            name, kind = _GATEWAY_OPTIONS[key]
            fields[name] = _scalar(value, kind, f"{where}: {key}")
        else:
            raise UnknownOption(body, key, {*_GATEWAY_OPTIONS, "listen", "gateways", "tls"}, where)
    if not fields.get("name"):
        raise ConfigError(f"{where}: a gateway needs a name (this cluster's)")
    return GatewayConfig(**fields)


_REDIS_OPTIONS: dict[str, type | str] = {
    "host": str,
    "port": int,
    "hard_limit": _SIZE,
    "soft_limit": _SIZE,
    "soft_seconds": _DURATION,
    "maxmemory": _SIZE,
}


def _redis(body: dict[str, Any], where: str) -> RedisConfig:
    """The ``[redis]`` table."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _REDIS_OPTIONS:
            raise UnknownOption(body, key, _REDIS_OPTIONS, where)
        fields[key] = _scalar(value, _REDIS_OPTIONS[key], f"{where}: {key}")
    if fields.get("maxmemory", 0) < 0:
        raise ConfigError(f"{where}: maxmemory must be 0 (no limit) or positive")
    return RedisConfig(**fields)


_REMOTE_GATEWAY = {"name", "url", "urls"}


def _streams(value: Any, where: str) -> tuple[StreamConfig, ...]:
    """``[[streams]]``: each a table with ``name``, ``subjects`` and optionally ``account``,
    ``maxlen``, ``max_age`` (seconds, or a duration such as ``"90s"``, ``"15m"``, ``"168h"``) and
    ``max_bytes`` (bytes, or a size such as ``"64MB"``)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected an array of tables ([[streams]])")
    streams: list[StreamConfig] = []
    for body in value:
        body = _table(body, where)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: each stream needs a name")
        spot = f"{where}: {name!r}"
        unknown = set(body) - {"name", "subjects", "account", "maxlen", "max_age", "max_bytes"}
        if unknown:
            raise ConfigError(f"{spot}: unknown option {sorted(unknown)[0]!r}")
        subjects = body.get("subjects")
        if isinstance(subjects, str):
            subjects = [subjects]
        if not subjects or not isinstance(subjects, list):
            raise ConfigError(f"{spot}: subjects must be a non-empty list of subjects")
        for i, subject in enumerate(subjects):
            if not isinstance(subject, str) or not is_valid_subject(subject):
                raise ConfigError(f"{spot}: invalid subject {subject!r}")
            for other in subjects[:i]:
                if subjects_collide(subject, other):  # (a message would be captured twice)
                    raise ConfigError(f"{spot}: subjects {other!r} and {subject!r} overlap")
        maxlen = _scalar(body.get("maxlen", 0), int, f"{spot}: maxlen")
        max_age = _scalar(body.get("max_age", 0), _DURATION, f"{spot}: max_age")
        max_bytes = _scalar(body.get("max_bytes", 0), _SIZE, f"{spot}: max_bytes")
        if maxlen < 0 or max_bytes < 0 or not 0 <= max_age < math.inf:
            raise ConfigError(f"{spot}: maxlen, max_age and max_bytes must be 0 (no limit) or positive")
        account = _scalar(body.get("account", "$G"), str, f"{spot}: account")
        if any(s.name == name and s.account == account for s in streams):
            raise ConfigError(f"{spot}: a stream of that name is already defined in {account!r}")
        streams.append(StreamConfig(name, tuple(subjects), account, maxlen, max_age, max_bytes))
    return tuple(streams)


def _remote_gateway(body: dict[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    _only(body, _REMOTE_GATEWAY, f"{where}: gateways")
    name = body.get("name")
    urls = body.get("urls", [])
    if "url" in body:
        urls = [body["url"], *urls]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: each remote gateway needs a name")
    if not urls or not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ConfigError(f"{where}: gateway {name!r} needs url or urls")
    return name, tuple(check_urls(urls, f"{where}: gateway {name!r}"))


def reconcile_names(config: Config) -> Config:
    """A node's cluster is known by one name to its routes and by its gateway name to other
    clusters: these must agree. A cluster left with the default name takes the gateway's, as in
    nats-server; two different names are an error.
    """
    cluster, gateway = config.cluster, config.gateway
    if cluster is None or gateway is None or cluster.name == gateway.name:
        return config
    if cluster.name != ClusterConfig().name:
        raise ConfigError("cluster name conflicts between cluster and gateway definitions")
    return config.evolve(cluster=attrs.evolve(cluster, name=gateway.name))


def check_urls(urls: list[str], where: str) -> list[str]:
    """Check gateway (or route) URLs, raising ``ConfigError`` at one with no host:port."""
    for url in urls:
        try:
            parse_url(url)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return urls


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table")
    return value


def _only(body: dict[str, Any], known: set[str], where: str) -> None:
    """Refuse the first key of ``body`` that is not ``known``."""
    unknown = sorted(body.keys() - known)
    if unknown:
        raise UnknownOption(body, unknown[0], known, where)


def _measure(value: Any, kind: str, where: str) -> float | int:
    """A duration or a size: seconds or bytes, or a string in nats-server's syntax."""
    if not isinstance(value, str):
        number: float | int = _scalar(value, float if kind == _DURATION else int, where)
        return number
    parsed = natsconf.parse_duration(value) if kind == _DURATION else natsconf.parse_size(value)
    if parsed is None:
        example = "'1.5s' or '2m'" if kind == _DURATION else "'64KB' or '2MB'"
        raise ConfigError(f"{where}: expected a {kind} such as {example}, got {value!r}")
    return parsed


def _scalar(value: Any, kind: type | str, where: str) -> Any:
    if isinstance(kind, str):
        return _measure(value, kind, where)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def _host_port(value: Any, where: str) -> dict[str, Any]:
    """``"host:port"`` or a bare port, as nats-server's ``listen`` accepts (-1: a random port)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"host": "0.0.0.0", "port": value}
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and (port.isdigit() or port == str(RANDOM_PORT)):
            return {"host": host or "0.0.0.0", "port": int(port)}
    raise ConfigError(f"{where}: expected host:port, got {value!r}")


_AUTHORIZATION = {"users", "user", "password", "token", "timeout"}
_USER = {"user", "password", "pass", "token", "permissions"}


def _authorization(body: dict[str, Any], where: str) -> list[UserConfig]:
    users = [_user(_table(u, where), where, "$G") for u in body.get("users", [])]
    single: dict[str, Any] = {k: body[k] for k in ("user", "password", "token") if k in body}
    if single:
        users.append(_user(single, where, "$G"))
    _only(body, _AUTHORIZATION, where)
    return users


def _user(body: dict[str, Any], where: str, account: str) -> UserConfig:
    _only(body, _USER, where)
    perms = body.get("permissions")
    return UserConfig(
        user=body.get("user"),
        password=body.get("password", body.get("pass")),
        token=body.get("token"),
        account=account,
        permissions=_permissions(_table(perms, where), where) if perms is not None else None,
    )


def _permissions(body: dict[str, Any], where: str) -> Permissions:
    def subjects(value: Any) -> tuple[str, ...]:
        """A subject, or a list of them (nats-server takes either)."""
        return (value,) if isinstance(value, str) else tuple(map(str, value))

    def rule(value: Any) -> SubjectRule:
        if isinstance(value, str | list):  # bare subjects mean "allow"
            return SubjectRule(allow=subjects(value))
        table = _table(value, f"{where}: permissions")
        _only(table, {"allow", "deny"}, f"{where}: permissions")
        return SubjectRule(allow=subjects(table.get("allow", ())), deny=subjects(table.get("deny", ())))

    _only(body, {"publish", "subscribe"}, f"{where}: permissions")
    return Permissions(publish=rule(body.get("publish", {})), subscribe=rule(body.get("subscribe", {})))


def _check_users(users: list[UserConfig], where: str) -> None:
    for user in users:
        if (user.user is None) == (user.token is None):
            raise ConfigError(f"{where}: each user needs either user (with password) or token")
    names = [u.user for u in users if u.user is not None]
    if len(names) != len(set(names)):
        raise ConfigError(f"{where}: duplicate user")


def _exports(value: Any, where: str) -> tuple[ExportConfig, ...]:
    """``exports: [{stream: "a.>"}, {service: "req.x", accounts: [B]}]``."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of exports")
    exports = []
    for body in value:
        body = _table(body, where)
        _only(body, {"stream", "service", "accounts"}, where)
        if ("stream" in body) == ("service" in body):
            raise ConfigError(f"{where}: each export is either a stream or a service")
        service = "service" in body
        subject = body["service" if service else "stream"]
        if not isinstance(subject, str) or not is_valid_subject(subject):
            raise ConfigError(f"{where}: invalid subject {subject!r}")
        accounts = body.get("accounts")
        if accounts is not None and (
            not isinstance(accounts, list) or not all(isinstance(a, str) for a in accounts)
        ):
            raise ConfigError(f"{where}: {subject!r}: accounts must be a list of account names")
        exports.append(ExportConfig(subject, service, None if accounts is None else tuple(accounts)))
    return tuple(exports)


def _imports(value: Any, where: str) -> tuple[ImportConfig, ...]:
    """``imports: [{stream: {account: A, subject: "a.>"}, prefix: "p"}, {service: {account: A,
    subject: "req.x"}, to: "x"}]``: a stream's messages appear under ``prefix`` (or as ``to``), a
    service is requested on ``to`` (by default its own subject)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of imports")
    imports = []
    for body in value:
        body = _table(body, where)
        _only(body, {"stream", "service", "prefix", "to"}, where)
        if ("stream" in body) == ("service" in body):
            raise ConfigError(f"{where}: each import is either a stream or a service")
        service = "service" in body
        kind = "service" if service else "stream"
        source = _table(body[kind], f"{where}: {kind}")
        _only(source, {"account", "subject"}, f"{where}: {kind}")
        account, subject = source.get("account"), source.get("subject")
        if not isinstance(account, str) or not account:
            raise ConfigError(f"{where}: {kind} import needs the exporting account")
        if not isinstance(subject, str) or not is_valid_subject(subject):
            raise ConfigError(f"{where}: {kind} import from {account!r}: invalid subject {subject!r}")
        spot = f"{where}: {kind} import of {subject!r} from {account!r}"
        prefix, to = body.get("prefix"), body.get("to", subject)
        if prefix is not None:
            if service or "to" in body:
                raise ConfigError(f"{spot}: prefix is for stream imports without 'to'")
            if not isinstance(prefix, str) or not is_valid_subject(prefix.rstrip(".")):
                raise ConfigError(f"{spot}: invalid prefix {prefix!r}")
            if not subject_is_literal(prefix.rstrip(".")):
                raise ConfigError(f"{spot}: prefix {prefix!r} must not contain wildcards")
            to = f"{prefix.rstrip('.')}.{subject}"
        if not isinstance(to, str) or not is_valid_subject(to):
            raise ConfigError(f"{spot}: invalid subject {to!r} for 'to'")
        try:
            SubjectMap(subject, to)
        except ValueError as exc:
            raise ConfigError(f"{spot}: {exc}") from None
        imports.append(ImportConfig(account, subject, to, service))
    return tuple(imports)


def _check_sharing(accounts: list[AccountConfig], where: str) -> None:
    """Every import names a configured account whose exports allow it (nats-server refuses the
    others as not authorized)."""
    by_name = {a.name: a for a in accounts}
    for account in accounts:
        for imp in account.imports:
            kind = "service" if imp.service else "stream"
            spot = f"{where}: accounts.{account.name}: {kind} import of {imp.subject!r}"
            spot += f" from {imp.account!r}"
            exporter = by_name.get(imp.account)
            if exporter is None:
                raise ConfigError(f"{spot}: no such account")
            if exporter is account:
                raise ConfigError(f"{spot}: an account cannot import from itself")
            if not any(
                e.service == imp.service
                and is_subset(imp.subject, e.subject)
                and (e.accounts is None or account.name in e.accounts)
                for e in exporter.exports
            ):
                raise ConfigError(f"{spot}: {kind} import not authorized (no export allows it)")
