"""Reading the tables of a configuration: each key checked against the options its table has,
each value converted (durations and sizes in nats-server's syntax, ``host:port``), and an error that
says where for anything that does not fit.

``node.config.load`` reads the top level of a file with these; each ``read_*`` function reads one
section (``tls``, ``cluster``, ``gateway``, ``redis``, ``streams``, ``authorization``, an
account's users, exports and imports) into its record of ``node.config.options``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any

from cluster.config import ClusterConfig, GatewayConfig, ReplicationConfig, parse_url
from node.config import natsconf
from node.config.keyspace_events import INVALID, parse_flags
from node.config.options import (
    RANDOM_PORT,
    AccountConfig,
    ConfigError,
    ExportConfig,
    ImportConfig,
    Permissions,
    RedisConfig,
    StreamConfig,
    SubjectRule,
    UserConfig,
)
from routing import is_valid_subject, subject_is_literal, subjects_collide
from routing.subjectmap import SubjectMap, is_subset
from transport.tls import TlsConfig

__all__ = [
    "DURATION",
    "SIZE",
    "UnknownOption",
    "as_table",
    "check_sharing",
    "check_urls",
    "check_users",
    "host_port",
    "only",
    "read_authorization",
    "read_cluster",
    "read_exports",
    "read_gateway",
    "read_imports",
    "read_redis",
    "read_replication",
    "read_streams",
    "read_tls",
    "read_user",
    "scalar",
]


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


DURATION = "duration"
"""Seconds, or Go's duration syntax as nats-server reads it (``"2m"``, ``"1.5s"``, ``"1h30m"``)."""
SIZE = "size"
"""Bytes, or a size with nats-server's units (``"64KB"``, ``"2MiB"``; ``"1K"`` is 1000)."""


def check_urls(urls: list[str], where: str) -> list[str]:
    """Check gateway (or route) URLs, raising ``ConfigError`` at one with no host:port."""
    for url in urls:
        try:
            parse_url(url)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return urls


def as_table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table")
    return value


def only(body: dict[str, Any], known: set[str], where: str) -> None:
    """Refuse the first key of ``body`` that is not ``known``."""
    unknown = sorted(body.keys() - known)
    if unknown:
        raise UnknownOption(body, unknown[0], known, where)


def _measure(value: Any, kind: str, where: str) -> float | int:
    """A duration or a size: seconds or bytes, or a string in nats-server's syntax."""
    if not isinstance(value, str):
        number: float | int = scalar(value, float if kind == DURATION else int, where)
        return number
    parsed = natsconf.parse_duration(value) if kind == DURATION else natsconf.parse_size(value)
    if parsed is None:
        example = "'1.5s' or '2m'" if kind == DURATION else "'64KB' or '2MB'"
        raise ConfigError(f"{where}: expected a {kind} such as {example}, got {value!r}")
    return parsed


def scalar(value: Any, kind: type | str, where: str) -> Any:
    if isinstance(kind, str):
        return _measure(value, kind, where)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def host_port(value: Any, where: str) -> dict[str, Any]:
    """``"host:port"`` or a bare port, as nats-server's ``listen`` accepts (-1: a random port)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"host": "0.0.0.0", "port": value}
    if isinstance(value, str):
        host, sep, port = value.rpartition(":")
        if sep and (port.isdigit() or port == str(RANDOM_PORT)):
            return {"host": host or "0.0.0.0", "port": int(port)}
    raise ConfigError(f"{where}: expected host:port, got {value!r}")


_TLS_OPTIONS: dict[str, type | str] = {
    "cert_file": str,
    "key_file": str,
    "ca_file": str,
    "verify": bool,
    "timeout": DURATION,
    "verify_and_map": bool,
    "handshake_first": bool,
}
_CLIENT_ONLY = ("verify_and_map", "handshake_first")


def read_tls(body: dict[str, Any], where: str, *, clients: bool = False) -> TlsConfig:
    """nats-server's ``tls`` block: cert_file, key_file, ca_file, verify, timeout, and for client
    listeners verify_and_map and handshake_first."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _TLS_OPTIONS or (key in _CLIENT_ONLY and not clients):
            raise UnknownOption(
                body, key, _TLS_OPTIONS.keys() - (() if clients else _CLIENT_ONLY), where
            )
        fields[key] = scalar(value, _TLS_OPTIONS[key], f"{where}: {key}")
    if fields.get("timeout", 1.0) <= 0:
        raise ConfigError(f"{where}: timeout must be positive")
    return TlsConfig(**fields)


_CLUSTER_OPTIONS: dict[str, tuple[str, type | str]] = {
    "name": ("name", str),
    "host": ("host", str),
    "port": ("port", int),
    "secret": ("secret", str),
    "advertise": ("advertise", str),
    "pool_size": ("pool_size", int),
    "ping_interval": ("ping_interval", DURATION),
    "ping_max": ("ping_max", int),
    "max_pending": ("max_pending", SIZE),
    "write_deadline": ("write_deadline", DURATION),
    "max_accounts": ("max_accounts", int),
    "no_advertise": ("no_advertise", bool),
}


