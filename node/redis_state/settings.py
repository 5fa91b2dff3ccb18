"""The Redis front door's run-time parameters that CONFIG SET may change and that nothing else on
the node owns (``maxmemory`` is ``node.data.keyspaces``', ``appendfsync`` the journal's,
``notify-keyspace-events`` the keyspace's notifier's, ``busy-reply-threshold`` the scripts'): one
``RedisSettings`` per node, read by whoever the parameter concerns.
"""

from __future__ import annotations

__all__ = ["RedisSettings"]


class RedisSettings:
    """The values of the parameters kept here: redis-server's defaults until CONFIG SET changes
    them, but for the subscribers' output limits (``pubsub_limits``: the node's ``[redis]``
    settings).

    Only the slow log and latency monitor settings and the stream node sizes change what the node
    does; ``timeout``, ``hz``, the list node size and the output limits of the ``normal`` and
    ``replica`` classes are kept and shown back only.
    """

    def __init__(self, pubsub_limits: tuple[int, int, int]) -> None:
        self.appendfsync = "everysec"
        """Shown back while the node keeps no journal (else the journal's policy is)."""
        self.stream_node_max_entries = 100
        self.stream_node_max_bytes = 4096
        self.list_max_listpack_size = -2
        """Kept and shown back only: the node holds no lists."""
        self.timeout = 0
        self.hz = 10
        self.slowlog_log_slower_than = 10000
        """Microseconds (negative: nothing is logged, 0: every command)."""
        self.slowlog_max_len = 128
        self.latency_monitor_threshold = 0
        """Milliseconds (0: nothing is recorded)."""
        self.latency_tracking = True
        """Whether each command's times are tracked (LATENCY HISTOGRAM, INFO latencystats)."""
        self.latency_percentiles = [50.0, 99.0, 99.9]
        """The percentiles INFO latencystats shows."""
        self.normal_limits = (0, 0, 0)
        self.replica_limits = (256 << 20, 64 << 20, 60)
        self.pubsub_limits = pubsub_limits
        """The output limits of subscribers: hard and soft bytes, soft seconds."""
        self.query_buffer_limit = 1 << 30
        """``client-query-buffer-limit``: the bytes one request may take on the wire (each Redis
        connection's parser holds it as ``max_request``)."""
