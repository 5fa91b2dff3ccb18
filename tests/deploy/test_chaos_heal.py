"""How the chaos tool heals when the Docker daemon stalls: a heal step that timed out is tried once
more (each step looks before it acts), and a step that keeps timing out becomes a problem of the
run. The ``docker`` here is a shell script on ``PATH`` that stalls as told and records its calls; no
Docker is needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from deploy import chaos
from deploy.chaos import Breakage, Node

pytestmark = pytest.mark.timeout(30)

SCRIPT = """#!/bin/sh
echo "$*" >> "{log}"
calls=$(wc -l < "{log}")
if [ "$calls" -le {stalls} ]; then sleep 5; fi
case "$*" in
  *State.Paused*) echo true ;;
esac
"""


def stalling_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stalls: int) -> Path:
    log = tmp_path / "calls"
    log.touch()
    script = tmp_path / "docker"
    script.write_text(SCRIPT.format(log=log, stalls=stalls))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(chaos, "DOCKER_TIMEOUT", 0.5)
    return log


def paused(service: str) -> Breakage:
    broken = Breakage("net")
    broken.open.append(("pause", [Node(service, "east", f"c-{service}", 0, 0)]))
    return broken


def test_a_heal_step_that_stalled_once_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = stalling_docker(tmp_path, monkeypatch, stalls=1)
    assert paused("east1").heal() == []
    calls = log.read_text().splitlines()
    # the stalled look, the look again, then the unpause
    assert calls == ["inspect -f {{.State.Paused}} c-east1"] * 2 + ["unpause c-east1"]


def test_a_heal_step_that_keeps_stalling_is_a_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stalling_docker(tmp_path, monkeypatch, stalls=chaos.HEAL_ATTEMPTS)
    problems = paused("east1").heal()
    assert len(problems) == 1
    assert problems[0].startswith("could not heal pause of east1")
