"""The ``pubmesh`` command: ``pubmesh serve`` (the default), ``pubmesh local``, ``pubmesh bench`` and
``pubmesh pipeline``.

``serve`` takes the flags nats-server users know (``-p``, ``-a``, ``-m``, ``--user``, ``--pass``,
``--auth``, ``--tls``, ``-c``, ``-DV`` ...), so scripts and test harnesses written for nats-server can
start pubmesh instead; a command line that starts with a flag is taken as ``serve``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

import attrs
import trio

from cluster.config import ClusterConfig, GatewayConfig, parse_url
from node.broker import VERSION
from node.config import (
    FSYNC_POLICIES,
    Config,
    ConfigError,
    RedisConfig,
    UserConfig,
    check_tls,
    check_urls,
    load,
    reconcile_names,
)
from node.launch import run_node
from node.store import StoreError
from transport.tls import TlsConfig

__all__ = ["command_line_config", "main"]

log = logging.getLogger("pubmesh")

_LEVELS = {"DEBUG": "DBG", "INFO": "INF", "WARNING": "WRN", "ERROR": "ERR", "CRITICAL": "FTL"}


class _ServerLogFormat(logging.Formatter):
    """``[pid] 2026/11/22 07:05:00.123456 [INF] text``, the shape of nats-server's log lines."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int(record.msecs * 1000)
        level = _LEVELS.get(record.levelname, record.levelname[:3])
        return f"[{os.getpid()}] {stamp}.{micros:06d} [{level}] {record.getMessage()}"


def _serve_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a pubmesh node.")
    p.add_argument(
        "-c", "--config", metavar="FILE",
        help="configuration file: nats-server's format if named *.conf, TOML if named *.toml, "
        "otherwise TOML when it parses as TOML and nats-server's format when not",
    )  # fmt: skip
    p.add_argument("-a", "--addr", "--net", dest="host", help="client listen address")
    p.add_argument("-p", "--port", type=int, help="client port (0 picks a free one)")
    p.add_argument("-n", "--name", "--server_name", dest="server_name", help="server name")
    p.add_argument("-m", "--http_port", type=int, help="HTTP monitoring port")
    p.add_argument(
        "-ms", "--https_port", type=int, help="HTTPS monitoring port (uses the TLS certificate)"
    )
    p.add_argument("--http_host", help="HTTP monitoring address (default: the client address)")
    p.add_argument("--user", help="user required for connections")
    p.add_argument("--pass", dest="password", help="password required for connections")
    p.add_argument("--auth", help="authorization token required for connections")
    p.add_argument("--max_payload", type=int, help="largest message payload in bytes")
    p.add_argument("--tls", action="store_true", help="enable TLS for clients (no client certificates)")
    p.add_argument("--tlscert", metavar="FILE", help="server certificate file")
    p.add_argument("--tlskey", metavar="FILE", help="private key of the server certificate")
    p.add_argument("--tlscacert", metavar="FILE", help="authorities client certificates must chain to")
    p.add_argument("--tlsverify", action="store_true", help="enable TLS and require client certificates")
    p.add_argument(
        "--cluster", "--cluster_listen", dest="cluster_listen", metavar="URL",
        help="accept routes at this URL (nats://host:port)",
    )  # fmt: skip
    p.add_argument("--routes", help="comma-separated route URLs to dial (seeds)")
    p.add_argument("--cluster_name", help="the cluster's name (all its nodes must agree)")
    p.add_argument("--cluster_advertise", help="the route URL to give peers")
    p.add_argument("--gateway_name", help="this cluster's name among gateways")
    p.add_argument(
        "--gateway_listen", "--gateway", dest="gateway_listen", metavar="URL",
        help="accept gateway links at this URL (nats://host:port)",
    )  # fmt: skip
    p.add_argument(
        "--gateways", metavar="NAME=URL[,NAME=URL...]",
        help="other clusters to dial, by name (repeat a name for more URLs)",
    )  # fmt: skip
    p.add_argument("--gateway_advertise", help="the gateway URL to give other clusters")
    p.add_argument("--redis_port", type=int, help="Redis (RESP) port (0 picks a free one)")
    p.add_argument("--redis_host", help="Redis listen address (default: the client address)")
    p.add_argument("--store_dir", metavar="DIR", help="keep Redis keys in an append-only file here")
    p.add_argument("--appendfsync", choices=FSYNC_POLICIES, help="fsync policy (default: everysec)")
    p.add_argument("-D", "--debug", action="store_true", help="debug logging")
    p.add_argument(
        "-V", "--trace", action="store_true", help="trace logging (as verbose as debug logging here)"
    )
    p.add_argument("-v", "--version", action="version", version=f"pubmesh {VERSION}")
    return p


def command_line_config(argv: Sequence[str]) -> Config:
    """The configuration a ``pubmesh serve`` command line (without ``serve``) describes.

    Raises:
        ConfigError: a file or flag that does not make sense (argparse exits on unknown flags).
    """
    return serve_config(_serve_parser("pubmesh serve").parse_args(argv))


