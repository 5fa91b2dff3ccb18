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
from collections.abc import Sequence
from functools import partial

import attrs
import trio

from cluster.config import ClusterConfig, GatewayConfig, parse_url
from node.broker import VERSION
from node.config.load import check_lame_duck, check_tls, load, reconcile_names
from node.config.natsconf import parse_duration
from node.config.options import FSYNC_POLICIES, Config, ConfigError, RedisConfig, UserConfig
from node.config.tables import check_urls
from node.data.store import StoreError
from node.run.launch import NodeHandle, StartupError, run_node
from node.run.logs import LogOutput
from node.run.process import (
    COMMANDS,
    STEP_DOWN,
    Bound,
    ProcessFiles,
    SignalError,
    ports_info,
    send_signal,
    tune_collector,
)
from node.run.reload import Reloader
from transport.tls import TlsConfig

__all__ = ["command_line_config", "main"]

log = logging.getLogger("pubmesh")


def _serve_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a pubmesh node.")
    p.add_argument(
        "-c", "--config", metavar="FILE",
        help="configuration file: nats-server's format if named *.conf, TOML if named *.toml, "
        "otherwise TOML when it parses as TOML and nats-server's format when not",
    )  # fmt: skip
    p.add_argument("-a", "--addr", "--net", dest="host", help="client listen address")
    p.add_argument("-p", "--port", type=int, help="client port (-1 or 0 picks a free one)")
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
    p.add_argument(
        "--no_advertise", action="store_true",
        help="give clients no URLs of the cluster's nodes, nor peers this node's",
    )  # fmt: skip
    p.add_argument("--client_advertise", metavar="HOST:PORT", help="the client URL to advertise")
    p.add_argument(
        "--lame_duck_duration", type=_duration, metavar="DURATION",
        help="time over which lame duck mode (SIGUSR2) closes clients (default: 2m)",
    )  # fmt: skip
    p.add_argument(
        "--lame_duck_grace_period", type=_duration, metavar="DURATION",
        help="wait before lame duck mode starts closing clients (default: 10s)",
    )  # fmt: skip
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
    p.add_argument("-l", "--log", dest="log_file", metavar="FILE", help="log to this file")
    p.add_argument("-P", "--pid", dest="pid_file", metavar="FILE", help="write the process id here")
    p.add_argument(
        "--ports_file_dir", metavar="DIR",
        help="write the URLs listened on to DIR/pubmesh_<pid>.ports (JSON)",
    )  # fmt: skip
    p.add_argument("-t", dest="check", action="store_true", help="check the configuration and exit")
    p.add_argument(
        "-sl", "--signal", metavar="SIGNAL[=PID]",
        help=f"signal a running pubmesh ({', '.join(COMMANDS)}); PID may be a pid file's path",
    )  # fmt: skip
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
            *("store_dir", "appendfsync", "log_file", "pid_file", "ports_file_dir"),
            *("client_advertise", "lame_duck_duration", "lame_duck_grace_period"),
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
    if args.no_advertise and cluster is not None:
        changes["cluster"] = attrs.evolve(cluster, no_advertise=True)
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
    check_lame_duck(config, "command line")
    return config


def _duration(text: str) -> float:
    """A duration flag: seconds, or Go's syntax (``30s``, ``2m``)."""
    seconds = parse_duration(text)
    if seconds is None:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a duration: {text!r}") from None
    return seconds


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


