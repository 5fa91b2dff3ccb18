"""A Redis connection as one line of CLIENT LIST (and CLIENT INFO), in redis-server 7.2's field
order: id, addresses, age and idle time, flags (``O`` monitor, ``P`` pub/sub, ``b`` blocked, ``x``
in MULTI, ``t``/``R``/``B`` tracking, ``r`` READONLY, ``T`` no-touch, else ``N``), database,
subscriptions, MULTI's queue, the query buffer and output bytes, the last command, user,
tracking's redirection, protocol and library. The fields redis-server counts for its own buffers
and that mean nothing here are 0. Reads only what the connection shows publicly.
"""

from __future__ import annotations

import time

from node.resp.connection import RespConnection

__all__ = ["client_line"]


def client_line(conn: RespConnection) -> bytes:
    """``conn`` as a line of CLIENT LIST (the fields clients and tools read)."""
    now = time.time_ns()
    user = (conn.user.user if conn.user is not None else None) or "default"
    flags = ("O" if conn.monitoring else "") + ("P" if conn.subscribed else "")
    flags += "b" if conn.waiting() else ""
    queued = conn.transaction.queued
    flags += "x" if queued is not None else ""
    tracking = conn.tracking
    if tracking is not None:
        flags += "t" + ("R" if tracking.broken else "") + ("B" if tracking.bcast else "")
    flags += ("r" if conn.readonly else "") + ("T" if conn.no_touch else "")
    flags = flags or "N"
    qbuf = conn.query_buffer
    multi = len(queued) if queued is not None else -1
    redirect = tracking.redirect if tracking is not None else -1
    line = (
        f"id={conn.cid} addr={conn.host}:{conn.port} laddr={conn.local_address} fd={conn.fd} "
        f"name={conn.name} "
        f"age={(now - conn.start_ns) // 10**9} idle={(now - conn.last_activity_ns) // 10**9} "
        f"flags={flags} db={conn.db} sub={len(conn.subs)} psub={len(conn.patterns)} "
        f"ssub={len(conn.shard)} multi={multi} qbuf={qbuf} qbuf-free=0 argv-mem=0 "
        f"multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem={conn.pending_bytes} "
        f"tot-mem={conn.pending_bytes + qbuf} events=r cmd={conn.last_command} user={user} "
        f"redir={redirect} resp={conn.writer.version} lib-name={conn.options.get('lang') or ''} "
        f"lib-ver={conn.options.get('version') or ''}\n"
    )
    return line.encode("utf-8", "surrogateescape")
