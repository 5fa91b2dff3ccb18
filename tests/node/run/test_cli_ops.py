"""The operator's command line without a running node: ``-t``, what a reload would change or refuse,
the ``--signal`` commands, and the process options a configuration file may set."""

from __future__ import annotations

import gc
import signal
from pathlib import Path

import pytest

from cluster.config import ClusterConfig
from node.config.load import load
from node.config.options import Config, UserConfig
from node.run.cli import command_line_config, main
from node.run.process import COLLECTOR_THRESHOLDS, COMMANDS, tune_collector
from node.run.reload import ReloadPlan, plan_reload
from transport.tls import TlsConfig

pytestmark = pytest.mark.timeout(30)


def test_check_flag_accepts_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text("port: 4333\nauthorization { user: a, password: b }\n")
    assert main(["-t", "-c", str(conf)]) == 0
    assert capsys.readouterr().err == f"pubmesh: configuration file {conf} is valid\n"


def test_check_flag_refuses_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text("port: 4333\nmax_paylod: 10\n")
    assert main(["-t", "-c", str(conf)]) == 1
    assert capsys.readouterr().err == (
        f"pubmesh: {conf}:2: unknown option 'max_paylod' (did you mean 'max_payload'?)\n"
    )
    assert main(["-t", "--tlscert", str(tmp_path / "missing.pem"), "--tlskey", str(conf)]) == 1
    assert capsys.readouterr().err.startswith("pubmesh: command line: tls: ")


def test_signal_commands_are_nats_servers_and_a_step_down() -> None:
    assert COMMANDS == {
        "stop": signal.SIGKILL,
        "quit": signal.SIGINT,
        "term": signal.SIGTERM,
        "reopen": signal.SIGUSR1,
        "reload": signal.SIGHUP,
        "ldm": signal.SIGUSR2,
        "stepdown": signal.SIGRTMIN,
    }


def test_process_options_from_a_file_and_flags(tmp_path: Path) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text(
        'logfile: "/var/log/p.log"\npid_file: "/run/p.pid"\nports_file_dir: "/run"\n'
        'listen: "127.0.0.1:-1"\ncluster { listen: "127.0.0.1:-1" }\n'
    )
    config = load(conf)
    assert (config.log_file, config.pid_file, config.ports_file_dir) == (
        "/var/log/p.log",
        "/run/p.pid",
        "/run",
    )
    assert (config.host, config.port) == ("127.0.0.1", -1)
    assert config.cluster is not None
    assert config.cluster.port == -1
    flags = command_line_config(["-c", str(conf), "-l", "x.log", "-P", "x.pid", "-p", "-1"])
    assert (flags.log_file, flags.pid_file, flags.port) == ("x.log", "x.pid", -1)


def test_plan_applies_reloadable_changes() -> None:
    old = Config(cluster=ClusterConfig(seeds=("nats://h:1", "nats://h:2")))
    new = old.evolve(
        users=(UserConfig(user="u", password="p"),),
        max_payload=2048,
        debug=True,
        cluster=ClusterConfig(seeds=("nats://h:2", "nats://h:3")),
    )
    assert plan_reload(old, new) == ReloadPlan(
        changed=("max_payload", "users", "debug"),
        seeds_added=("nats://h:3",),
        seeds_removed=("nats://h:1",),
    )
    assert plan_reload(old, old) == ReloadPlan()


def test_plan_refuses_the_rest_one_line_each_without_secrets() -> None:
    old = Config(cluster=ClusterConfig(name="a", secret="s1"))
    new = old.evolve(
        port=4333,
        users=(UserConfig(token="t"),),
        cluster=ClusterConfig(name="b", secret="s2"),
        tls=TlsConfig(cert_file="c.pem", key_file="k.pem"),
    )
    plan = plan_reload(old, new)
    assert plan.changed == ("users",)
    assert plan.refused == (
        "config reload not supported for port: old=4222, new=4333",
        "config reload not supported for tls",
        "config reload not supported for cluster.name: old=a, new=b",
        "config reload not supported for cluster.secret",
    )
    assert plan_reload(old, old.evolve(cluster=None)).refused == (
        "config reload not supported for cluster",
    )


@pytest.mark.timeout(10)
def test_a_node_process_collects_cycles_less_often_and_never_its_start_up() -> None:
    before = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == COLLECTOR_THRESHOLDS
        assert gc.get_freeze_count() > 1000  # (everything made before serving)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
