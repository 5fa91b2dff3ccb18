"""``pubmesh --signal stepdown=PID`` (or ``POST /raftz/stepdown`` on its monitoring port) on a real
node leading replica groups: it hands every one of them to another voter, keeps serving, and writes
through it go on."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.cluster.replication.jepsen import ROOT, Node, leaders, wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

NAMES = ("a", "b", "c")


def post(node: Node, path: str, method: str = "POST") -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{node.http_port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


@pytest.mark.parametrize("asked", ["signal", "http"])
def test_a_leader_asked_to_step_down_hands_its_groups_over(tmp_path: Path, asked: str) -> None:
    nodes = [Node(name, tmp_path) for name in NAMES]
    try:
        for node in nodes:
            node.configure(NAMES, [n.route_port for n in nodes], "50ms")
            node.start()
        led = wait(lambda: leaders(nodes, len(NAMES)), "every group's leader")
        name = next(iter(led.values()))
        leader = next(node for node in nodes if node.name == name)
        assert leader.process is not None
        if asked == "signal":
            signal = [sys.executable, "-m", "node.run.cli", "--signal", f"stepdown={leader.process.pid}"]
            subprocess.run(signal, cwd=ROOT, check=True, timeout=30)
        else:
            assert post(leader, "/raftz/stepdown", "GET")[0] == 405
            status, body = post(leader, "/raftz/stepdown")
            assert status == 200, body
            assert set(json.loads(body)["handing_over"]) == {g for g, n in led.items() if n == name}
            assert post(leader, "/raftz/stepdown")[0] == 429, "not again at once"

        def handed_over() -> dict[str, str] | None:
            now = leaders(nodes, len(NAMES))
            return now if now is not None and name not in now.values() else None

        now = wait(handed_over, "the groups handed over", seconds=15)
        assert set(now) == set(led)
        assert leader.alive
        with leader.redis() as r:  # (it serves every key still, forwarding to the new leaders)
            for group in range(len(NAMES)):
                assert r.xadd(f"after-{group}", {"n": "1"})
    finally:
        for node in nodes:
            if node.alive:
                node.kill()
