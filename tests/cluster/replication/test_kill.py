"""A replica group of three processes whose leader is killed with SIGKILL while it takes writes:
a new leader takes over, the killed member restarts from its store and catches up, and every
acknowledged write is applied exactly once, in the same order, on every member."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pipeline.local import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[3]


class Members:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = [free_port() for _ in range(3)]
        self.names = [f"n{i}" for i in range(1, 4)]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def directory(self, name: str) -> Path:
        return self.root / name

    def start(self, name: str) -> None:
        directory = self.directory(name)
        directory.mkdir(exist_ok=True)
        port = self.ports[self.names.index(name)]
        with (directory / "log").open("ab") as log:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.replication.member", name, str(directory),
                 str(port), *map(str, self.ports)],
                cwd=ROOT, stderr=log,
            )  # fmt: skip

    def status(self, name: str) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads((self.directory(name) / "status.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"role": "none", "term": 0, "applied": 0}
        return doc

    def acked(self) -> list[str]:
        lines: list[str] = []
        for name in self.names:
            path = self.directory(name) / "acked"
            if path.exists():
                lines += [line for line in path.read_text().splitlines() if line]
        return lines

    def leader(self) -> str | None:
        live = [n for n in self.names if n in self.processes and self.processes[n].poll() is None]
        leaders = [n for n in live if self.status(n)["role"] == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def settled(self) -> bool:
        """Whether no member recovers from its first start (``cluster.raft.recovery``): until then
        a member that did not vote in the first election counts as a failed one, and the group
        would not outlive its leader."""
        return not any(self.status(name).get("recovering", True) for name in self.names)

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        (self.directory(name) / "status.json").unlink(missing_ok=True)

    def stop_all(self) -> dict[str, list[str]]:
        applied = {}
        for name, process in self.processes.items():
            process.send_signal(signal.SIGTERM)
            process.wait(20)
            applied[name] = json.loads((self.directory(name) / "applied.json").read_text())
        self.processes.clear()
        return applied


@contextmanager
def members(root: Path) -> Iterator[Members]:
    group = Members(root)
    try:
        yield group
    finally:
        for process in group.processes.values():
            process.kill()
            process.wait(10)


def wait(predicate: Callable[[], T | bool | None], what: str, seconds: float = 30) -> T:
    deadline = time.monotonic() + seconds
    while not (found := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
    return found  # type: ignore[return-value]


def test_killing_the_leader_loses_no_acknowledged_write(tmp_path: Path) -> None:
    with members(tmp_path) as group:
        for name in group.names:
            group.start(name)
        leader = wait(group.leader, "a leader")
        wait(lambda: len(group.acked()) >= 50, "writes acknowledged")
        wait(group.settled, "no member recovering")
        leader = wait(group.leader, "a leader")
        group.kill(leader)
        killed_at = len(group.acked())
        successor = wait(lambda: (n := group.leader()) != leader and n, "a new leader")
        wait(lambda: len(group.acked()) >= killed_at + 50, "writes under the new leader")
        group.start(leader)  # (from its store: it catches up while writes go on)
        wait(lambda: group.status(leader)["applied"] >= killed_at, "the restarted member to catch up")
        (tmp_path / "stop").touch()
        time.sleep(0.3)  # (let the last proposal in flight finish)
        for _ in range(2):  # (twice: a status file may lag its member by a report)
            wait(
                lambda: len({group.status(n)["applied"] for n in group.names}) == 1,
                "every member to apply the same entries",
            )
            time.sleep(0.1)
        applied = group.stop_all()
    acked = group.acked()
    assert successor != leader
    reference = applied[successor]
    for name, entries in applied.items():
        assert entries == reference, name
    counts = Counter(reference)
    assert all(count == 1 for count in counts.values())
    missing = [value for value in acked if value not in counts]
    assert not missing, missing[:5]
    assert any(value.startswith(f"{leader}:") for value in acked)