def read_cluster(body: dict[str, Any], where: str) -> ClusterConfig:
    """nats-server's ``cluster`` block: listen, name, routes, pool_size, accounts (pinned)."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "listen":
            hostport = host_port(value, f"{where}: listen")
            fields["host"], fields["port"] = hostport["host"], hostport["port"]
        elif key == "routes":
            if not isinstance(value, list) or not all(isinstance(u, str) for u in value):
                raise ConfigError(f"{where}: routes must be a list of URLs")
            fields["seeds"] = tuple(check_urls(value, where))
        elif key == "redis":
            fields["redis"] = read_redis(as_table(value, f"{where}: redis"), f"{where}: redis")
        elif key == "accounts":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                raise ConfigError(f"{where}: accounts must be a list of account names")
            fields["pinned_accounts"] = tuple(value)
        elif key == "tls":
            fields["tls"] = read_tls(as_table(value, f"{where}: tls"), f"{where}: tls")
        elif key in _CLUSTER_OPTIONS:
            name, kind = _CLUSTER_OPTIONS[key]
            fields[name] = scalar(value, kind, f"{where}: {key}")
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
    "ping_interval": ("ping_interval", DURATION),
    "ping_max": ("ping_max", int),
    "reply_ttl": ("reply_ttl", DURATION),
    "max_pending": ("max_pending", SIZE),
    "write_deadline": ("write_deadline", DURATION),
    "max_accounts": ("max_accounts", int),
}


def read_gateway(body: dict[str, Any], where: str) -> GatewayConfig:
    """nats-server's ``gateway`` block: name, listen, and ``gateways`` (remote clusters, each a
    table with ``name`` and ``url`` or ``urls``)."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "listen":
            hostport = host_port(value, f"{where}: listen")
            fields["host"], fields["port"] = hostport["host"], hostport["port"]
        elif key == "gateways":
            if not isinstance(value, list):
                raise ConfigError(f"{where}: gateways must be a list of tables")
            fields["gateways"] = tuple(_remote_gateway(as_table(g, where), where) for g in value)
        elif key == "tls":
            fields["tls"] = read_tls(as_table(value, f"{where}: tls"), f"{where}: tls")
        elif key in _GATEWAY_OPTIONS:
            name, kind = _GATEWAY_OPTIONS[key]
            fields[name] = scalar(value, kind, f"{where}: {key}")
        else:
            raise UnknownOption(body, key, {*_GATEWAY_OPTIONS, "listen", "gateways", "tls"}, where)
    if not fields.get("name"):
        raise ConfigError(f"{where}: a gateway needs a name (this cluster's)")
    return GatewayConfig(**fields)


_REDIS_OPTIONS: dict[str, type | str] = {
    "host": str,
    "port": int,
    "hard_limit": SIZE,
    "soft_limit": SIZE,
    "soft_seconds": DURATION,
    "maxmemory": SIZE,
    "notify_keyspace_events": str,
    "replicas": int,
}


def read_redis(body: dict[str, Any], where: str) -> RedisConfig:
    """The ``[redis]`` table."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _REDIS_OPTIONS:
            raise UnknownOption(body, key, _REDIS_OPTIONS, where)
        fields[key] = scalar(value, _REDIS_OPTIONS[key], f"{where}: {key}")
    if fields.get("maxmemory", 0) < 0:
        raise ConfigError(f"{where}: maxmemory must be 0 (no limit) or positive")
    if fields.get("replicas", 1) < 1:
        raise ConfigError(f"{where}: replicas must be at least 1")
    if parse_flags(fields.get("notify_keyspace_events", "").encode()) is None:
        raise ConfigError(f"{where}: notify_keyspace_events: {INVALID}")
    return RedisConfig(**fields)


_REPLICATION_OPTIONS: dict[str, type | str] = {
    "tick": DURATION,
    "election_ticks": int,
    "heartbeat_ticks": int,
    "snapshot_entries": int,
    "propose_timeout": DURATION,
}


def _strs_option(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where}: expected an array of names")
    if len(set(value)) != len(value):
        raise ConfigError(f"{where}: a name is listed twice")
    return tuple(value)


def read_replication(body: dict[str, Any], where: str) -> ReplicationConfig:
    """The ``[replication]`` table: Raft's clock and limits for the node's replica groups."""
    fields: dict[str, Any] = {}
    for key, value in body.items():
        if key == "members":
            fields[key] = _strs_option(value, f"{where}: {key}")
            continue
        if key not in _REPLICATION_OPTIONS:
            raise UnknownOption(body, key, [*_REPLICATION_OPTIONS, "members"], where)
        fields[key] = scalar(value, _REPLICATION_OPTIONS[key], f"{where}: {key}")
    try:
        return ReplicationConfig(**fields)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_REMOTE_GATEWAY = {"name", "url", "urls"}


def read_streams(value: Any, where: str) -> tuple[StreamConfig, ...]:
    """``[[streams]]``: each a table with ``name``, ``subjects`` and optionally ``account``,
    ``maxlen``, ``max_age`` (seconds, or a duration such as ``"90s"``, ``"15m"``, ``"168h"``) and
    ``max_bytes`` (bytes, or a size such as ``"64MB"``)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected an array of tables ([[streams]])")
    streams: list[StreamConfig] = []
    for body in value:
        body = as_table(body, where)
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
        maxlen = scalar(body.get("maxlen", 0), int, f"{spot}: maxlen")
        max_age = scalar(body.get("max_age", 0), DURATION, f"{spot}: max_age")
        max_bytes = scalar(body.get("max_bytes", 0), SIZE, f"{spot}: max_bytes")
        if maxlen < 0 or max_bytes < 0 or not 0 <= max_age < math.inf:
            raise ConfigError(f"{spot}: maxlen, max_age and max_bytes must be 0 (no limit) or positive")
        account = scalar(body.get("account", "$G"), str, f"{spot}: account")
        if any(s.name == name and s.account == account for s in streams):
            raise ConfigError(f"{spot}: a stream of that name is already defined in {account!r}")
        streams.append(StreamConfig(name, tuple(subjects), account, maxlen, max_age, max_bytes))
    return tuple(streams)


