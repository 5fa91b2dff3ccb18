"""The super-cluster as the dashboard shows it, put together from rounds of system account answers.

Sans-I/O: ``Picture.update`` takes one round's answers (``Round``: per endpoint, the documents the
nodes sent back, as decoded JSON) and the time the round was asked, and keeps what the page needs:

- every node ever seen, ``up`` while it answers and ``down`` once it has missed ``MISSED_DOWN``
  rounds in a row (with the time it last answered); a down node's figures are null, not its last
  ones: nothing it has not just reported is shown as current;
- rates (messages and bytes per second, in and out) from the difference of its counters between two
  answers, over the difference of the times the node itself put in them; null when there is no
  previous answer or a counter went back (a restart);
- each route and gateway link ``<from>-><to>`` (server names) as its ``from`` node reports it: a
  route's pooled connections summed, a gateway's outbound connection; ``down`` when its ``from``
  node no longer lists it, or is down;
- per account its connections and subscriptions summed over the nodes that answered; the streams of
  every node; and a bounded history of rates per node and per link for the charts;
- events: those the page observes (a node or link going down or coming back, slow consumers
  counted) and the advisories the nodes published (``note_advisory``), the newest ``EVENTS`` kept.

Answers are other nodes' JSON: every field is read with its type checked, and what does not fit is
left out (null), never guessed.
"""

from __future__ import annotations

import collections
import datetime
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["EVENTS", "HISTORY", "MISSED_DOWN", "Picture", "Round"]

MISSED_DOWN = 2
"""Rounds a node may miss in a row before it is shown down."""
HISTORY = 180
"""Points of rate history kept per node and per link (one per round: three minutes)."""
EVENTS = 100
"""Events kept, the newest."""

Round = Mapping[str, list[dict[str, Any]]]
"""One round's answers: endpoint name -> the ``data`` of each answer (any order)."""

_COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")
_RATES = ("msgs_in_rate", "msgs_out_rate", "bytes_in_rate", "bytes_out_rate")


