"""/raftz: the replica groups the node is a member of, each as its Raft state shows it (nats-server
has no such endpoint; its /jsz ``raft=true`` is the nearest, and the shape here is pubmesh's own).

Per group: this node's ``role``, the ``leader`` (a server name; empty when none is known), the
``term``, the ``commit`` and ``applied`` indexes, the log's ``last_index`` and the index of its
``snapshot``, ``disk_error`` (why the group cannot save and so acknowledges nothing; empty when it
can), ``recovering`` (the node started on an empty store and votes for no one until its leader says
it holds what the group committed) and, on the leader, each other voter's ``match`` index, ``lag``
in entries and whether it is ``recovering``.
"""

from __future__ import annotations

import time
from typing import Any

from cluster.replication.group import GroupStatus
from node.monitoring.gofmt import go_time
from node.monitoring.state import MonitoredNode

__all__ = ["raftz"]


def _group(status: GroupStatus) -> dict[str, Any]:
    return {
        "name": status.name,
        "role": status.role,
        "leader": status.leader or "",
        "term": status.term,
        "commit": status.commit,
        "applied": status.applied,
        "last_index": status.last_index,
        "snapshot": status.snapshot_index,
        "disk_error": status.disk_failure or "",
        "recovering": status.recovering,
        "peers": [
            {"name": p.name, "match": p.match, "lag": p.lag, "recovering": p.recovering}
            for p in status.peers
        ],
    }


def raftz(node: MonitoredNode) -> dict[str, Any]:
    """/raftz: every replica group of the node, by name (none on a node that runs no groups)."""
    groups = node.replicas.status() if node.replicas is not None else []
    return {
        "server_id": node.broker.server_id,
        "server_name": node.broker.server_name,
        "now": go_time(time.time_ns()),
        "num_groups": len(groups),
        "groups": [_group(status) for status in groups],
    }