async def _serve(args: argparse.Namespace, config: Config, logs: LogOutput) -> None:
    """Run the node until SIGINT or SIGTERM; SIGHUP reloads the configuration, SIGUSR1
    reopens the log file and SIGUSR2 enters lame duck mode (after which the node stops by
    itself), as with nats-server; ``STEP_DOWN`` hands the replica groups it leads over."""
    files = ProcessFiles()
    watched = (
        signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, STEP_DOWN,
    )  # fmt: skip
    try:
        with trio.open_signal_receiver(*watched) as signals:
            try:
                files.write_pid(config.pid_file)
            except OSError as exc:
                raise StartupError(f"Could not write pidfile: {exc}") from exc
            async with trio.open_nursery() as nursery:
                handle: NodeHandle = await nursery.start(run_node, config)
                h = handle
                h.node.broker.config_file = args.config_path
                bound = Bound(h.host, h.port, h.http_port, h.cluster_port, h.redis_port)
                try:
                    files.write_ports(config.ports_file_dir, ports_info(h.node.config, bound))
                except OSError as exc:
                    log.error("Error writing ports file: %s", exc)
                reloader = Reloader(h.node, config, partial(_reread, args), logs, files, bound)
                nursery.start_soon(_stop_listening, handle, nursery.cancel_scope)
                async for signum in signals:
                    log.info("Trapped %r signal", signal.Signals(signum).name)
                    if signum == signal.SIGHUP:
                        reloader.reload()
                    elif signum == signal.SIGUSR1:
                        _reopen(logs)
                    elif signum == signal.SIGUSR2:
                        handle.lame_duck()
                    elif signum == STEP_DOWN:
                        if not handle.node.step_down():
                            log.warning("Step-down asked for, but this node runs no replica groups")
                    else:
                        log.info("Initiating Shutdown...")
                        handle.shutdown()
                        break
    finally:
        files.remove()


def _reread(args: argparse.Namespace) -> Config:
    """The configuration again, for a reload: the file, with the command line's flags on top."""
    if not args.config:
        raise ConfigError("can only reload config when a file is provided using -c or --config")
    return serve_config(args)


def _reopen(logs: LogOutput) -> None:
    try:
        logs.reopen()
    except OSError as exc:
        log.error("Unable to reopen the log file: %s", exc)
    else:
        log.info("File log re-opened")


async def _stop_listening(handle: NodeHandle, signals: trio.CancelScope) -> None:
    """Stop waiting for signals once the node has stopped by itself (after lame duck mode)."""
    await handle.finished.wait()
    signals.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from node.bench.cli import main as bench_main  # the load generator loads only when asked

        return bench_main(argv[1:])
    if argv and argv[0] == "local":
        from node.run.local import main as local_main

        return local_main(argv[1:])
    if argv and argv[0] == "pipeline":
        from pipeline.cli import main as pipeline_main  # needs the spark extra

        return pipeline_main(argv[1:])
    if argv and argv[0] == "serve":
        argv = argv[1:]
    args = _serve_parser("pubmesh serve").parse_args(argv)
    if args.signal:
        try:
            send_signal(args.signal)
        except SignalError as exc:
            print(f"pubmesh: {exc}", file=sys.stderr)
            return 1
        return 0
    logs = LogOutput()
    try:
        config = serve_config(args)
        args.config_path = os.path.abspath(args.config) if args.config else None
        if args.check:
            print(f"pubmesh: configuration file {args.config or ''} is valid", file=sys.stderr)
            return 0
        logs.use(config.log_file)
    except (ConfigError, ValueError, OSError) as exc:
        if args.check:
            print(f"pubmesh: {exc}", file=sys.stderr)
        else:
            log.critical("%s", exc)
        return 1
    logs.set_debug(config.debug)
    log.info("Starting pubmesh %s", VERSION)
    tune_collector()
    try:
        trio.run(_serve, args, config, logs)
    except BaseException as exc:  # (whatever stopped the node ends the process)
        errors = [e for e in _leaves(exc) if not isinstance(e, KeyboardInterrupt)]
        if not errors:
            return 0
        log.debug("Fatal error", exc_info=errors[0])
        log.critical("%s", _fatal_text(errors[0]))
        return 1
    finally:
        logs.close()
    return 0


def _fatal_text(error: BaseException) -> str:
    """What a fatal error's one log line says: its message, with its kind when that is a bug."""
    if isinstance(error, StartupError | StoreError | ConfigError | OSError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


if __name__ == "__main__":
    raise SystemExit(main())
