"""``pubmesh --signal stepdown=PID`` on a real node leading replica groups: it hands every one of
them to another voter, keeps serving, and writes through it go on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.replication.jepsen import ROOT, Node, leaders, wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

NAMES = ("a", "b", "c")


def test_a_leader_signalled_to_step_down_hands_its_groups_over(tmp_path: Path) -> None:
    nodes = [Node(name, tmp_path) for name in NAMES]
    try:
        for node in nodes:
            node.configure(NAMES, [n.route_port for n in nodes], "50ms")
            node.start()
        led = wait(lambda: leaders(nodes, len(NAMES)), "every group's leader")
        name = next(iter(led.values()))
        leader = next(node for node in nodes if node.name == name)
        assert leader.process is not None
        signal = [sys.executable, "-m", "node.run.cli", "--signal", f"stepdown={leader.process.pid}"]
        subprocess.run(signal, cwd=ROOT, check=True, timeout=30)

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
