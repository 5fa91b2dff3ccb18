"""The node as an operating-system process: its pid file, its ports file, ``--signal``, which
finds a running node and signals it, as nats-server's ``--signal`` does, and the tuning of Python's
cycle collector for a long-lived process.
"""

from __future__ import annotations

import array
import fcntl
import gc
import itertools
import json
import os
import signal
import socket
import struct
from pathlib import Path

import attrs

from node.config.options import Config

__all__ = [
    "COLLECTOR_THRESHOLDS",
    "COMMANDS",
    "PROCESS_NAME",
    "STEP_DOWN",
    "ProcessFiles",
    "SignalError",
    "find_nodes",
    "ports_info",
    "send_signal",
    "tune_collector",
]

PROCESS_NAME = "pubmesh"


COMMANDS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
    "stepdown": signal.SIGRTMIN,
}
"""``--signal`` commands and what they send (nats-server's ``CommandToSignal``, and ``stepdown``:
hand the replica groups the node leads to other voters, before maintenance)."""
STEP_DOWN = COMMANDS["stepdown"]
"""The signal that makes a node hand over the replica groups it leads (Linux's first real-time
signal: the classic ones all mean something already; a node of a release without it stops)."""


class SignalError(Exception):
    """``--signal`` could not be carried out; the message is nats-server's."""


COLLECTOR_THRESHOLDS = (10_000, 10, 10)
"""The cycle collector's thresholds in a node process (Python's defaults: 700, 10, 10)."""


def tune_collector() -> None:
    """Have Python's cycle collector run less often, and leave what the process made before
    serving (modules, classes, command tables) out of its full collections.

    A node keeps many small objects for as long as it runs (subscriptions, interest, keys), and
    with the default thresholds each full collection walks all of them again: a node learning
    100,000 subscriptions from a route spent about half of that time collecting (the joining
    node's resync, ``pubmesh bench resync``: 0.52-0.59 s with the defaults, 0.30-0.43 s with these
    thresholds). Garbage is still freed at once by reference counting; only cycles wait longer.
    """
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    gc.freeze()


def send_signal(argument: str, *, proc: str = "/proc") -> int:
    """Carry out ``--signal COMMAND[=PID]``, where PID may also be a pid file's path; without one,
    the only other ``pubmesh`` process running is signalled. Returns the pid signalled.

    Raises:
        SignalError: a bad command or pid, or no single node to signal.
    """
    command, *target = argument.split("=")
    if len(target) > 1:
        raise SignalError(f"invalid signal parameters: {target[1:]}")
    pid_text = _maybe_read_pid_file(target[0]) if target else ""
    if pid_text:
        try:
            pids = [int(pid_text)]
        except ValueError:
            raise SignalError(f"invalid pid: {pid_text}") from None
    else:
        pids = find_nodes(proc)
    if len(pids) > 1:
        raise SignalError("\n".join([f"multiple {PROCESS_NAME} processes running:", *map(str, pids)]))
    if not pids:
        raise SignalError(f"no {PROCESS_NAME} processes running")
    signum = COMMANDS.get(command)
    if signum is None:
        raise SignalError(f'unknown signal "{command}"')
    try:
        os.kill(pids[0], signum)
    except OSError as exc:
        raise SignalError(f'signal "{command}" {pids[0]}: {exc.strerror}') from None
    return pids[0]


def _maybe_read_pid_file(text: str) -> str:
    """A pid file's contents, if ``text`` names one; otherwise ``text`` itself."""
    try:
        return Path(text).read_text().strip()
    except (OSError, ValueError):
        return text.strip()


def find_nodes(proc: str = "/proc") -> list[int]:
    """Other running ``pubmesh`` processes: started as ``pubmesh`` or ``python -m node.run.cli``."""
    found = []
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # (gone meanwhile, or not ours to look at)
        module = any(a == b"-m" and b == b"node.run.cli" for a, b in itertools.pairwise(argv))
        if os.path.basename(argv[0]) == PROCESS_NAME.encode() or module:
            found.append(int(entry.name))
    return sorted(found)


@attrs.frozen
class Bound:
    """What a running node listens on, for its ports file."""

    host: str
    port: int
    http_port: int | None = None
    cluster_port: int | None = None
    redis_port: int | None = None


def ports_info(config: Config, bound: Bound) -> dict[str, list[str]]:
    """nats-server's ports file contents (``nats``, ``monitoring``, ``cluster``), with ``redis``
    for the Redis front door: every URL a listener answers at, an unspecified address standing for
    each address of the host's interfaces."""
    info = {"nats": _urls("tls" if config.tls else "nats", config.host, bound.port)}
    if bound.http_port is not None:
        scheme = "https" if config.https_port is not None else "http"
        info["monitoring"] = _urls(scheme, config.http_host, bound.http_port)
    if config.cluster is not None and bound.cluster_port is not None:
        scheme = "tls" if config.cluster.tls else "nats"
        info["cluster"] = _urls(scheme, config.cluster.host, bound.cluster_port)
    if config.redis is not None and bound.redis_port is not None:
        info["redis"] = _urls("redis", config.redis.host or config.host, bound.redis_port)
    return info


def _urls(scheme: str, host: str, port: int) -> list[str]:
    hosts = _interface_addresses() if host in ("", "0.0.0.0", "::") else [host]
    return [f"{scheme}://[{h}]:{port}" if ":" in h else f"{scheme}://{h}:{port}" for h in hosts]


def _interface_addresses() -> list[str]:
    """The IPv4 addresses of the host's interfaces (Linux's SIOCGIFADDR), loopback first."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = array.array("B", struct.pack("256s", name.encode()[:15]))
            try:
                fcntl.ioctl(probe.fileno(), 0x8915, request)  # SIOCGIFADDR
            except OSError:
                continue  # (no IPv4 address)
            found.append(socket.inet_ntoa(request.tobytes()[20:24]))
    return sorted(found, key=lambda a: not a.startswith("127.")) or ["127.0.0.1"]


@attrs.define
class ProcessFiles:
    """The pid file and ports file of a running node, written where its configuration says and
    removed when it stops (or when a reload moves them)."""

    pid_file: str | None = None
    ports_file: str | None = None

    def write_pid(self, path: str | None) -> None:
        """Write the pid to ``path`` (removing the previous pid file, if elsewhere).

        Raises:
            OSError: it cannot be written.
        """
        if path is not None:
            _write(path, str(os.getpid()))
        if self.pid_file is not None and self.pid_file != path:
            _remove(self.pid_file)
        self.pid_file = path

    def write_ports(self, directory: str | None, ports: dict[str, list[str]]) -> None:
        """Write ``pubmesh_<pid>.ports`` into ``directory`` (removing the previous one).

        Raises:
            OSError: it cannot be written.
        """
        path = None
        if directory is not None:
            path = str(Path(directory) / f"{PROCESS_NAME}_{os.getpid()}.ports")
            _write(path, json.dumps(ports, separators=(",", ":")))
        if self.ports_file is not None and self.ports_file != path:
            _remove(self.ports_file)
        self.ports_file = path

    def remove(self) -> None:
        for path in (self.pid_file, self.ports_file):
            if path is not None:
                _remove(path)
        self.pid_file = self.ports_file = None


def _write(path: str, text: str) -> None:
    """Write a whole file at once, so that a reader never sees it half written."""
    part = f"{path}.{os.getpid()}.tmp"
    Path(part).write_text(text)
    os.replace(part, path)


def _remove(path: str) -> None:
    Path(path).unlink(missing_ok=True)