def serve_config(args: argparse.Namespace) -> Config:
    """The configuration a ``serve`` command line describes: file first, flags on top."""
    config = load(args.config) if args.config else Config()
    changes = {
        key: getattr(args, key)
        for key in (
            *("host", "port", "server_name", "http_port", "https_port", "max_payload"),
            *("store_dir", "appendfsync"),
        )
        if getattr(args, key) is not None
    }
    http_host = args.http_host or changes.get("host")
    if http_host:
        changes["http_host"] = http_host
    if args.user or args.password:
        if not (args.user and args.password):
            raise ConfigError("--user and --pass go together")
        changes["users"] = (UserConfig(user=args.user, password=args.password),)
    if args.auth:
        changes["users"] = (*changes.get("users", config.users), UserConfig(token=args.auth))
    tls = _tls_flags(args, config.tls)
    if tls is not None:
        changes["tls"] = tls
    cluster = config.cluster
    if args.cluster_listen or args.routes or args.cluster_name or args.cluster_advertise:
        cluster = cluster or ClusterConfig()
        if args.cluster_listen:
            host, port = parse_url(args.cluster_listen)
            cluster = attrs.evolve(cluster, host=host, port=port)
        if args.routes:
            seeds = tuple(url.strip() for url in args.routes.split(",") if url.strip())
            for url in seeds:
                parse_url(url)
            cluster = attrs.evolve(cluster, seeds=seeds)
        if args.cluster_name:
            cluster = attrs.evolve(cluster, name=args.cluster_name)
        if args.cluster_advertise:
            cluster = attrs.evolve(cluster, advertise=args.cluster_advertise)
        changes["cluster"] = cluster
    gateway = _gateway_flags(args, config.gateway)
    if gateway is not None:
        changes["gateway"] = gateway
    if args.redis_port is not None or args.redis_host:
        redis = config.redis or RedisConfig()
        if args.redis_port is not None:
            redis = redis.evolve(port=args.redis_port)
        if args.redis_host:
            redis = redis.evolve(host=args.redis_host)
        changes["redis"] = redis
    if args.debug or args.trace:
        changes["debug"] = True
    config = reconcile_names(config.evolve(**changes))
    check_tls(config, "command line")
    return config


def _tls_flags(args: argparse.Namespace, tls: TlsConfig | None) -> TlsConfig | None:
    """The client TLS settings after the flags (any of which turns TLS on); None when neither
    file nor flags set any."""
    if not (args.tls or args.tlsverify or args.tlscert or args.tlskey or args.tlscacert):
        return tls
    tls = tls or TlsConfig()
    for flag, field in (("tlscert", "cert_file"), ("tlskey", "key_file"), ("tlscacert", "ca_file")):
        if getattr(args, flag):
            tls = tls.evolve(**{field: getattr(args, flag)})
    if args.tlsverify:
        tls = tls.evolve(verify=True)
    return tls


def _gateway_flags(args: argparse.Namespace, gateway: GatewayConfig | None) -> GatewayConfig | None:
    """The gateway settings after the flags; None when neither file nor flags set any."""
    if not (args.gateway_name or args.gateway_listen or args.gateways or args.gateway_advertise):
        return gateway
    if gateway is None and not args.gateway_name:
        raise ConfigError("gateway flags need --gateway_name (or a [gateway] name in the file)")
    gateway = gateway or GatewayConfig(name=args.gateway_name)
    if args.gateway_name:
        gateway = gateway.evolve(name=args.gateway_name)
    if args.gateway_listen:
        host, port = parse_url(args.gateway_listen)
        gateway = gateway.evolve(host=host, port=port)
    if args.gateway_advertise:
        gateway = gateway.evolve(advertise=args.gateway_advertise)
    if args.gateways:
        remotes: dict[str, list[str]] = {}
        for item in args.gateways.split(","):
            name, sep, url = item.strip().partition("=")
            if not (sep and name and url):
                raise ConfigError(f"--gateways: expected NAME=URL, got {item.strip()!r}")
            remotes.setdefault(name, []).append(url)
        gateway = gateway.evolve(
            gateways=tuple((n, tuple(check_urls(u, "--gateways"))) for n, u in remotes.items())
        )
    return gateway


def _configure_logging(config: Config) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ServerLogFormat())
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG if config.debug else logging.INFO)


async def _serve(config: Config) -> None:
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(run_node, config)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                log.info("Trapped %r signal", signal.Signals(signum).name)
                handle.shutdown()
                break


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from node.bench.cli import main as bench_main  # the load generator loads only when asked

        return bench_main(argv[1:])
    if argv and argv[0] == "local":
        from node.local import main as local_main

        return local_main(argv[1:])
    if argv and argv[0] == "pipeline":
        from pipeline.cli import main as pipeline_main  # needs the spark extra

        return pipeline_main(argv[1:])
    if argv and argv[0] == "serve":
        argv = argv[1:]
    try:
        config = command_line_config(argv)
    except (ConfigError, ValueError) as exc:
        print(f"pubmesh: {exc}", file=sys.stderr)
        return 2
    _configure_logging(config)
    log.info("Starting pubmesh %s", VERSION)
    damaged: list[BaseException] = []
    try:
        trio.run(_serve, config)
    except* StoreError as group:
        damaged += _leaves(group)
    for error in damaged:
        log.error("%s", error)
    return 1 if damaged else 0


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


if __name__ == "__main__":
    raise SystemExit(main())
