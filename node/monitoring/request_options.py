"""The options of the system account's requests, read from their JSON bodies as nats-server's Go code
reads them into its option structs (``ConnzEventOptions`` and the others), and turned into the
options of the monitoring views.

A body decodes to the endpoint's options and the filters every endpoint takes (``server_name``,
``cluster``, ``host``, ``exact_match``, ``tags``, ``domain``); what does not decode is a
``RequestError`` with the code and text nats-server answers with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from node.monitoring.accountz import AccountStatzOptions
from node.monitoring.connz import ConnState, ConnzOptions
from node.monitoring.links import GatewayzOptions, RoutezOptions
from node.monitoring.state import DEFAULT_LIST_SIZE, BadRequest
from node.monitoring.streamz import StreamzOptions
from node.monitoring.subsz import SubszOptions

__all__ = [
    "RequestError",
    "accstatz_options",
    "connz_options",
    "decode_options",
    "gatewayz_options",
    "routez_options",
    "streamz_options",
    "subsz_options",
]


class RequestError(ValueError):
    """A request answered with an error envelope: ``code`` (400 for a body that does not decode,
    500 for options the endpoint refuses, as nats-server) and the description."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


# The Go type of each option, as its decoding errors name it.
_BOOL, _INT, _UINT, _STRING, _STRINGS = "bool", "int", "uint64", "string", "[]string"
_FILTERS = {
    "server_name": _STRING,
    "cluster": _STRING,
    "host": _STRING,
    "exact_match": _BOOL,
    "tags": _STRINGS,
    "domain": _STRING,
}
"""nats-server's ``EventFilterOptions``, which every endpoint's options include."""
_OPTIONS: dict[str, dict[str, str]] = {
    "VARZ": {},
    "CONNZ": {
        "sort": _STRING,
        "auth": _BOOL,
        "subscriptions": _BOOL,
        "subscriptions_detail": _BOOL,
        "offset": _INT,
        "limit": _INT,
        "cid": _UINT,
        "mqtt_client": _STRING,
        "state": _INT,
        "user": _STRING,
        "acc": _STRING,
        "filter_subject": _STRING,
    },
    "SUBSZ": {
        "offset": _INT,
        "limit": _INT,
        "subscriptions": _BOOL,
        "account": _STRING,
        "test": _STRING,
    },
    "ROUTEZ": {"subscriptions": _BOOL, "subscriptions_detail": _BOOL},
    "GATEWAYZ": {
        "name": _STRING,
        "accounts": _BOOL,
        "account_name": _STRING,
        "subscriptions": _BOOL,
        "subscriptions_detail": _BOOL,
    },
    "HEALTHZ": {
        "js-enabled": _BOOL,
        "js-enabled-only": _BOOL,
        "js-server-only": _BOOL,
        "js-meta-only": _BOOL,
        "account": _STRING,
        "stream": _STRING,
        "consumer": _STRING,
        "details": _BOOL,
    },
    "ACCOUNTZ": {"account": _STRING},
    "STATSZ": {},
    "ACCSTATZ": {"accounts": _STRINGS, "include_unused": _BOOL},
    "STREAMZ": {"account": _STRING, "db": _INT, "name": _STRING, "offset": _INT, "limit": _INT},
    "RAFTZ": {},
}
_GO_TYPES = {
    "VARZ": "VarzEventOptions",
    "CONNZ": "ConnzEventOptions",
    "SUBSZ": "SubszEventOptions",
    "ROUTEZ": "RoutezEventOptions",
    "GATEWAYZ": "GatewayzEventOptions",
    "HEALTHZ": "HealthzEventOptions",
    "ACCOUNTZ": "AccountzEventOptions",
    "STATSZ": "StatszEventOptions",
    "ACCSTATZ": "AccountStatzEventOptions",
    "STREAMZ": "StreamzEventOptions",
    "RAFTZ": "RaftzEventOptions",
}
_INT64 = 2**63


