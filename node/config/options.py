"""A node's configuration: the options, their records and their defaults (as nats-server's).

Names follow nats-server's options so that its users recognise them (``max_payload``, ``ping_interval``,
``authorization``, ``accounts``), and the limits default to the values nats-server's code uses
(which differ from some of its documentation: control lines 4096 bytes, auth timeout 2 s, pending
64 MiB). Reading them from a file (TOML, or nats-server's own format) and checking them is
``node.config.load``'s.
"""

from __future__ import annotations

from typing import Any

import attrs

from cluster.config import ClusterConfig, GatewayConfig, ReplicationConfig
from transport.tls import TlsConfig

__all__ = [
    "FSYNC_POLICIES",
    "MAX_CONTROL_LINE",
    "MAX_PAYLOAD",
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
    "SubjectRule",
    "UserConfig",
]

MAX_CONTROL_LINE = 4096
"""nats-server's default ``max_control_line``: the longest protocol line a client may send."""
MAX_PAYLOAD = 1024 * 1024
"""nats-server's default ``max_payload``."""

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
    notify_keyspace_events: str = ""
    """redis-server's ``notify-keyspace-events`` at start (letters of ``Ag$lshzxeKEtmdn``; empty:
    no keyspace notifications)."""
    replicas: int = 1
    """Nodes that hold each key, when ``[replication] members`` places keys (``cluster.placement``)."""

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
    replication: ReplicationConfig = attrs.field(factory=ReplicationConfig)
    """Raft's clock and limits for replica groups (a clustered node with a ``store_dir`` and a
    ``server_name`` runs them)."""
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