def _int(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(doc: Mapping[str, Any], key: str) -> float | None:
    value = doc.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(doc: Mapping[str, Any], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def _dict(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    return value if isinstance(value, list) else []


def go_seconds(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as monitoring writes it (nine fractional digits
    at most, UTC), or None for anything else."""
    head, _, frac = text.rstrip("Z").partition(".")
    if not text.endswith("Z") or (frac and not (frac.isdigit() and len(frac) <= 9)):
        return None
    try:
        when = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    return when.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)


@attrs.define
class _Counters:
    """Counters as last reported, and when (the reporter's clock), to turn the next into rates."""

    at: float | None = None
    values: tuple[int | None, ...] = (None, None, None, None)

    def rates(self, at: float | None, values: tuple[int | None, ...]) -> list[float | None]:
        """Per second since the last report (None where either is missing or went back); then the
        new report is kept."""
        rates: list[float | None] = [None] * len(values)
        if at is not None and self.at is not None and at > self.at:
            for i, (old, new) in enumerate(zip(self.values, values, strict=True)):
                if old is not None and new is not None and new >= old:
                    rates[i] = round((new - old) / (at - self.at), 2)
        self.at, self.values = at, values
        return rates


@attrs.define
class _Tracked:
    """A node or a link: its state, since when, its counters and its rate history."""

    state: str = "up"
    cluster: str = ""
    """A node's cluster (kept while it is down)."""
    since: float = 0.0
    last_seen: float = 0.0
    missed: int = 0
    counters: _Counters = attrs.Factory(_Counters)
    history: collections.deque[tuple[float, float | None, float | None]] = attrs.Factory(
        lambda: collections.deque(maxlen=HISTORY)
    )
    current: dict[str, Any] = attrs.Factory(dict)


def _traffic(doc: Mapping[str, Any]) -> tuple[int | None, ...]:
    return tuple(_int(doc, key) for key in _COUNTERS)


def _sum_traffic(docs: Iterable[Mapping[str, Any]]) -> tuple[int | None, ...]:
    totals: list[int | None] = [0, 0, 0, 0]
    for doc in docs:
        for i, value in enumerate(_traffic(doc)):
            total = totals[i]
            totals[i] = None if total is None or value is None else total + value
    return tuple(totals)


class Picture:
    """What the dashboard knows of the super-cluster, updated a round at a time.

    Args:
        observer: the name of the node the page is served by.
    """

    def __init__(self, observer: str) -> None:
        self.observer = observer
        self.nodes: dict[str, _Tracked] = {}
        self.links: dict[str, _Tracked] = {}
        self.ids: dict[str, str] = {}
        """Server id -> server name, of every node seen (gateway connections name their peer's id)."""
        self.accounts: list[dict[str, Any]] = []
        self.streams: list[dict[str, Any]] = []
        self.streams_time = 0.0
        """When the streams were last asked for (less often than the rest)."""
        self.events: collections.deque[dict[str, Any]] = collections.deque(maxlen=EVENTS)
        self.time = 0.0

    def _event(self, when: float, kind: str, text: str, server: str = "") -> None:
        self.events.append({"time": when, "kind": kind, "server": server, "text": text})

    def _set_state(self, name: str, tracked: _Tracked, state: str, when: float, what: str) -> None:
        if tracked.state != state:
            tracked.state, tracked.since = state, when
            self._event(when, f"{what}_{state}", f"{what} {name} {state}", name.split("->")[0])

    # -- one round ---------------------------------------------------------------------------------

    def update(self, answers: Round, now: float) -> None:
        """Take one round's answers, asked at ``now`` (seconds since the epoch)."""
        self.time = now
        by_name: dict[str, dict[str, dict[str, Any]]] = collections.defaultdict(dict)
        for endpoint, docs in answers.items():
            for doc in docs:
                name = _text(doc, "server_name")
                if name:
                    by_name[name][endpoint] = doc
        answered = {name for name, docs in by_name.items() if "STATSZ" in docs}
        for name in answered:
            self._node_answered(name, by_name[name], now)
        for name, tracked in self.nodes.items():
            if name not in answered:
                tracked.missed += 1
                if tracked.missed >= MISSED_DOWN:
                    self._set_state(name, tracked, "down", now, "node")
                    tracked.current = {}
                    tracked.counters = _Counters()
                    tracked.history.append((now, None, None))
        self._links(by_name, now)
        if "ACCSTATZ" in answers:
            self.accounts = self._accounts(by_name)
        if "STREAMZ" in answers:
            self.streams, self.streams_time = self._streams(by_name), now

    def _node_answered(self, name: str, docs: dict[str, dict[str, Any]], now: float) -> None:
        statsz = docs["STATSZ"]
        server = _dict(statsz, "server")
        tracked = self.nodes.get(name)
        if tracked is None:
            tracked = self.nodes[name] = _Tracked(since=now)
            self._event(now, "node_up", f"node {name} up", name)
        else:
            self._set_state(name, tracked, "up", now, "node")
        server_id = _text(server, "id")
        if server_id:
            self.ids[server_id] = name
        tracked.missed, tracked.last_seen = 0, now
        received, sent = _dict(statsz, "received"), _dict(statsz, "sent")
        counters = (
            _int(received, "msgs"),
            _int(sent, "msgs"),
            _int(received, "bytes"),
            _int(sent, "bytes"),
        )
        rates = tracked.counters.rates(go_seconds(_text(server, "time")), counters)
        tracked.history.append((now, rates[0], rates[1]))
        slow = _int(statsz, "slow_consumers")
        before = tracked.current.get("slow_consumers")
        if slow is not None and isinstance(before, int) and slow > before:
            self._event(now, "slow_consumer", f"{slow - before} slow consumer(s) on {name}", name)
        tracked.cluster = _text(server, "cluster")
        tracked.current = {
            "id": server_id,
            "version": _text(server, "ver"),
            "start": go_seconds(_text(statsz, "start")),
            "connections": _int(statsz, "connections"),
            "subscriptions": _int(statsz, "subscriptions"),
            "slow_consumers": slow,
            "mem": _int(statsz, "mem"),
            "cpu": _number(statsz, "cpu"),
            "routes": len(_list(statsz, "routes")),
            "gateways": len(_list(statsz, "gateways")),
            **dict(zip(_RATES, rates, strict=True)),
        }

    def _links(self, by_name: Mapping[str, Mapping[str, dict[str, Any]]], now: float) -> None:
        seen: dict[str, tuple[str, str, str, list[dict[str, Any]]]] = {}
        for name, docs in by_name.items():
            for route in _list(docs.get("ROUTEZ", {}), "routes"):
                if isinstance(route, dict):
                    peer = _text(route, "remote_name") or self.ids.get(_text(route, "remote_id"), "")
                    if peer:
                        seen.setdefault(f"{name}->{peer}", ("route", name, peer, []))[3].append(route)
            outbound = _dict(docs.get("GATEWAYZ", {}), "outbound_gateways")
            for cluster, gateway in outbound.items():
                conn = _dict(gateway, "connection") if isinstance(gateway, dict) else {}
                peer = self.ids.get(_text(conn, "name"), "")
                if peer:
                    seen[f"{name}->{peer}"] = ("gateway", name, peer, [conn | {"cluster": cluster}])
        for key, (kind, source, peer, conns) in seen.items():
            tracked = self.links.get(key)
            if tracked is None:
                tracked = self.links[key] = _Tracked(since=now)
                self._event(now, "link_up", f"{kind} {key} up", source)
            else:
                self._set_state(key, tracked, "up", now, kind)
            tracked.last_seen = now
            document = by_name[source].get("ROUTEZ" if kind == "route" else "GATEWAYZ", {})
            at = go_seconds(_text(document, "now"))
            rates = tracked.counters.rates(at, _sum_traffic(conns))
            tracked.history.append((now, rates[0], rates[1]))
            pending = [_int(c, "pending_size" if kind == "route" else "pending_bytes") for c in conns]
            tracked.current = {
                "kind": kind,
                "from": source,
                "to": peer,
                "connections": len(conns),
                "pending": None if None in pending else sum(p for p in pending if p is not None),
                "rtt": _text(conns[0], "rtt"),
                **dict(zip(_RATES, rates, strict=True)),
            }
        for key, tracked in self.links.items():
            kind = tracked.current.get("kind", "link")
            source = str(tracked.current.get("from", ""))
            reported = by_name.get(source, {}).get("ROUTEZ" if kind == "route" else "GATEWAYZ")
            source_down = self.nodes.get(source, _Tracked()).state == "down"
            if key not in seen and (reported is not None or source_down):
                self._set_state(key, tracked, "down", now, str(kind))
                tracked.current = {k: tracked.current.get(k) for k in ("kind", "from", "to")}
                tracked.counters = _Counters()
                tracked.history.append((now, None, None))

    @staticmethod
    def _accounts(by_name: Mapping[str, Mapping[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        accounts: dict[str, dict[str, Any]] = {}
        for name in sorted(by_name):
            for acc in _list(by_name[name].get("ACCSTATZ", {}), "account_statz"):
                if not isinstance(acc, dict) or not _text(acc, "acc"):
                    continue
                row = accounts.setdefault(
                    _text(acc, "acc"), {"account": _text(acc, "acc"), "connections": 0, "nodes": {}}
                )
                row["connections"] += _int(acc, "conns") or 0
                row["nodes"][name] = _int(acc, "num_subscriptions")
        return [accounts[a] for a in sorted(accounts)]

    @staticmethod
    def _streams(by_name: Mapping[str, Mapping[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        streams: list[dict[str, Any]] = []
        for name in sorted(by_name):
            for stream in _list(by_name[name].get("STREAMZ", {}), "streams"):
                if not isinstance(stream, dict):
                    continue
                groups = [g for g in _list(stream, "groups") if isinstance(g, dict)]
                lags = [_int(g, "lag") for g in groups]
                streams.append(
                    {
                        "server": name,
                        "account": _text(stream, "account"),
                        "db": _int(stream, "db"),
                        "name": _text(stream, "name"),
                        "length": _int(stream, "length"),
                        "bytes": _int(stream, "bytes"),
                        "last_id": _text(stream, "last_id"),
                        "groups": len(groups),
                        "pending": sum(_int(g, "pending") or 0 for g in groups),
                        "lag": None if None in lags else sum(x for x in lags if x is not None),
                    }
                )
        return streams

    def note_advisory(self, payload: bytes, when: float) -> None:
        """A connect or disconnect advisory a node published (ignored unless it reads as one)."""
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError):
            return
        if not isinstance(doc, dict):
            return
        kind = _text(doc, "type").rsplit(".", 1)[-1]
        client, server = _dict(doc, "client"), _text(_dict(doc, "server"), "name")
        who = _text(client, "name") or f"cid {_int(client, 'id')}"
        account = _text(client, "acc")
        if kind == "client_connect":
            self._event(when, "connect", f"{who} connected to {server} ({account})", server)
        elif kind == "client_disconnect":
            reason = _text(doc, "reason")
            label = "slow_consumer" if "slow consumer" in reason.lower() else "disconnect"
            self._event(when, label, f"{who} left {server} ({account}): {reason}", server)

    # -- what is sent --------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The current picture, as the page's ``snapshot`` event carries it."""
        clusters: dict[str, list[str]] = collections.defaultdict(list)
        nodes = []
        for name in sorted(self.nodes):
            tracked = self.nodes[name]
            clusters[tracked.cluster].append(name)
            nodes.append(
                {"name": name, "state": tracked.state, "since": tracked.since,
                 "last_seen": tracked.last_seen, "cluster": tracked.cluster, **tracked.current}
            )  # fmt: skip
        links = [
            {"link": key, "state": t.state, "since": t.since, **t.current}
            for key, t in sorted(self.links.items())
        ]
        return {
            "time": self.time,
            "observer": self.observer,
            "clusters": [{"name": c, "nodes": clusters[c]} for c in sorted(clusters)],
            "nodes": nodes,
            "links": links,
            "accounts": self.accounts,
            "streams": self.streams,
            "streams_time": self.streams_time,
            "events": list(self.events),
        }

    def history(self) -> dict[str, Any]:
        """Rate history per node and per link (``[time, in, out]`` messages per second), as the
        page's ``history`` event carries it to a viewer that just connected."""
        return {
            "nodes": {name: list(t.history) for name, t in self.nodes.items()},
            "links": {key: list(t.history) for key, t in self.links.items()},
        }
