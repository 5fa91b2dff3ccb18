"""The node's HTTP monitoring server: nats-server's endpoints, served by hypercorn on trio.

Operators point ``curl``, ``nats-top``, dashboards and Prometheus at a NATS server's monitoring port,
so paths, query parameters, status codes and error texts follow nats-server: ``/varz``, ``/connz``,
``/subsz`` (and its alias ``/subscriptionsz``), ``/routez``, ``/gatewayz``, ``/accountz``,
``/accstatz``, ``/healthz``, plus ``/streamz`` (Redis streams), ``/raftz`` (replica groups),
``/metrics`` in the Prometheus text format, and ``/dashboard``, a live page of the whole
super-cluster with its event stream ``/dashboard/events`` (``node.monitoring.dashboard``), which
answer only GET and HEAD (405 otherwise). One path changes something: ``POST /raftz/stepdown`` hands
the replica groups the node leads to other voters, as ``pubmesh --signal stepdown`` does, at most once
per ``STEP_DOWN_PAUSE`` (429 meanwhile), so repeated requests cannot keep its groups changing
leaders. The server runs in the node's own trio run and reads the
broker directly; documents are built and encoded a slice at a time (``Pacer``), so a large one never
holds up the node's connections for long.

Whatever goes wrong while a document is built is logged and answered with a 500 and a JSON error,
and the next request is served as usual: monitoring must keep working when something is odd.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, NamedTuple, Protocol
from urllib.parse import parse_qs

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, HTTPScope, Scope

from node.broker import VERSION
from node.monitoring import gojson, metrics
from node.monitoring.accountz import AccountStatzOptions, AccountzOptions, accountz, accstatz
from node.monitoring.connz import ConnState, ConnzOptions, connz
from node.monitoring.dashboard import ASSETS, Dashboard, Viewer
from node.monitoring.links import GatewayzOptions, RoutezOptions, gatewayz, link_problems, routez
from node.monitoring.pacing import Pacer
from node.monitoring.raftz import raftz
from node.monitoring.state import DEFAULT_LIST_SIZE, BadRequest, MonitoredNode, MonitorState
from node.monitoring.streamz import StreamzOptions, streamz
from node.monitoring.subsz import SubszOptions, subsz
from node.monitoring.system import SystemAccount
from node.monitoring.varz import varz
from transport.tls import TlsConfig

__all__ = ["serve_monitoring"]

log = logging.getLogger("pubmesh")

GRACE = 1.0
"""Seconds a request still being answered at shutdown may take to finish."""

_TEXT = "text/plain; charset=utf-8"
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1


class ServedNode(MonitoredNode, Protocol):
    """A node whose monitoring is served: what monitoring reads of it, and its system account (None
    without one), whose answers share the monitoring state."""

    @property
    def system(self) -> SystemAccount | None: ...


class Response(NamedTuple):
    status: int
    body: tuple[bytes, ...]
    """In parts, sent one after the other (at least one)."""
    headers: tuple[tuple[bytes, bytes], ...]


_JSON_HEADERS = ((b"content-type", b"application/json"), (b"access-control-allow-origin", b"*"))
_HEALTHY = (b'{"status":"ok"}',)
"""/healthz is the one document nats-server writes compactly."""
_PIECES = 256
"""Pieces of JSON (a key, a value, punctuation) written between two looks at the ``Pacer``."""
_PART = 1 << 16
"""Characters of JSON gathered into one part of the body."""


async def _json(doc: dict[str, Any], pace: Pacer) -> Response:
    """The document as UTF-8 JSON, written a few pieces per step (``gojson`` gives every string a
    form, so encoding cannot fail)."""
    pieces = gojson.iterencode(doc)
    parts: list[bytes] = []
    pending: list[str] = []
    size = 0
    while text := "".join(itertools.islice(pieces, _PIECES)):
        pending.append(text)
        size += len(text)
        if size >= _PART:
            parts.append("".join(pending).encode())
            pending, size = [], 0
        await pace.tick()
    if pending:
        parts.append("".join(pending).encode())
    return Response(200, tuple(parts), _JSON_HEADERS)


def _text(status: int, text: str, content_type: str = _TEXT) -> Response:
    return Response(status, (text.encode(),), ((b"content-type", content_type.encode()),))


_NOT_FOUND = Response(
    404,
    (b"404 page not found\n",),
    ((b"content-type", _TEXT.encode()), (b"x-content-type-options", b"nosniff")),
)


# -- query parameters, decoded as nats-server's handlers decode them -------------------------------


def _go_quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


class Query:
    """One request's query parameters; the first value of a repeated name counts, and empty is absent.

    Bad values raise ``BadRequest`` with the text nats-server sends, which quotes Go's ``strconv``.
    """

    def __init__(self, raw: bytes) -> None:
        self._values = parse_qs(raw.decode("latin-1"), keep_blank_values=True)

    def text(self, name: str) -> str:
        values = self._values.get(name)
        return values[0] if values else ""

    def boolean(self, name: str) -> bool:
        value = self.text(name)
        if value in _TRUE:
            return True
        if not value or value in _FALSE:
            return False
        raise BadRequest(
            f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {_go_quote(value)}: "
            "invalid syntax"
        )

    def _number(self, name: str, kind: str, func: str, signed: bool) -> int:
        value = self.text(name)
        if not value:
            return 0
        digits = value[1:] if signed and value[:1] in "+-" else value
        problem = "invalid syntax"
        if digits.isascii() and digits.isdigit():
            number = int(value)
            if -_INT64_MAX - 1 <= number <= (_INT64_MAX if signed else _UINT64_MAX):
                return number
            problem = "value out of range"
        raise BadRequest(
            f"Error decoding {kind} for '{name}': strconv.{func}: parsing {_go_quote(value)}: {problem}"
        )

    def integer(self, name: str) -> int:
        return self._number(name, "int", "Atoi", signed=True)

    def uint64(self, name: str) -> int:
        return self._number(name, "uint64", "ParseUint", signed=False)

    def subs(self) -> tuple[bool, bool]:
        """``subs``: (list them, in detail); ``detail`` in any case, or a boolean."""
        if self.text("subs").lower() == "detail":
            return False, True
        return self.boolean("subs"), False

    def page(self) -> tuple[int, int]:
        """``offset`` and ``limit``; a negative offset counts as 0, a limit under 1 as the default."""
        offset, limit = self.integer("offset"), self.integer("limit")
        return max(offset, 0), limit if limit > 0 else DEFAULT_LIST_SIZE

    def state(self) -> ConnState:
        value = self.text("state")
        lowered = value.lower()
        if not value or lowered == "open":
            return ConnState.OPEN
        if lowered == "closed":
            return ConnState.CLOSED
        if lowered in ("any", "all"):
            return ConnState.ALL
        raise BadRequest(f"Error decoding state for {value}")


# -- endpoints -------------------------------------------------------------------------------------


async def _listing(
    state: MonitorState, pace: Pacer, view: Callable[[], Awaitable[dict[str, Any]]]
) -> Response:
    """A document that lists things, built and encoded while holding ``state.listing``."""
    async with state.listing:
        return await _json(await view(), pace)


async def _varz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    return await _json(await varz(state, pace), pace)


async def _connz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    subs, detail = query.subs()
    offset, limit = query.page()
    opts = ConnzOptions(
        sort=query.text("sort") or "cid",
        auth=query.boolean("auth"),
        subs=subs,
        subs_detail=detail,
        offset=offset,
        limit=limit,
        cid=query.uint64("cid"),
        state=query.state(),
        user=query.text("user"),
        account=query.text("acc"),
    )
    return await _listing(state, pace, partial(connz, state.broker, opts, pace))


async def _subsz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    offset, limit = query.page()
    opts = SubszOptions(
        subs=query.boolean("subs"),
        offset=offset,
        limit=limit,
        test=query.text("test"),
        account=query.text("acc"),
    )
    return await _listing(state, pace, partial(subsz, state.broker, opts, pace))


async def _routez(state: MonitorState, query: Query, pace: Pacer) -> Response:
    subs, detail = query.subs()
    opts = RoutezOptions(subs=subs, subs_detail=detail)
    return await _listing(state, pace, partial(routez, state.node, opts, pace))


async def _gatewayz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    subs, detail = query.subs()
    opts = GatewayzOptions(
        name=query.text("gw_name"),
        accounts=query.boolean("accs"),
        account=query.text("acc_name"),
        subs=subs,
        subs_detail=detail,
    )
    return await _listing(state, pace, partial(gatewayz, state.node, opts, pace))


async def _accountz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    opts = AccountzOptions(account=query.text("acc"))
    return await _json(await accountz(state.broker, opts, pace), pace)


async def _accstatz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    opts = AccountStatzOptions(include_unused=query.boolean("unused"))
    return await _json(await accstatz(state.broker, opts, pace), pace)


async def _streamz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    offset, limit = query.page()
    opts = StreamzOptions(
        account=query.text("acc"),
        db=query.integer("db") if query.text("db") else None,
        name=query.text("name"),
        offset=offset,
        limit=limit,
    )
    return await _listing(state, pace, partial(streamz, state.node, opts, pace))


async def _raftz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    return await _json(raftz(state.node), pace)


async def _metrics(state: MonitorState, query: Query, pace: Pacer) -> Response:
    async with state.listing:
        return _text(200, await metrics.exposition(state, pace), metrics.CONTENT_TYPE)


async def _index(state: MonitorState, query: Query, pace: Pacer) -> Response:
    return _text(200, _INDEX, "text/html; charset=utf-8")


async def _healthz(state: MonitorState, query: Query, pace: Pacer) -> Response:
    """Up means healthy, as in nats-server; with ``links=true`` (pubmesh's own option), only while
    the node is not cut off from its cluster or from a configured cluster (``link_problems``):
    503 otherwise, saying why, each problem listed under ``errors`` with ``details=true``."""
    details = query.boolean("details")
    if not query.boolean("links"):
        return Response(200, _HEALTHY, _JSON_HEADERS)
    problems = link_problems(state.node)
    if not problems:
        return Response(200, _HEALTHY, _JSON_HEADERS)
    doc: dict[str, Any] = {
        "status": "unavailable",
        "status_code": 503,
        "error": "; ".join(text for _, text in problems),
    }
    if details:
        doc["errors"] = [{"type": kind, "error": text} for kind, text in problems]
    return Response(503, (gojson.dumps(doc).encode(),), _JSON_HEADERS)


_LINKS = (
    ("varz", "General"),
    ("connz", "Connections"),
    ("subsz", "Subscriptions"),
    ("routez", "Routes"),
    ("gatewayz", "Gateways"),
    ("accountz", "Accounts"),
    ("accstatz", "Account stats"),
    ("streamz", "Streams"),
    ("raftz", "Replica groups"),
    ("healthz", "Health"),
    ("metrics", "Prometheus metrics"),
    ("dashboard", "Dashboard"),
)
_INDEX = (
    "<!DOCTYPE html>\n<html>\n<head><title>pubmesh monitoring</title></head>\n<body>\n"
    f"<h1>pubmesh {VERSION}</h1>\n<ul>\n"
    + "".join(f'<li><a href="{path}">{path}</a> {title}</li>\n' for path, title in _LINKS)
    + "</ul>\n</body>\n</html>\n"
)

Handler = Callable[[MonitorState, Query, Pacer], Awaitable[Response]]
# Each path: the name its requests are counted under in /varz's http_req_stats, and its handler.
_ROUTES: dict[str, tuple[str, Handler]] = {
    "/": ("/", _index),
    "/varz": ("/varz", _varz),
    "/connz": ("/connz", _connz),
    "/subsz": ("/subsz", _subsz),
    "/subscriptionsz": ("/subsz", _subsz),
    "/routez": ("/routez", _routez),
    "/gatewayz": ("/gatewayz", _gatewayz),
    "/accountz": ("/accountz", _accountz),
    "/accstatz": ("/accstatz", _accstatz),
    "/streamz": ("/streamz", _streamz),
    "/raftz": ("/raftz", _raftz),
    "/healthz": ("/healthz", _healthz),
    "/metrics": ("/metrics", _metrics),
}


STEP_DOWN_PATH = "/raftz/stepdown"
STEP_DOWN_PAUSE = 5.0
"""Seconds after a step-down asked over HTTP during which another is refused."""


def _step_down(state: MonitorState, method: str) -> Response:
    """``POST /raftz/stepdown``: the groups this node leads handed over (the JSON lists them)."""
    if method != "POST":
        return Response(
            405,
            (b"405 method not allowed\n",),
            ((b"content-type", _TEXT.encode()), (b"allow", b"POST")),
        )
    replicas = state.node.replicas
    if replicas is None:
        return _text(409, "this node runs no replica groups\n")
    now = trio.current_time()
    if state.stepped_down_at is not None and now - state.stepped_down_at < STEP_DOWN_PAUSE:
        wait = STEP_DOWN_PAUSE - (now - state.stepped_down_at)
        return Response(
            429,
            (b"a step-down was asked for moments ago\n",),
            ((b"content-type", _TEXT.encode()), (b"retry-after", str(int(wait) + 1).encode())),
        )
    state.stepped_down_at = now
    led = [status.name for status in replicas.status() if status.role == "leader"]
    replicas.hand_over()
    return Response(200, (gojson.dumps({"handing_over": led}).encode(),), _JSON_HEADERS)


def _internal_error(path: str) -> Response:
    """The answer when building a document failed, in the shape of nats-server's error documents
    (``HealthStatus``); the cause is in the log, not sent to whoever asked."""
    doc = {"status": "error", "status_code": 500, "error": f"internal error answering {path}"}
    return Response(500, (gojson.dumps(doc).encode(),), _JSON_HEADERS)


async def respond(state: MonitorState, path: str, query_string: bytes) -> Response:
    """The answer to one GET; requests are counted before their parameters are checked, as there."""
    route = _ROUTES.get(path)
    if route is None:
        return _NOT_FOUND
    counted_as, handler = route
    state.requests[counted_as] += 1
    try:
        return await handler(state, Query(query_string), Pacer())
    except BadRequest as exc:
        return _text(400, str(exc))
    except Exception:
        log.exception("monitoring: could not answer %s", path)
        return _internal_error(counted_as)


# -- the server ------------------------------------------------------------------------------------


_PAGE_HEADERS = (
    (b"cache-control", b"no-cache"),
    (b"x-content-type-options", b"nosniff"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
)
_EVENT_HEADERS = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
_EVENTS_PATH = "/dashboard/events"
_FINISH = 1.0
"""Seconds an ending event stream may take to send its last (empty) part."""


def _dashboard_response(path: str, method: str, dashboard: Dashboard) -> Response | None:
    """The answer to a request for one of the dashboard's paths, unless it is a GET of the event
    stream that can be served (None: stream it); None too for a path that is not the dashboard's."""
    if path != _EVENTS_PATH and path not in ASSETS:
        return None
    if method not in ("GET", "HEAD"):
        return Response(
            405,
            (b"405 method not allowed\n",),
            ((b"content-type", _TEXT.encode()), (b"allow", b"GET, HEAD")),
        )
    if path in ASSETS:
        body, content_type = ASSETS[path]
        return Response(200, (body,), ((b"content-type", content_type.encode()), *_PAGE_HEADERS))
    if dashboard.survey is None:
        return _text(503, "the dashboard needs the system account\n")
    if method == "HEAD":
        return Response(200, (b"",), _EVENT_HEADERS)
    return None


class _App:
    """The ASGI application hypercorn runs: lifespan events acknowledged, HTTP requests answered."""

    def __init__(self, state: MonitorState, dashboard: Dashboard) -> None:
        self.state = state
        self.dashboard = dashboard

    async def _stream(
        self, viewer: Viewer, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        """Send a viewer its events until it leaves, is dropped, or the server stops."""

        async def until_gone(scope: trio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope.cancel()

        try:
            await send({"type": "http.response.start", "status": 200, "headers": _EVENT_HEADERS})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(until_gone, nursery.cancel_scope)
                with viewer.scope:
                    await send(
                        {"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True}
                    )
                    async for data in viewer.receive:
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                nursery.cancel_scope.cancel()
            with trio.move_on_after(_FINISH):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.dashboard.leave(viewer)
            viewer.receive.close()

    async def _http(
        self, scope: HTTPScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        path = scope["path"]
        response = _dashboard_response(path, scope["method"], self.dashboard)
        if path == STEP_DOWN_PATH:
            self.state.requests[path] += 1
            response = _step_down(self.state, scope["method"])
        elif response is None and path == _EVENTS_PATH:
            self.state.requests[path] += 1
            viewer = self.dashboard.join()
            if viewer is not None:
                await self._stream(viewer, receive, send)
                return
            response = Response(
                503,
                (b"too many dashboards open\n",),
                ((b"content-type", _TEXT.encode()), (b"retry-after", b"5")),
            )
        elif response is not None:
            self.state.requests[path if path == _EVENTS_PATH else "/dashboard"] += 1
        else:
            response = await respond(self.state, path, scope["query_string"])
        length = sum(len(part) for part in response.body)
        headers = (*response.headers, (b"content-length", str(length).encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        last = len(response.body) - 1
        for i, part in enumerate(response.body):
            await send({"type": "http.response.body", "body": part, "more_body": i < last})

    async def __call__(self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
        if scope["type"] == "lifespan":
            # hypercorn on trio fails to start with an app that ignores lifespan events.
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif scope["type"] == "http":
            await self._http(scope, receive, send)


def _hypercorn_config(host: str, port: int, tls: TlsConfig | None) -> HypercornConfig:
    config = HypercornConfig()
    if tls is not None:  # HTTPS with the node's certificate; no client certificates asked for
        config.certfile, config.keyfile = tls.cert_file, tls.key_file
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.include_server_header = False
    config.graceful_timeout = GRACE
    return config


async def serve_monitoring(
    node: ServedNode,
    host: str,
    port: int,
    *,
    shutdown: trio.Event,
    tls: TlsConfig | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the monitoring endpoints on ``host:port`` until ``shutdown`` is set (over HTTPS
    when ``tls`` is given, as nats-server's ``https_port``).

    Reports the port it listens on through ``task_status`` (the one picked when ``port`` is 0).
    """
    # (shared with the system account's answers, which then report the same port and request counts)
    state = node.system.monitor if node.system is not None else MonitorState(node, host)
    state.http_host = host
    broker = node.broker
    dashboard = Dashboard(broker, broker.system_account if node.system is not None else None)
    app = _App(state, dashboard)

    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, app, _hypercorn_config(host, port, tls), shutdown_trigger=shutdown.wait)
        )
        state.http_port = int(binds[0].rsplit(":", 1)[1])
        nursery.start_soon(dashboard.run, shutdown)
        task_status.started(state.http_port)
