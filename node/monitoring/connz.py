"""/connz: the node's client connections, NATS and Redis alike, as nats-server's ``Connz`` and
``ConnInfo`` show them (field names, their order, and which are left out when empty), because the
tools that read it were written against nats-server.

A connection's subscriptions as they are listed (``subs_of``, ``sub_detail``) serve /subsz too.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import Any

import attrs

from node.accounts.account import DEFAULT_ACCOUNT
from node.broker import Broker
from node.connection import Connection
from node.monitoring.gofmt import go_time, rtt, uptime
from node.monitoring.pacing import Pacer, paced_map, paced_sorted
from node.monitoring.state import DEFAULT_LIST_SIZE, BadRequest
from node.resp.connection import RespConnection
from routing import Subscription

__all__ = ["ConnState", "ConnzOptions", "connz", "sub_detail", "subs_of"]


class ConnState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"
    ALL = "all"


@attrs.frozen
class ConnzOptions:
    """The /connz query, decoded."""

    sort: str = "cid"
    auth: bool = False
    subs: bool = False
    subs_detail: bool = False
    offset: int = 0
    limit: int = DEFAULT_LIST_SIZE
    cid: int = 0
    state: ConnState = ConnState.OPEN
    user: str = ""
    account: str = ""


def _num_subs(conn: Connection) -> int:
    """A connection's subscriptions; a Redis client's shard channels (SSUBSCRIBE) are ones too."""
    if isinstance(conn, RespConnection):
        return len(conn.subs) + len(conn.shard)
    return len(conn.subs)


def subs_of(conn: Connection) -> list[Subscription]:
    """A connection's subscriptions (as ``_num_subs`` counts them), copied in one step."""
    if isinstance(conn, RespConnection) and conn.shard:
        return [*conn.subs.values(), *conn.shard.values()]
    return list(conn.subs.values())


def _end(conn: Connection, now: int) -> int:
    """When a connection's clock stops: now while open, at its close once closed."""
    return conn.stop_ns or now


_SortKey = Callable[[Connection, int], Any]
# Each sort: the key, and whether the largest comes first (nats-server's directions). Ties go by cid.
_SORTS: dict[str, tuple[_SortKey, bool]] = {
    "cid": (lambda c, now: c.cid, False),
    "start": (lambda c, now: c.start_ns, False),
    "subs": (lambda c, now: _num_subs(c), True),
    "pending": (lambda c, now: c.pending_bytes, True),
    "msgs_to": (lambda c, now: c.out_msgs, True),
    "msgs_from": (lambda c, now: c.in_msgs, True),
    "bytes_to": (lambda c, now: c.out_bytes, True),
    "bytes_from": (lambda c, now: c.in_bytes, True),
    "last": (lambda c, now: c.last_activity_ns, True),
    "idle": (lambda c, now: _end(c, now) - c.last_activity_ns, True),
    "uptime": (lambda c, now: _end(c, now) - c.start_ns, False),
    "stop": (lambda c, now: c.stop_ns, True),
    "reason": (lambda c, now: c.closing or "", False),
    "rtt": (lambda c, now: c.rtt_ns, True),
}


def sub_detail(sub: Subscription, cid: int, account: str | None) -> dict[str, Any]:
    """nats-server's ``SubDetail``; a Redis client's subscription also names its ``channel``
    (whose subject is ``$R.`` and the channel in hex when it is not a subject itself)."""
    detail: dict[str, Any] = {"account": account} if account else {}
    detail["subject"] = sub.subject
    if isinstance(sub.owner, RespConnection):
        detail["channel"] = sub.sid.decode("utf-8", "replace")
    if sub.queue:
        detail["qgroup"] = sub.queue
    detail |= {"sid": sub.sid.decode("utf-8", "replace"), "msgs": sub.delivered}
    if sub.max_msgs:
        detail["max"] = sub.max_msgs
    detail["cid"] = cid
    return detail


def _subject(sub: Subscription) -> str:
    return sub.subject


async def _conn_info(conn: Connection, now: int, opts: ConnzOptions, pace: Pacer) -> dict[str, Any]:
    end = _end(conn, now)
    info: dict[str, Any] = {
        "cid": conn.cid,
        "kind": "Client",
        "type": conn.kind,
        "ip": conn.host,
        "port": conn.port,
        "start": go_time(conn.start_ns),
        "last_activity": go_time(conn.last_activity_ns),
    }
    if isinstance(conn, RespConnection):
        info["resp_version"] = conn.writer.version  # (2 or 3, as HELLO chose)
    if conn.stop_ns:
        info["stop"] = go_time(conn.stop_ns)
    if conn.closing:
        info["reason"] = conn.closing
    info |= {
        "rtt": rtt(conn.rtt_ns),
        "uptime": uptime(end - conn.start_ns),
        "idle": uptime(end - conn.last_activity_ns),
        "pending_bytes": conn.pending_bytes,
        "in_msgs": conn.in_msgs,
        "out_msgs": conn.out_msgs,
        "in_bytes": conn.in_bytes,
        "out_bytes": conn.out_bytes,
        "subscriptions": _num_subs(conn),
    }
    for key in ("name", "lang", "version"):
        value = conn.options.get(key)
        if value:
            info[key] = str(value)
    if opts.auth:
        if conn.user is not None and conn.user.user:
            info["authorized_user"] = conn.user.user
        if conn.account.name != DEFAULT_ACCOUNT:
            info["account"] = conn.account.name
    subs = subs_of(conn) if opts.subs or opts.subs_detail else []
    if subs and opts.subs_detail:
        cid = conn.cid
        details = await paced_map(lambda s: sub_detail(s, cid, None), subs, pace)
        info["subscriptions_list_detail"] = details
    elif subs:
        info["subscriptions_list"] = await paced_map(_subject, subs, pace)
    return info


def _connections(broker: Broker, state: ConnState) -> list[object]:
    """Connections in the asked state (of any kind), copied in one step."""
    found: list[object] = []
    if state is not ConnState.CLOSED:
        found += broker.clients.values()
    if state is not ConnState.OPEN:
        found += broker.closed
    return found


async def connz(broker: Broker, opts: ConnzOptions, pace: Pacer) -> dict[str, Any]:
    """/connz: NATS client connections in the asked state and filters, sorted, then paged.

    Raises:
        BadRequest: an unknown sort, or a sort that only closed connections have.
    """
    if opts.sort not in _SORTS:
        raise BadRequest(f"invalid sorting option: {opts.sort}")
    if opts.sort in ("stop", "reason") and opts.state is not ConnState.CLOSED:
        raise BadRequest(f"sort by {opts.sort} only valid on closed connections")
    now = time.time_ns()
    conns: list[Connection] = []
    for c in _connections(broker, opts.state):
        if (
            isinstance(c, Connection)
            and (not opts.user or (c.user is not None and c.user.user == opts.user))
            and (not opts.account or c.account.name == opts.account)
        ):
            conns.append(c)
        await pace.tick()
    total = len(conns)
    limit = opts.limit
    if opts.cid:
        conns = [c for c in conns if c.cid == opts.cid]
        limit = 1
    key, descending = _SORTS[opts.sort]
    ordered = await paced_sorted(
        conns, lambda c: (-key(c, now) if descending else key(c, now), c.cid), pace, opts.offset + limit
    )
    page = ordered[opts.offset :]
    return {
        "server_id": broker.server_id,
        "now": go_time(now),
        "num_connections": len(page),
        "total": total,
        "offset": opts.offset,
        "limit": limit,
        "connections": [await _conn_info(c, now, opts, pace) for c in page],
    }
