"""Reading a node's configuration: a file (TOML, or nats-server's own format read by
``node.config.natsconf``) or a mapping of the same shape into a ``Config``, and the checks a whole
configuration must pass however it was made (the command line's overrides run them too).

Each section's table is read by ``node.config.tables``; the top-level options and their
nats-server aliases are here.
"""

from __future__ import annotations

import os
import ssl
import tomllib
from pathlib import Path
from typing import Any

import attrs

from cluster.config import ClusterConfig
from node.config import natsconf
from node.config.options import (
    FSYNC_POLICIES,
    SYSTEM_ACCOUNT,
    AccountConfig,
    Config,
    ConfigError,
    StreamConfig,
    UserConfig,
)
from node.config.tables import (
    DURATION,
    SIZE,
    UnknownOption,
    as_table,
    check_sharing,
    check_users,
    host_port,
    only,
    read_authorization,
    read_cluster,
    read_exports,
    read_gateway,
    read_imports,
    read_redis,
    read_replication,
    read_streams,
    read_tls,
    read_user,
    scalar,
)
from transport.tls import client_context, server_context

__all__ = [
    "check_lame_duck",
    "check_tls",
    "from_mapping",
    "load",
    "parse_advertise",
    "reconcile_names",
]

_SCALARS: dict[str, type | str] = {
    "server_name": str,
    "host": str,
    "port": int,
    "http_host": str,
    "http_port": int,
    "https_port": int,
    "max_payload": SIZE,
    "max_control_line": SIZE,
    "max_pending": SIZE,
    "max_connections": int,
    "max_subscriptions": int,
    "ping_interval": DURATION,
    "ping_max": int,
    "auth_timeout": DURATION,
    "write_deadline": DURATION,
    "no_auth_user": str,
    "debug": bool,
    "log_file": str,
    "pid_file": str,
    "ports_file_dir": str,
    "store_dir": str,
    "appendfsync": str,
    "rewrite_percentage": int,
    "rewrite_min_size": SIZE,
    "client_advertise": str,
    "lame_duck_duration": DURATION,
    "lame_duck_grace_period": DURATION,
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


_SECTIONS = ("tls", "authorization", "cluster", "gateway", "redis", "accounts", "streams", "replication")


def from_mapping(data: dict[str, Any], *, where: str = "config") -> Config:
    """Build a Config from parsed TOML (or any mapping of the same shape)."""
    fields: dict[str, Any] = {}
    users: list[UserConfig] = []
    accounts: list[AccountConfig] = []
    streams: tuple[StreamConfig, ...] = ()
    for key, value in data.items():
        name = _ALIASES.get(key, key)
        if key == "listen":
            fields.update(host_port(value, f"{where}: listen"))
        elif key == "http":
            http = host_port(value, f"{where}: http")
            fields["http_host"], fields["http_port"] = http["host"], http["port"]
        elif key == "https":
            https = host_port(value, f"{where}: https")
            fields["http_host"], fields["https_port"] = https["host"], https["port"]
        elif key == "tls":
            fields["tls"] = read_tls(as_table(value, f"{where}: tls"), f"{where}: tls", clients=True)
        elif key == "authorization":
            body = as_table(value, f"{where}: authorization")
            users += read_authorization(body, f"{where}: authorization")
            if "timeout" in body:
                fields["auth_timeout"] = scalar(
                    body["timeout"], DURATION, f"{where}: authorization.timeout"
                )
        elif key == "cluster":
            fields["cluster"] = read_cluster(as_table(value, f"{where}: cluster"), f"{where}: cluster")
        elif key == "gateway":
            fields["gateway"] = read_gateway(as_table(value, f"{where}: gateway"), f"{where}: gateway")
        elif key == "replication":
            spot = f"{where}: replication"
            fields["replication"] = read_replication(as_table(value, spot), spot)
        elif key == "redis":
            fields["redis"] = read_redis(as_table(value, f"{where}: redis"), f"{where}: redis")
        elif key == "streams":
            streams = read_streams(value, f"{where}: streams")
        elif key == "accounts":
            for account, body in as_table(value, f"{where}: accounts").items():
                spot = f"{where}: accounts.{account}"
                only(as_table(body, spot), {"users", "exports", "imports"}, spot)
                accounts.append(
                    AccountConfig(
                        account,
                        exports=read_exports(body.get("exports", []), f"{spot}: exports"),
                        imports=read_imports(body.get("imports", []), f"{spot}: imports"),
                    )
                )
                for user in body.get("users", []):
                    users.append(read_user(as_table(user, spot), spot, account))
        elif name in _SCALARS:
            fields[name] = scalar(value, _SCALARS[name], f"{where}: {key}")
        else:
            raise UnknownOption(data, key, {*_SCALARS, *_ALIASES, *_SECTIONS}, where)
    check_users(users, where)
    no_auth_user = fields.get("no_auth_user")
    if no_auth_user is not None and no_auth_user not in {u.user for u in users}:
        raise ConfigError(
            f"{where}: no_auth_user: {no_auth_user!r} is not a user of authorization or of an account"
        )
    if fields.get("appendfsync", "everysec") not in FSYNC_POLICIES:
        raise ConfigError(f"{where}: appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
    known = {"$G", *(a.name for a in accounts)}
    check_sharing(accounts, where)
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
