"""A CONNECT's JSON read as nats-server reads it: into a typed record, not a free-form dict.

nats-server unmarshals CONNECT into a Go struct, and clients have come to depend on what that
implies, so the same rules apply here:

- a known field holding a value of the wrong type (``"verbose":"yes"``, ``"user":5``,
  ``"protocol":1.0``) makes the whole line a parse error: the connection closes without an ``-ERR``;
- ``null`` leaves a field as it was (so ``"verbose":null`` keeps verbose on);
- field names match exactly or, failing that, regardless of case (``"VERBOSE":false`` counts);
- a repeated field is checked every time and the last one wins;
- unknown fields are ignored (and not kept).

Strings come out of JSON as Python ``str``, which may hold lone surrogates: from an escape
(``"\\ud800"`` is valid JSON but not valid Unicode), or standing for bytes that are not UTF-8
(decoded with ``surrogateescape``, so they stay recognisable). Credentials are passed on exactly as
sent, so the authenticator can refuse the ones that are not valid Unicode; every other string is made
valid, each lone surrogate replaced by U+FFFD as Go's decoder does, so nothing downstream
(monitoring, logs) ever sees one.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from node.nats.protocol.errors import ProtocolError

__all__ = ["decode_connect"]

_BOOL, _STRING, _INT, _PERMISSION = "bool", "string", "int", "subject permission"
_BOOLS = ("echo", "verbose", "pedantic", "tls_required", "new_account", "headers", "no_responders")
_STRINGS = ("nkey", "jwt", "sig", "auth_token", "user", "pass", "name", "lang", "version", "account")
_LINK_STRINGS = ("remote_account", "proxy_sig")  # (for leafnodes, but typed for clients too)
_FIELDS: Final = {
    **dict.fromkeys(_BOOLS, _BOOL),
    **dict.fromkeys(_STRINGS + _LINK_STRINGS, _STRING),
    "protocol": _INT,
    "import": _PERMISSION,
    "export": _PERMISSION,
}
"""nats-server's ClientOpts: each field and its type."""
_CREDENTIALS: Final = frozenset(("nkey", "jwt", "sig", "auth_token", "user", "pass", "proxy_sig"))
"""String fields kept exactly as sent (lone surrogates included): they fail authentication."""
_LISTS = ("allow", "deny")  # a SubjectPermission's fields
_INT_RANGE = range(-(2**63), 2**63)  # Go's int on the platforms nats-server runs on
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Object(list[tuple[str, Any]]):
    """A JSON object as its (name, value) pairs in order, so repeated names can all be checked."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # (Python's json reads NaN and Infinity; Go does not)


def _canonical(name: str) -> str | None:
    if name in _FIELDS:
        return name
    folded = name.lower()
    return folded if folded in _FIELDS else None


def _fits(kind: str, value: Any) -> bool:
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _STRING:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT_RANGE
    # A SubjectPermission: an object whose allow and deny, where given, are lists of strings.
    return isinstance(value, _Object) and all(
        entries is None
        or (isinstance(entries, list) and not isinstance(entries, _Object)
            and all(e is None or isinstance(e, str) for e in entries))
        for key, entries in value
        if key.lower() in _LISTS
    )  # fmt: skip


def decode_connect(text: bytes) -> dict[str, Any]:
    """The options a CONNECT's argument sets, by their canonical names.

    Raises:
        ProtocolError: without a message (nats-server closes without one) when ``text`` is not one
            JSON object, or a known field has a value of the wrong type.
    """
    try:
        document = json.loads(
            text.decode("utf-8", "surrogateescape"),
            object_pairs_hook=_Object,
            parse_constant=_no_constant,
        )
    except (ValueError, RecursionError):  # (deep nesting such as [[[[... fits in a control line)
        document = None
    if not isinstance(document, _Object):
        raise ProtocolError(None, reason="malformed CONNECT arguments")
    options: dict[str, Any] = {}
    for name, value in document:
        field = _canonical(name)
        if field is None or value is None:
            continue
        kind = _FIELDS[field]
        if not _fits(kind, value):
            raise ProtocolError(None, reason=f"CONNECT field {field!r} is not a {kind}")
        if kind == _STRING and field not in _CREDENTIALS:
            value = _SURROGATE.sub("\ufffd", value)
        elif kind == _PERMISSION:
            value = {key.lower(): entries for key, entries in value if key.lower() in _LISTS}
        options[field] = value
    return options