def _json_kind(value: Any) -> str:
    """What Go's decoding errors call a JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits(kind: str, value: Any) -> bool:
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind in (_INT, _UINT):
        low = 0 if kind == _UINT else -_INT64
        high = 2 * _INT64 if kind == _UINT else _INT64
        return isinstance(value, int) and not isinstance(value, bool) and low <= value < high
    if kind == _STRING:
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def decode_options(endpoint: str, body: bytes) -> dict[str, Any]:
    """The options a request's body sets (those it leaves out are absent), read as nats-server's
    ``json.Unmarshal`` reads them: unknown names ignored, names matched regardless of case, ``null``
    (for the whole body or one option) changing nothing, a value of the wrong type an error.

    Raises:
        RequestError: (400) the body is not JSON, not an object, or an option has the wrong type.
    """
    if not body:
        return {}
    go_type = _GO_TYPES[endpoint]
    try:
        value = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise RequestError(400, f"invalid JSON: {exc}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(
            400, f"json: cannot unmarshal {_json_kind(value)} into Go value of type server.{go_type}"
        )
    fields = _FILTERS | _OPTIONS[endpoint]
    folded = {name.casefold(): name for name in fields}
    options: dict[str, Any] = {}
    for key, item in value.items():
        name = key if key in fields else folded.get(key.casefold())
        if name is None or item is None:
            continue
        kind = fields[name]
        if not _fits(kind, item):
            raise RequestError(
                400,
                f"json: cannot unmarshal {_json_kind(item)} into Go struct field "
                f"{go_type}.{name} of type {kind}",
            )
        options[name] = item
    return options


_STATES = {0: ConnState.OPEN, 1: ConnState.CLOSED, 2: ConnState.ALL}


def _page(options: Mapping[str, Any]) -> tuple[int, int]:
    """``offset`` and ``limit`` as the HTTP endpoints take them (a limit under 1: the default)."""
    limit = options.get("limit", 0)
    return max(options.get("offset", 0), 0), limit if limit > 0 else DEFAULT_LIST_SIZE


def connz_options(options: Mapping[str, Any]) -> ConnzOptions:
    """CONNZ's options (``state`` is nats-server's number: 0 open, 1 closed, 2 all).

    Raises:
        BadRequest: an unknown state.
    """
    state = _STATES.get(options.get("state", 0))
    if state is None:
        raise BadRequest(f"invalid connection state: {options['state']}")
    offset, limit = _page(options)
    return ConnzOptions(
        sort=options.get("sort") or "cid",
        auth=options.get("auth", False),
        subs=options.get("subscriptions", False),
        subs_detail=options.get("subscriptions_detail", False),
        offset=offset,
        limit=limit,
        cid=options.get("cid", 0),
        state=state,
        user=options.get("user", ""),
        account=options.get("acc", ""),
    )


def subsz_options(options: Mapping[str, Any]) -> SubszOptions:
    """SUBSZ's options."""
    offset, limit = _page(options)
    return SubszOptions(
        subs=options.get("subscriptions", False),
        offset=offset,
        limit=limit,
        test=options.get("test", ""),
        account=options.get("account", ""),
    )


def routez_options(options: Mapping[str, Any]) -> RoutezOptions:
    """ROUTEZ's options."""
    return RoutezOptions(
        subs=options.get("subscriptions", False),
        subs_detail=options.get("subscriptions_detail", False),
    )


def gatewayz_options(options: Mapping[str, Any]) -> GatewayzOptions:
    """GATEWAYZ's options."""
    return GatewayzOptions(
        name=options.get("name", ""),
        accounts=options.get("accounts", False),
        account=options.get("account_name", ""),
        subs=options.get("subscriptions", False),
        subs_detail=options.get("subscriptions_detail", False),
    )


def accstatz_options(options: Mapping[str, Any]) -> AccountStatzOptions:
    """ACCSTATZ's options: ``accounts`` (only these; all when absent) and ``include_unused``."""
    return AccountStatzOptions(
        accounts=tuple(options.get("accounts", ())),
        include_unused=options.get("include_unused", False),
    )


def streamz_options(options: Mapping[str, Any]) -> StreamzOptions:
    """STREAMZ's options, those of /streamz's query (pubmesh's own endpoint).

    Raises:
        BadRequest: a database number out of range.
    """
    offset, limit = _page(options)
    return StreamzOptions(
        account=options.get("account", ""),
        db=options.get("db"),
        name=options.get("name", ""),
        offset=offset,
        limit=limit,
    )
