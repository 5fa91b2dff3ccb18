"""Where a partition reads: spread over the nodes in ``url``, each on its own node's replica.

Partition ``n`` reads from node ``n`` of ``url`` (modulo their number; the next ones if it does not
answer) after ``READONLY``: on pubmesh with replicated keys, that node's own replica of the stream
then serves the partition's XRANGE calls, without a trip to the stream's leader, and a replica holds
committed entries only. redis-server and pubmesh without replicated keys refuse READONLY, and serve
the reads as usual.

A replica may lag its leader. Before reading, the partition waits until the replica's stream has
generated the last ID the planner saw (``Slice.fence``: the planner reads through the leader, so
every entry up to it is committed, and IDs only grow); one still behind after ``CATCH_UP`` seconds
is left (``READWRITE``) and the partition reads through the leader. Either way it reads every
entry of its slice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.offsets import stream_info
from pipeline.options import Endpoints, StreamId
from pipeline.resp import RespClient, ServerError
from pipeline.streams import Slice

__all__ = ["CATCH_UP", "on_replica", "partition_client"]

CATCH_UP = 10.0
"""Seconds a partition waits for its node's replica to hold its slice before reading elsewhere."""
_POLL = 0.02


@contextmanager
def partition_client(nodes: Endpoints, number: int, part: Slice) -> Iterator[RespClient]:
    """A connection for partition ``number`` to read ``part`` from."""
    with nodes.connect(first=number) as client:
        on_replica(client, part.stream, part.fence)
        yield client


def on_replica(client: RespClient, stream: str, fence: StreamId | None, wait: float = CATCH_UP) -> bool:
    """Turn ``client`` to its node's replica of ``stream`` once it holds every entry up to
    ``fence``: True; False when the node has no replicas, or when its replica did not catch up in
    ``wait`` seconds (the connection reads through the leader then)."""
    try:
        client.call("READONLY")
    except ServerError:
        return False  # (no replicas there: every read is the leader's, or the only copy)
    deadline = time.monotonic() + wait
    while True:
        info = stream_info(client, stream)
        if info is not None and (fence is None or info.last_generated >= fence):
            return True
        if time.monotonic() >= deadline:
            client.call("READWRITE")
            return False
        time.sleep(_POLL)
