"""A node process and the operator: pid and ports files, SIGUSR1 (log reopen), SIGTERM and SIGINT
(clean stop), ``--signal``, and startup failures that end in one fatal log line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from node.run.process import SignalError, find_nodes, send_signal
from tests.node.run.signals_support import SERVE, WAIT, launch, ready, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def _talk(port: int) -> bytes:
    """Round-trip a PING with the node at ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as conn:
        conn.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        got = b""
        while not got.endswith(b"PONG\r\n"):
            chunk = conn.recv(4096)
            assert chunk, got
            got += chunk
        return got


def test_pid_and_ports_files_random_ports_and_a_clean_stop(tmp_path: Path) -> None:
    node = ready(launch(tmp_path, "-m", "-1", "--redis_port", "-1"))
    assert node.pid_file.read_text() == str(node.pid)
    ports = node.ports()
    assert sorted(ports) == ["monitoring", "nats", "redis"]
    port = node.port()
    assert ports["nats"] == [f"nats://127.0.0.1:{port}"]
    assert port not in (0, 4222)
    assert ports["monitoring"] == [f"http://127.0.0.1:{node.port('monitoring')}"]
    assert ports["redis"][0].startswith("redis://127.0.0.1:")
    assert _talk(port).startswith(b"INFO ")
    with socket.create_connection(("127.0.0.1", node.port("monitoring")), timeout=WAIT) as http:
        http.sendall(b"GET /varz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert http.recv(100).startswith(b"HTTP/1.1 200")

    assert node.stop() == 0
    log = node.log()
    assert "[INF] Trapped 'SIGTERM' signal" in log
    assert log.rstrip().endswith("[INF] Server Exiting..")
    assert not node.pid_file.exists()
    assert not node.ports_file.exists()


def test_sigusr1_reopens_a_rotated_log_file(tmp_path: Path) -> None:
    node = ready(launch(tmp_path))
    try:
        node.wait_for_log("Server is ready")
        node.log_file.rename(tmp_path / "node.log.1")
        node.send(signal.SIGUSR1)
        until(node.log_file.exists, "a new log file")
        node.wait_for_log("[INF] File log re-opened")
        rotated = (tmp_path / "node.log.1").read_text()
        assert "Server is ready" in rotated
        assert "Trapped 'SIGUSR1' signal" in rotated  # (written before the file was reopened)
        assert "Server is ready" not in node.log()
    finally:
        assert node.stop() == 0
    assert "Server Exiting.." in node.log()


def test_signal_flag_with_a_pid_and_a_pid_file(tmp_path: Path) -> None:
    node = ready(launch(tmp_path))

    def signal_flag(argument: str) -> subprocess.CompletedProcess[str]:
        command = [*SERVE, "--signal", argument]
        return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)

    try:
        done = signal_flag(f"reopen={node.pid}")
        assert (done.returncode, done.stderr) == (0, "")
        node.wait_for_log("File log re-opened")
        assert signal_flag(f"reload={node.pid_file}").returncode == 0
        node.wait_for_log("Trapped 'SIGHUP' signal")
        node.wait_for_log(
            "[ERR] Failed to reload server configuration: can only reload config when a file is "
            "provided using -c or --config"
        )
        done = signal_flag(f"bogus={node.pid}")
        assert (done.returncode, done.stderr) == (1, 'pubmesh: unknown signal "bogus"\n')
        done = signal_flag(f"quit={node.pid_file}")
        assert done.returncode == 0
        assert node.process.wait(timeout=WAIT) == 0
        assert "Trapped 'SIGINT' signal" in node.log()
    finally:
        node.stop()


def test_signal_errors_and_finding_the_only_node(tmp_path: Path) -> None:
    with pytest.raises(SignalError, match=r"^invalid pid: nope$"):
        send_signal("reload=nope")
    with pytest.raises(SignalError, match=r"^invalid signal parameters: \['2'\]$"):
        send_signal("reload=1=2")
    proc = tmp_path / "proc"
    for pid, argv in ((111, b"/usr/bin/python3\0other.py\0"), (os.getpid(), b"pubmesh\0serve\0")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(argv)
    (proc / "self").mkdir()
    with pytest.raises(SignalError, match=r"^no pubmesh processes running$"):
        send_signal("reload", proc=str(proc))

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (proc / str(sleeper.pid)).mkdir()
        (proc / str(sleeper.pid) / "cmdline").write_bytes(b"/venv/bin/pubmesh\0serve\0")
        assert find_nodes(str(proc)) == [sleeper.pid]
        assert send_signal("term", proc=str(proc)) == sleeper.pid
        assert sleeper.wait(timeout=WAIT) == -signal.SIGTERM
        (proc / "222").mkdir()
        (proc / "222" / "cmdline").write_bytes(b"python3\0-m\0node.run.cli\0serve\0")
        with pytest.raises(SignalError) as many:
            send_signal("reload", proc=str(proc))
        assert str(many.value) == f"multiple pubmesh processes running:\n222\n{sleeper.pid}"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_port_in_use_is_one_fatal_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [*SERVE, "-a", "127.0.0.1", "-p", str(port), "-P", str(tmp_path / "pid")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0].endswith("[INF] Starting pubmesh 0.1.0")
    assert len(lines) == 2, done.stderr
    assert lines[1].endswith(
        f'[FTL] Error listening on port: 127.0.0.1:{port}, "bind: address already in use"'
    )
    assert not (tmp_path / "pid").exists()


@pytest.mark.parametrize(
    ("flags", "fatal"),
    [
        (["--tlscert", "/nonexistent.pem", "--tlskey", "/none.key"], "command line: tls: "),
        (["-c", "/nonexistent.conf"], "/nonexistent.conf: "),
        (["-P", "/nonexistent/dir/pid"], "Could not write pidfile: "),
    ],
)
def test_startup_errors_are_one_fatal_line(flags: list[str], fatal: str) -> None:
    command = [*SERVE, "-a", "127.0.0.1", "-p", "-1", *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)
    assert done.returncode == 1
    fatal_lines = [line for line in done.stderr.splitlines() if "[FTL]" in line]
    assert len(fatal_lines) == 1, done.stderr
    assert f"[FTL] {fatal}" in fatal_lines[0]
    assert "Traceback" not in done.stderr