def _remote_gateway(body: dict[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    only(body, _REMOTE_GATEWAY, f"{where}: gateways")
    name = body.get("name")
    urls = body.get("urls", [])
    if "url" in body:
        urls = [body["url"], *urls]
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: each remote gateway needs a name")
    if not urls or not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ConfigError(f"{where}: gateway {name!r} needs url or urls")
    return name, tuple(check_urls(urls, f"{where}: gateway {name!r}"))


_AUTHORIZATION = {"users", "user", "password", "token", "timeout"}
_USER = {"user", "password", "pass", "token", "permissions"}


def read_authorization(body: dict[str, Any], where: str) -> list[UserConfig]:
    users = [read_user(as_table(u, where), where, "$G") for u in body.get("users", [])]
    single: dict[str, Any] = {k: body[k] for k in ("user", "password", "token") if k in body}
    if single:
        users.append(read_user(single, where, "$G"))
    only(body, _AUTHORIZATION, where)
    return users


def read_user(body: dict[str, Any], where: str, account: str) -> UserConfig:
    only(body, _USER, where)
    perms = body.get("permissions")
    return UserConfig(
        user=body.get("user"),
        password=body.get("password", body.get("pass")),
        token=body.get("token"),
        account=account,
        permissions=_permissions(as_table(perms, where), where) if perms is not None else None,
    )


def _permissions(body: dict[str, Any], where: str) -> Permissions:
    def subjects(value: Any) -> tuple[str, ...]:
        """A subject, or a list of them (nats-server takes either)."""
        return (value,) if isinstance(value, str) else tuple(map(str, value))

    def rule(value: Any) -> SubjectRule:
        if isinstance(value, str | list):  # bare subjects mean "allow"
            return SubjectRule(allow=subjects(value))
        table = as_table(value, f"{where}: permissions")
        only(table, {"allow", "deny"}, f"{where}: permissions")
        return SubjectRule(allow=subjects(table.get("allow", ())), deny=subjects(table.get("deny", ())))

    only(body, {"publish", "subscribe"}, f"{where}: permissions")
    return Permissions(publish=rule(body.get("publish", {})), subscribe=rule(body.get("subscribe", {})))


def check_users(users: list[UserConfig], where: str) -> None:
    for user in users:
        if (user.user is None) == (user.token is None):
            raise ConfigError(f"{where}: each user needs either user (with password) or token")
    names = [u.user for u in users if u.user is not None]
    if len(names) != len(set(names)):
        raise ConfigError(f"{where}: duplicate user")


def read_exports(value: Any, where: str) -> tuple[ExportConfig, ...]:
    """``exports: [{stream: "a.>"}, {service: "req.x", accounts: [B]}]``."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of exports")
    exports = []
    for body in value:
        body = as_table(body, where)
        only(body, {"stream", "service", "accounts"}, where)
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


def read_imports(value: Any, where: str) -> tuple[ImportConfig, ...]:
    """``imports: [{stream: {account: A, subject: "a.>"}, prefix: "p"}, {service: {account: A,
    subject: "req.x"}, to: "x"}]``: a stream's messages appear under ``prefix`` (or as ``to``), a
    service is requested on ``to`` (by default its own subject)."""
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of imports")
    imports = []
    for body in value:
        body = as_table(body, where)
        only(body, {"stream", "service", "prefix", "to"}, where)
        if ("stream" in body) == ("service" in body):
            raise ConfigError(f"{where}: each import is either a stream or a service")
        service = "service" in body
        kind = "service" if service else "stream"
        source = as_table(body[kind], f"{where}: {kind}")
        only(source, {"account", "subject"}, f"{where}: {kind}")
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


def check_sharing(accounts: list[AccountConfig], where: str) -> None:
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
