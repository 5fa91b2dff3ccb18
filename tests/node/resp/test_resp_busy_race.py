"""A client's request that arrives as another client starts a script that turns busy is answered
BUSY at once, not held until the script ends: its connection's reader never keeps input it has
read while another task runs (a script busy on the node's thread reads the other sockets itself).
The request is sent the moment the script's request has gone, so that both arrive together, many
times over."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node.bench.ports import free_port
from tests.node.resp.test_resp_maxmemory import command

ROUNDS = 100
_LOOP = b"local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end"


def _reply(conn: socket.socket) -> bytes:
    return conn.recv(1 << 16)


def _race(port: int) -> list[bytes]:
    """Each round: the script starts on one connection while the other sends PING right after;
    what the first PING not answered PONG got (``held``, ending the rounds: no answer in 5 s)."""
    seen: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as other:
        for _ in range(ROUNDS):
            other.sendall(command(b"CONFIG", b"SET", b"lua-time-limit", b"10"))
            assert _reply(other) == b"+OK\r\n"
            with socket.create_connection(("127.0.0.1", port), timeout=5) as runner:
                runner.sendall(command(b"EVAL", _LOOP, b"0"))
                try:
                    for _ in range(100):
                        other.sendall(b"PING\r\n")
                        got = _reply(other)
                        if got != b"+PONG\r\n":
                            break
                except TimeoutError:  # (the reply is held until the script ends: end it)
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as killer:
                        killer.sendall(command(b"SCRIPT", b"KILL"))
                        assert _reply(killer) == b"+OK\r\n"
                    return [*seen, b"held"]
                seen.append(got[:5])
                other.sendall(command(b"SCRIPT", b"KILL"))
                assert _reply(other) == b"+OK\r\n"
                assert _reply(runner).startswith(b"-ERR Script killed by user")
    return seen


@pytest.mark.slow
def test_a_request_beside_a_script_turning_busy_is_answered_busy(tmp_path: Path) -> None:
    """Against a node process of its own (with the client in another process, the two race as
    they do in production; in one process the interpreter lock keeps them apart)."""
    port = free_port()
    args = [sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", "0"]
    args += ["--redis_port", str(port), "--store_dir", str(tmp_path)]
    with subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as node:
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the node did not start"
                    time.sleep(0.1)
            assert _race(port) == [b"-BUSY"] * ROUNDS
        finally:
            node.kill()
