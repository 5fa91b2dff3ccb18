"""CLIENT TRACKING, CLIENT CACHING, CLIENT GETREDIR and CLIENT TRACKINGINFO, as redis-server 7.2
answers them (the tracking itself is ``node.resp.tracking``'s).

A connection may redirect its invalidations only to a connection of its own account (key names are
an account's own); any other id is answered as one that does not exist.
"""

from __future__ import annotations

from typing import Final

from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.tracking import ClientTracking, Tracker, TrackingClient
from node.resp.writer import OK, array, bulk, integer

__all__ = ["COMMANDS", "tracker_of"]

_OVERLAP: Final = "Prefixes for a single client must not overlap."


def _peer(conn: RespConnection, cid: int) -> RespConnection | None:
    """The connection ``cid`` of ``conn``'s account, if it is there."""
    found = conn.broker.clients.get(cid)
    if isinstance(found, RespConnection) and found.account is conn.account and found.closing is None:
        return found
    return None


def tracker_of(conn: RespConnection) -> Tracker:
    """The node's tracker (made when the first client turns tracking on)."""
    keyspaces = conn.broker.keyspaces
    tracker = keyspaces.tracker
    if isinstance(tracker, Tracker):
        return tracker

    def lookup(cid: int) -> TrackingClient | None:
        return _peer(conn, cid)

    return Tracker(keyspaces, lookup)


def _text(value: bytes) -> str:
    """A prefix as redis-server's ``%s`` shows it (up to a NUL byte)."""
    return value.partition(b"\0")[0].decode("utf-8", "surrogateescape")


def _overlap(conn: RespConnection, prefixes: list[bytes]) -> str | None:
    """Why BCAST's new ``prefixes`` cannot be taken (one is a prefix of another, or of one the
    connection tracks already), or None."""
    existing = list(conn.tracking.prefixes) if conn.tracking is not None else []
    for i, prefix in enumerate(prefixes):
        for old in existing:
            if old.startswith(prefix) or prefix.startswith(old):
                return (
                    f"Prefix '{_text(prefix)}' overlaps with an existing prefix '{_text(old)}'. "
                    f"{_OVERLAP}"
                )
        for other in prefixes[i + 1 :]:
            if other.startswith(prefix) or prefix.startswith(other):
                return (
                    f"Prefix '{_text(prefix)}' overlaps with another provided prefix "
                    f"'{_text(other)}'. {_OVERLAP}"
                )
    return None


def _client_tracking(conn: RespConnection, args: list[bytes]) -> None:
    """CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP],
    checked in redis-server's order: every option, then ON or OFF, then how they combine."""
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes: list[bytes] = []
    i = 3
    while i < len(args):
        option, more = args[i].lower(), i + 1 < len(args)
        if option == b"redirect" and more:
            i += 1
            if redirect:
                conn.error("A client can only redirect to a single other client")
                return
            number = string2ll(args[i])
            if number is None:
                conn.error(NOT_INTEGER)
                return
            if _peer(conn, number) is None:
                conn.error("The client ID you want redirect to does not exist")
                return
            redirect = number
        elif option == b"bcast":
            bcast = True
        elif option == b"optin":
            optin = True
        elif option == b"optout":
            optout = True
        elif option == b"noloop":
            noloop = True
        elif option == b"prefix" and more:
            i += 1
            prefixes.append(args[i])
        else:
            conn.error(SYNTAX)
            return
        i += 1
    switch = args[2].lower()
    if switch == b"off":
        if conn.tracking is not None:
            tracker_of(conn).disable(conn)
        conn.reply(OK)
        return
    if switch != b"on":
        conn.error(SYNTAX)
        return
    old = conn.tracking
    refusal = None
    if prefixes and not bcast:
        refusal = "PREFIX option requires BCAST mode to be enabled"
    elif old is not None and old.bcast != bcast:
        refusal = (
            "You can't switch BCAST mode on/off before disabling tracking for this client, and "
            "then re-enabling it with a different mode."
        )
    elif bcast and (optin or optout):
        refusal = "OPTIN and OPTOUT are not compatible with BCAST"
    elif optin and optout:
        refusal = "You can't specify both OPTIN mode and OPTOUT mode"
    elif old is not None and ((optin and old.optout) or (optout and old.optin)):
        refusal = (
            "You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and "
            "then re-enabling it with a different mode."
        )
    elif bcast:
        refusal = _overlap(conn, prefixes)
    if refusal is not None:
        conn.error(refusal)
        return
    state = ClientTracking(conn.account.name, redirect)
    state.bcast, state.optin, state.optout, state.noloop = bcast, optin, optout, noloop
    tracker_of(conn).enable(conn, state, prefixes)
    conn.reply(OK)


def _client_caching(conn: RespConnection, args: list[bytes]) -> None:
    state = conn.tracking
    if state is None:
        conn.error(
            "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or "
            "OPTOUT mode enabled"
        )
        return
    choice = args[2].lower()
    if choice == b"yes":
        if not state.optin:
            conn.error("CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
            return
    elif choice == b"no":
        if not state.optout:
            conn.error("CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
            return
    else:
        conn.error(SYNTAX)
        return
    state.caching = True
    conn.reply(OK)


def _client_getredir(conn: RespConnection, args: list[bytes]) -> None:
    state = conn.tracking
    conn.reply(integer(state.redirect if state is not None else -1))


def _client_trackinginfo(conn: RespConnection, args: list[bytes]) -> None:
    state, w = conn.tracking, conn.writer
    flags = state.flags() if state is not None else [b"off"]
    conn.reply(
        w.map(
            [
                (bulk(b"flags"), w.set(bulk(flag) for flag in flags)),
                (bulk(b"redirect"), integer(state.redirect if state is not None else -1)),
                (bulk(b"prefixes"), array(bulk(p) for p in (state.prefixes if state else ()))),
            ]
        )
    )


COMMANDS: Final = (
    Command("client|tracking", -3, _client_tracking, "noscript"),
    Command("client|caching", 3, _client_caching, "noscript"),
    Command("client|getredir", 2, _client_getredir, "noscript"),
    Command("client|trackinginfo", 2, _client_trackinginfo, "noscript"),
)
"""CLIENT's tracking subcommands."""
