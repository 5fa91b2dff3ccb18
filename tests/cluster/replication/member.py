"""One member of replica group ``g`` as a process of its own, for tests that SIGKILL it.

    python -m tests.cluster.replication.member NAME DIR ROUTE_PORT ALL_ROUTE_PORTS...

It runs a clustered node (routes on ``ROUTE_PORT``, the others seeded, store in ``DIR/store``) with
its side of group ``g``, whose voters are ``n1``, ``n2``, ... one per route port listed (NAME is
``n<i>`` for the i-th, ROUTE_PORT). While it leads and the
file ``DIR/../stop`` does not exist, it proposes ``<name>:<pid>:<counter>`` entries one after the
other, appending each acknowledged one to ``DIR/acked`` (flushed before the next). Every 20 ms it
writes ``DIR/status.json`` (role, term, applied count, whether it recovers from its first start:
``cluster.raft.recovery``); on SIGTERM it writes everything its state machine applied to
``DIR/applied.json`` and exits.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import trio

from cluster.config import ClusterConfig, ReplicationConfig
from cluster.replication.group import Group, GroupSpec, ProposalError
from node.config.options import Config
from node.run.launch import run_node
from tests.cluster.replication.machines import Recorder


def _write(path: Path, doc: object) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(doc))
    os.replace(temporary, path)


async def _propose(group: Group, name: str, directory: Path) -> None:
    counter = 0
    stop = directory.parent / "stop"
    with (directory / "acked").open("a") as acked:
        while not stop.exists():
            if group.role.value != "leader":
                await trio.sleep(0.01)
                continue
            counter += 1
            value = f"{name}:{os.getpid()}:{counter}"
            try:
                await group.propose(value.encode())
            except ProposalError:
                continue
            acked.write(value + "\n")
            acked.flush()


async def _report(group: Group, machine: Recorder, directory: Path) -> None:
    while True:
        status = group.status()
        _write(directory / "status.json",
               {"role": status.role, "term": status.term, "applied": len(machine.applied),
                "recovering": status.recovering})  # fmt: skip
        await trio.sleep(0.02)


async def main(name: str, directory: Path, port: int, ports: list[int]) -> None:
    voters = frozenset(f"n{i}" for i in range(1, len(ports) + 1))
    seeds = tuple(f"nats://127.0.0.1:{p}" for p in ports if p != port)
    config = Config(
        server_name=name,
        host="127.0.0.1",
        port=0,
        store_dir=str(directory / "store"),
        cluster=ClusterConfig(
            name="kill", host="127.0.0.1", port=port, seeds=seeds, ping_interval=0.5, ping_max=3
        ),
        replication=ReplicationConfig(tick=0.05),
    )
    machine = Recorder()
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(run_node, config)
            assert handle.node.replicas is not None
            group = await handle.node.replicas.start_group(GroupSpec("g", voters), machine)
            nursery.start_soon(_propose, group, name, directory)
            nursery.start_soon(_report, group, machine, directory)
            async for _ in signals:
                _write(directory / "applied.json", [entry.decode() for entry in machine.applied])
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    trio.run(main, sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), [int(p) for p in sys.argv[4:]])
