"""Configuration reload (SIGHUP), as nats-server does it: the file is read again, and either every
change is applied to the running node or, when any option changed that cannot change while it
runs, none is.

Reloadable: users, passwords, tokens, permissions and accounts (``authorization``, ``accounts``,
``no_auth_user``, the auth timeout), logging (``debug``/``trace``, ``log_file``), ``pid_file``,
``ports_file_dir``, the limits ``max_payload``, ``max_control_line``, ``max_connections``,
``ping_interval``, ``ping_max``, ``write_deadline``, ``client_advertise`` (clients and route
peers are told at once), and the cluster's route seeds. Anything else (ports, addresses, names,
TLS, gateways, Redis, streams, the store) is refused with one line per option:
``config reload not supported for <option>: old=..., new=...``.

Connected clients are then told (``Connection.reload``): NATS clients are treated as nats-server
treats them (``ClientConnection.reload``); Redis clients keep what they connected with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from cluster.config import ClusterConfig
from node.accounts.auth import Authenticator
from node.config.options import Config, ConfigError
from node.connection import Reason
from node.nats.discovery import own_urls
from node.run.logs import LogOutput
from node.run.node import Node
from node.run.process import Bound, ProcessFiles, ports_info

__all__ = ["ReloadPlan", "Reloader", "plan_reload"]

log = logging.getLogger("pubmesh")

_AUTH = ("users", "accounts", "auth_timeout", "no_auth_user")
_OTHERS = (
    *("debug", "log_file", "pid_file", "ports_file_dir"),
    *("max_payload", "max_control_line", "max_connections"),
    *("ping_interval", "ping_max", "write_deadline", "client_advertise"),
)
_RELOADABLE = frozenset((*_AUTH, *_OTHERS))
_SECRET = ("secret", "password", "token")


@attrs.frozen
class ReloadPlan:
    """What a reload would change."""

    changed: tuple[str, ...] = ()
    """Reloadable options (of ``Config``) with new values."""
    seeds_added: tuple[str, ...] = ()
    seeds_removed: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()
    """One message per option that changed and cannot be reloaded: if any, nothing is applied."""


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """Compare the configuration the node was started with (before ports were bound) and the one
    the files and flags describe now."""
    changed: list[str] = []
    refused: list[str] = []
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    for name, was, now in _differences(old, new):
        if name in _RELOADABLE:
            changed.append(name)
        elif name == "cluster" and isinstance(was, ClusterConfig) and isinstance(now, ClusterConfig):
            added = tuple(u for u in now.seeds if u not in was.seeds)
            removed = tuple(u for u in was.seeds if u not in now.seeds)
            refused += (
                _refusal(f"cluster.{field}", before, after)
                for field, before, after in _differences(was.evolve(seeds=()), now.evolve(seeds=()))
            )
        else:
            refused.append(_refusal(name, was, now))
    return ReloadPlan(tuple(changed), added, removed, tuple(refused))


def _differences(old: Any, new: Any) -> Iterator[tuple[str, Any, Any]]:
    for field in attrs.fields(type(old)):
        was, now = getattr(old, field.name), getattr(new, field.name)
        if was != now:
            yield field.name, was, now


def _refusal(name: str, was: Any, now: Any) -> str:
    text = f"config reload not supported for {name}"
    if name.rpartition(".")[2] in _SECRET or attrs.has(type(was)) or attrs.has(type(now)):
        return text  # (no secrets in the log, and no walls of nested settings)
    return f"{text}: old={was}, new={now}"


@attrs.define
class Reloader:
    """Reloads a running node's configuration.

    Args:
        node: the running node.
        started: the configuration it was started with (as files and flags gave it).
        read: reads the configuration again (the file, with the command line's flags on top).
        logs, files: the process's log output, and its pid and ports files.
        bound: the ports it listens on (for a new ports file).
    """

    node: Node
    started: Config
    read: Callable[[], Config]
    logs: LogOutput
    files: ProcessFiles
    bound: Bound

    def reload(self) -> bool:
        """Reload; whatever fails is logged and leaves the node as it was. Returns whether the
        new configuration is in force."""
        try:
            new = self.read()
        except (ConfigError, ValueError) as exc:
            log.error("Failed to reload server configuration: %s", exc)
            return False
        plan = plan_reload(self.started, new)
        for refusal in plan.refused:
            log.error("Failed to reload server configuration: %s", refusal)
        if plan.refused:
            return False
        try:
            self._apply_files(new, plan.changed)
        except OSError as exc:
            log.error("Failed to reload server configuration: %s", exc)
            return False
        self._apply(new, plan)
        self.started = new
        log.info("Reloaded server configuration")
        return True

    def _apply_files(self, new: Config, changed: tuple[str, ...]) -> None:
        """Log, pid and ports files first: these are what can still fail."""
        if "log_file" in changed:
            self.logs.use(new.log_file)
            log.info("Reloaded: log_file = %s", new.log_file or "")
        if "pid_file" in changed:
            self.files.write_pid(new.pid_file)
            log.info("Reloaded: pid_file = %s", new.pid_file or "")
        if "ports_file_dir" in changed:
            live = self.node.config.evolve(ports_file_dir=new.ports_file_dir)
            self.files.write_ports(new.ports_file_dir, ports_info(live, self.bound))
            log.info("Reloaded: ports_file_dir = %s", new.ports_file_dir or "")

    def _apply(self, new: Config, plan: ReloadPlan) -> None:
        node, broker = self.node, self.node.broker
        live = node.config.evolve(**{name: getattr(new, name) for name in plan.changed})
        if node.routes is not None and new.cluster is not None and live.cluster is not None:
            live = live.evolve(cluster=live.cluster.evolve(seeds=new.cluster.seeds))
        node.server.config = broker.config = live
        for name in plan.changed:
            if name == "debug":
                self.logs.set_debug(live.debug)
            if name not in _AUTH and name not in ("log_file", "pid_file", "ports_file_dir"):
                log.info("Reloaded: %s = %s", name, getattr(live, name))
        if any(name in _AUTH for name in plan.changed):
            broker.auth = Authenticator(live)
            for account in live.accounts:
                broker.account(account.name)
            log.info("Reloaded: authorization users")
            log.info("Reloaded: accounts")
        for client in list(broker.clients.values()):
            client.reload()
        excess = len(broker.clients) - live.max_connections
        if excess > 0:
            for client in list(broker.clients.values())[-excess:]:
                client.close(Reason.MAX_CONNECTIONS)
            log.info("Closed %d connections to fall within max_connections", excess)
        if "client_advertise" in plan.changed:
            node.set_client_urls(own_urls(live.host, broker.port, live.client_advertise))
        if node.routes is not None and (plan.seeds_added or plan.seeds_removed):
            node.routes.set_seeds(live.cluster.seeds if live.cluster is not None else ())
            log.info("Reloaded: cluster routes")
