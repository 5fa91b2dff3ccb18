"""The connection commands (PING, ECHO, QUIT, RESET, AUTH, HELLO, SELECT, CLIENT), as redis-server
7.2 answers them.

**Authentication.** With users configured, ``AUTH user pass`` signs in as a configured user;
``AUTH secret`` signs in with a token, or as a user called ``default``. A password that is a bcrypt
hash is checked in a worker thread (``RespConnection.verifying``): the request runs again once the
verdict is in. The user's account and permissions then apply (``RespConnection.switch_user``).
HELLO signs in the same way with its AUTH option, and switches the protocol version.
"""

from __future__ import annotations

import time
from typing import Final

from node.accounts.auth import Verification, Verifying
from node.connection import Reason
from node.integers import string2ll
from node.resp.client_list import client_line
from node.resp.commands.common import NOT_INTEGER, REDIS_VERSION, SYNTAX, help_reply, resp_clients
from node.resp.commands.tracking import COMMANDS as TRACKING
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import OK, PONG, RESP2, array, as_text, bulk, error, integer, simple, writer_for

__all__ = ["BAD_NAME", "COMMANDS", "HELLO_NOAUTH", "WRONGPASS"]

WRONGPASS: Final = "-WRONGPASS invalid username-password pair or user is disabled."
HELLO_NOAUTH: Final = (
    "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> "
    "AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol "
    "version at the same time"
)
BAD_NAME: Final = "Client names cannot contain spaces, newlines or special characters."


def _ping(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 2:
        conn.error("wrong number of arguments for 'ping' command")
    elif conn.writer is RESP2 and conn.subscribed:
        conn.reply(array([bulk(b"pong"), bulk(args[1] if len(args) > 1 else b"")]))
    else:
        conn.reply(bulk(args[1]) if len(args) > 1 else PONG)


def _echo(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(bulk(args[1]))


def _quit(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(OK)
    conn.close(Reason.CLIENT_CLOSED)


def _reset(conn: RespConnection, args: list[bytes]) -> None:
    conn.reset()
    conn.reply(simple(b"RESET"))


def _sign_in(
    conn: RespConnection, name: bytes | None, password: bytes, command: list[bytes]
) -> bool | None:
    """AUTH's check: a user and password, or (no user name) a token or the ``default`` user's
    password.

    None: a bcrypt check is under way in a worker thread; ``command`` runs again when it is done
    (inside EXEC, which cannot wait, the check runs at once)."""
    auth = conn.broker.auth
    secret = as_text(password)
    if name is not None:
        attempts = [{"user": as_text(name), "pass": secret}]
    else:
        attempts = [{"auth_token": secret}, {"user": "default", "pass": secret}]
    for options in attempts:
        found = auth.authenticate(options)
        if isinstance(found, Verification):
            if conn.may_block:
                conn.verifying = Verifying(found, list(map(bytes, command)))
                return None
            found = auth.check_now(options)
        if found is not None:
            conn.switch_user(found)
            return True
    return False


def _auth(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 3:
        conn.error("syntax error")
    elif len(args) == 2 and not conn.broker.auth.required:
        conn.error(
            "AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    else:
        signed_in = _sign_in(conn, args[1] if len(args) == 3 else None, args[-1], args)
        if signed_in is not None:  # (else it is answered when it runs again)
            conn.reply(OK if signed_in else error(WRONGPASS))


def _hello(conn: RespConnection, args: list[bytes]) -> None:
    version = conn.writer.version
    if len(args) > 1:
        asked = string2ll(args[1])
        if asked is None or not 0 <= asked <= 2**31 - 1:
            conn.error("Protocol version is not an integer or out of range")
            return
        if asked not in (2, 3):
            conn.reply(error("-NOPROTO unsupported protocol version"))
            return
        version = asked
    credentials: tuple[bytes, bytes] | None = None
    name: bytes | None = None
    i = 2
    while i < len(args):
        option = args[i].lower()
        left = len(args) - i - 1
        if option == b"auth" and left >= 2:
            credentials = (args[i + 1], args[i + 2])
            i += 3
        elif option == b"setname" and left >= 1:
            name = args[i + 1]
            i += 2
        else:
            conn.error(f"Syntax error in HELLO option '{as_text(args[i])}'")
            return
    if credentials is not None:
        signed_in = _sign_in(conn, *credentials, args)
        if signed_in is None:
            return  # (answered when it runs again)
        if not signed_in:
            conn.reply(error(WRONGPASS))
            return
    if conn.user is None:
        conn.reply(error(HELLO_NOAUTH))
        return
    if name is not None:
        if not _valid_name(name):
            conn.error(BAD_NAME)
            return
        conn.options["name"] = as_text(name)
    conn.writer = writer_for(version)
    w = conn.writer
    conn.reply(
        w.map(
            [
                (bulk(b"server"), bulk(b"redis")),
                (bulk(b"version"), bulk(REDIS_VERSION.encode())),
                (bulk(b"proto"), integer(version)),
                (bulk(b"id"), integer(conn.cid)),
                (bulk(b"mode"), bulk(b"standalone")),
                (bulk(b"role"), bulk(b"master")),
                (bulk(b"modules"), array([])),
            ]
        )
    )


def _select(conn: RespConnection, args: list[bytes]) -> None:
    db = string2ll(args[1])
    if db is None:
        conn.error(NOT_INTEGER)
    elif not 0 <= db < 16:
        conn.error("DB index is out of range")
    else:
        conn.db = db
        conn.reply(OK)


def _valid_name(name: bytes) -> bool:
    return all(33 <= byte <= 126 for byte in name)


def _client_id(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(integer(conn.cid))


def _client_setname(conn: RespConnection, args: list[bytes]) -> None:
    if not _valid_name(args[2]):
        conn.error(BAD_NAME)
        return
    conn.options["name"] = as_text(args[2])
    conn.reply(OK)


def _client_getname(conn: RespConnection, args: list[bytes]) -> None:
    name = conn.name
    conn.reply(bulk(name.encode("utf-8", "surrogateescape")) if name else conn.writer.null)


def _client_setinfo(conn: RespConnection, args: list[bytes]) -> None:
    attr = args[2].lower()
    key = {b"lib-name": "lang", b"lib-ver": "version"}.get(attr)
    if key is None:
        conn.error(f"Unrecognized option '{as_text(args[2])}'")
    elif not all(33 <= byte <= 126 for byte in args[3]):
        conn.error(f"{as_text(args[2])} cannot contain spaces, newlines or special characters.")
    else:
        conn.options[key] = as_text(args[3])
        conn.reply(OK)


def _client_no_touch(conn: RespConnection, args: list[bytes]) -> None:
    word = args[2].lower()
    if word not in (b"on", b"off"):
        conn.error(SYNTAX)
        return
    conn.no_touch = word == b"on"
    conn.reply(OK)


def _client_list(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(conn.writer.verbatim(b"".join(client_line(c) for c in resp_clients(conn))))


def _client_info(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(conn.writer.verbatim(client_line(conn)))


def _client_kill(conn: RespConnection, args: list[bytes]) -> None:
    """``CLIENT KILL addr`` (answers OK) or ``CLIENT KILL <filter> <value> ...`` (answers a
    count): ID, ADDR, LADDR, TYPE, USER, MAXAGE and SKIPME (yes unless told otherwise)."""
    if len(args) == 3:
        victims = [c for c in resp_clients(conn) if f"{c.host}:{c.port}".encode() == args[2]]
        if not victims:
            conn.error("No such client")
            return
        victims[0].close(Reason.CLIENT_CLOSED)
        conn.reply(OK)
        return
    if len(args) % 2:
        conn.error("syntax error")
        return
    victims = resp_clients(conn)
    skip_me = True
    for i in range(2, len(args), 2):
        field, value = args[i].lower(), args[i + 1]
        if field == b"id":
            cid = string2ll(value)
            if cid is None or cid <= 0:
                conn.error("client-id should be greater than 0")
                return
            victims = [c for c in victims if c.cid == cid]
        elif field == b"addr":
            victims = [c for c in victims if f"{c.host}:{c.port}".encode() == value]
        elif field == b"laddr":
            victims = [c for c in victims if c.local_address.encode() == value]
        elif field == b"type":
            kind = value.lower()
            if kind not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                conn.error(f"Unknown client type '{as_text(value)}'")
                return
            kind = b"replica" if kind == b"slave" else kind
            victims = [c for c in victims if (b"pubsub" if c.subscribed else b"normal") == kind]
        elif field == b"user":
            name = as_text(value)
            if name != "default" and not _known_user(conn, name):
                conn.error(f"No such user '{name}'")
                return
            victims = [c for c in victims if c.user is not None and (c.user.user or "default") == name]
        elif field == b"maxage":
            age = string2ll(value)
            if age is None:
                conn.error(SYNTAX)
                return
            now = time.time_ns()
            victims = [c for c in victims if (now - c.start_ns) // 10**9 >= age]
        elif field == b"skipme" and value.lower() in (b"yes", b"no"):
            skip_me = value.lower() == b"yes"
        else:
            conn.error("syntax error")
            return
    if skip_me:
        victims = [c for c in victims if c is not conn]
    conn.reply(integer(len(victims)))
    for victim in victims:
        victim.close(Reason.CLIENT_CLOSED)


def _known_user(conn: RespConnection, name: str) -> bool:
    return any(user.user == name for user in conn.broker.config.users)


def _client_reply(conn: RespConnection, args: list[bytes]) -> None:
    mode = args[2].lower()
    if not conn.set_reply_mode(mode):
        conn.error(SYNTAX)
    elif mode == b"on":
        conn.reply(OK)


def _client_unblock(conn: RespConnection, args: list[bytes]) -> None:
    how = args[3].lower() if len(args) == 4 else b"timeout"
    if len(args) > 4 or how not in (b"timeout", b"error"):
        conn.error("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
        return
    cid = string2ll(args[2])
    if cid is None:
        conn.error(NOT_INTEGER)
        return
    target = conn.broker.clients.get(cid)
    done = isinstance(target, RespConnection) and target.unblock(as_error=how == b"error")
    conn.reply(integer(1 if done else 0))


_CLIENT_HELP = [
    b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"GETNAME",
    b"ID",
    b"INFO",
    b"KILL <ip:port> | KILL ID <id> | KILL ADDR <ip:port>",
    b"LIST",
    b"REPLY (ON|OFF|SKIP)",
    b"UNBLOCK <clientid> [TIMEOUT|ERROR]",
    b"SETINFO <LIB-NAME|LIB-VER> <value>",
    b"SETNAME <name>",
    b"NO-TOUCH (ON|OFF)",
    b"HELP",
]

COMMANDS: Final = (
    Command("ping", -1, _ping, "subscribed"),
    Command("echo", 2, _echo),
    Command("quit", -1, _quit, "no_auth subscribed ends_multi noscript"),
    Command("reset", 1, _reset, "no_auth subscribed ends_multi noscript"),
    Command("hello", -1, _hello, "no_auth noscript"),
    Command("auth", -2, _auth, "no_auth noscript"),
    Command("select", 2, _select),
    Command(
        "client",
        -2,
        None,
        subcommands=[
            Command("client|id", 2, _client_id, "noscript"),
            Command("client|setname", 3, _client_setname, "noscript"),
            Command("client|getname", 2, _client_getname, "noscript"),
            Command("client|setinfo", 4, _client_setinfo, "noscript"),
            Command("client|list", -2, _client_list, "noscript"),
            Command("client|info", 2, _client_info, "noscript"),
            Command("client|kill", -3, _client_kill, "noscript"),
            Command("client|reply", 3, _client_reply, "noscript"),
            Command("client|unblock", -3, _client_unblock, "noscript"),
            Command("client|no-touch", 3, _client_no_touch, "noscript"),
            Command("client|help", 2, help_reply(_CLIENT_HELP)),
            *TRACKING,
        ],
    ),
)
"""The connection commands, in COMMAND's order."""
