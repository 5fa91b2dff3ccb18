"""Scripting over RESP, as redis-server 7.2 answers it: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT,
FUNCTION, FCALL and FCALL_RO.

A script runs synchronously on the caller's turn (nothing else runs meanwhile) in its account's
runtime (``node.scripting``). Its ``redis.call`` runs commands on a socket-less connection of its
own (``ScriptClient``), signed in as the caller's user with the caller's database selected, through
the same command table and handlers a client reaches, after the checks redis-server's ``scriptCall``
makes: ``noscript`` commands refused, writes refused to read-only scripts, a command that may add
data refused past ``maxmemory`` until the script's first write. Each write a command makes is
journaled by its handler as that command, so a script's effects replay as the commands it ran.

FUNCTION LOAD, DELETE and FLUSH are journaled as themselves (they replay into the runtime), and the
libraries' code is kept beside the account's keys, which a rewrite of the journal writes out as
FUNCTION LOAD commands. FUNCTION DUMP and RESTORE need redis-server's RDB format and are not served.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from node.connection import Reason
from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, REDIS_VERSION, help_reply
from node.resp.commands.introspection import command_keys
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.errors import RespProtocolError
from node.resp.writer import (
    OK,
    RESP2,
    RESP3,
    array,
    as_text,
    bulk,
    error,
    format_double,
    integer,
    protocol_error,
    simple,
)
from node.scripting import FLAG_NAMES, Engine, Function, Outcome, Script, ScriptError
from routing import glob_match

__all__ = ["COMMANDS", "ScriptClient", "answer_while_busy"]

log = logging.getLogger("pubmesh")

NOSCRIPT: Final = "-NOSCRIPT No matching script. Please use EVAL."
_NOTBUSY: Final = "-NOTBUSY No scripts in execution right now."
_BUSY_EVAL: Final = (
    "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
)
_BUSY_FUNCTION: Final = (
    "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
)
_UNKILLABLE: Final = (
    "-UNKILLABLE Sorry the script already executed write commands against the dataset. You can "
    "either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE "
    "command."
)
_LOG_LEVELS: Final = (logging.DEBUG, logging.INFO, logging.INFO, logging.WARNING)
"""``redis.LOG_DEBUG`` .. ``LOG_WARNING`` as Python log levels."""


class ScriptClient:
    """What a running script reaches the node through (``node.scripting.Host``): its commands run
    on a socket-less connection of the caller's account, signed in as the caller's user with the
    caller's database selected. There is one per account, kept for its next script: ``start``
    readies it for one."""

    def __init__(self, conn: RespConnection) -> None:
        self._conn = conn
        self._read_only = False
        self._allow_oom = False
        self._cross_slot = False
        self._oom_at_start = False
        self.caller = conn
        """The connection that runs the script."""
        self.eval_mode = True
        self.dirty = False
        self.killed = False
        self.name = b""
        """The function's name (a function's run)."""
        self.request: list[bytes] = []
        """The FCALL that runs it."""
        self._started = 0.0
        self.resp = 2
        self.last_error = b""
        """The last error reply a command of the script gave (counted in the error stats then)."""

    def serves(self, caller: RespConnection) -> bool:
        """Whether this client runs commands from the command table ``caller`` has."""
        return self._conn.table is caller.table

    def start(
        self,
        caller: RespConnection,
        *,
        read_only: bool,
        allow_oom: bool,
        eval_mode: bool,
        cross_slot: bool = False,
    ) -> ScriptClient:
        """Ready the client for a script ``caller`` runs; the client."""
        conn = self._conn
        assert caller.user is not None
        if conn.user is not caller.user:
            conn.switch_user(caller.user)
        conn.db = caller.db
        self._read_only = read_only
        self._allow_oom = allow_oom
        self._cross_slot = cross_slot
        self._oom_at_start = caller.broker.keyspaces.oom is not None
        self.caller = caller
        self.eval_mode = eval_mode
        self.dirty = False
        self.killed = False
        self.name = b""
        self.request = []
        self._started = time.monotonic()
        self.resp = 2
        self.last_error = b""
        return self

    def command(self, args: list[bytes]) -> bytes:
        conn = self._conn
        command = conn.table.find(args[0])
        if command is not None and command.subcommands is not None and len(args) >= 2:
            command = command.subcommands.get(args[1].lower())
        if command is None:
            return error("Unknown Redis command called from script")
        refusal = self._refusal(command, args)
        if refusal is not None:  # (a rejected call of the command and an error, as redis-server's)
            reply = error(refusal)
            conn.broker.redis_stats.rejected(command.name)
            conn.broker.redis_stats.error_reply(reply)
        else:
            if command.writes:
                self.dirty = True
            conn.writer = RESP3 if self.resp == 3 else RESP2
            reply = conn.run_captured(command, args)  # (an error reply counted as it was made)
        if reply[:1] == b"-":
            self.last_error = reply
        return reply

    def _refusal(self, command: Command[RespConnection], args: list[bytes]) -> str | None:
        """Why the script may not run this command now (None: it may)."""
        if (command.arity > 0 and len(args) != command.arity) or len(args) < -command.arity:
            return "Wrong number of args calling Redis command from script"
        if command.noscript:
            return "This Redis command is not allowed from script"
        keyspaces = self._conn.broker.keyspaces
        if command.writes:
            if self._read_only:
                return "Write commands are not allowed from read-only scripts."
            if keyspaces.refusal is not None and not self.dirty:
                return keyspaces.refusal
        if command.denyoom and self._oom_at_start and not (self.dirty or self._allow_oom):
            return keyspaces.oom
        router = self._conn.broker.key_router
        if router is not None:  # (replicated keys: as a Redis Cluster node checks a script)
            return router.script_refusal(command_keys(command, args), cross_slot=self._cross_slot)
        return None

    def log(self, level: int, text: str) -> None:
        log.log(_LOG_LEVELS[level], "%s", text)

    def acl_check(self, args: list[bytes]) -> bool | None:
        command = self._conn.table.find(args[0])
        if command is not None and command.subcommands is not None and len(args) >= 2:
            command = command.subcommands.get(args[1].lower())
        return None if command is None else True

    @property
    def duration_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def tick(self) -> bool:
        """Let the node's worker threads have the interpreter a moment; past the busy threshold,
        serve the other clients (they may kill the script)."""
        time.sleep(0)
        scripts = self._conn.broker.scripts
        if time.monotonic() - self._started >= scripts.busy_reply_threshold_ms / 1000:
            scripts.while_busy()
        return self.killed


def _engine(conn: RespConnection) -> Engine:
    return conn.broker.scripts.engine(conn.account.name, REDIS_VERSION, format_double)


def _libraries(conn: RespConnection) -> dict[bytes, bytes]:
    """The account's library codes as the store keeps them (``Keyspace.libraries``)."""
    return conn.broker.keyspaces.keyspace(conn.account.name).libraries


def _numkeys(conn: RespConnection, args: list[bytes], bad: str = NOT_INTEGER) -> int | None:
    """EVAL's and FCALL's key count, checked against the arguments (None: answered an error)."""
    numkeys = string2ll(args[2])
    if numkeys is None:
        conn.error(bad)
    elif numkeys > len(args) - 3:
        conn.error("Number of keys can't be greater than number of args")
    elif numkeys < 0:
        conn.error("Number of keys can't be negative")
    else:
        return numkeys
    return None


def _prepare(
    conn: RespConnection, flags: frozenset[str] | None, ro: bool, *, eval_mode: bool
) -> ScriptClient | None:
    """redis-server's ``scriptPrepareForRun``: the script's client, or None (answered an error).
    ``flags`` None is an EVAL script without a shebang (the compatible mode)."""
    keyspaces = conn.broker.keyspaces
    if flags is not None:
        if "no-writes" not in flags:
            refusal = keyspaces.refusal
            if refusal is not None:
                conn.error(refusal)
                return None
            if ro:
                conn.error("Can not execute a script with write flag using *_ro command.")
                return None
        oom = keyspaces.oom
        if oom is not None and not flags & {"allow-oom", "no-writes"}:
            # (a script that may write is a command that may add data: refused before it runs as
            # any such command is, unless it runs inside EXEC, where only the script's flags tell)
            conn.error(
                oom
                if conn.may_block
                else "-OOM allow-oom flag is not set on the script, can not run it when used "
                "memory > 'maxmemory'"
            )
            return None
    if flags is not None and "no-cluster" in flags and conn.broker.key_router is not None:
        conn.error("Can not run script on cluster, 'no-cluster' flag is set.")
        return None
    read_only = ro or (flags is not None and "no-writes" in flags)
    allow_oom = flags is not None and "allow-oom" in flags
    scripts = conn.broker.scripts
    client = scripts.clients.get(conn.account.name)
    if not isinstance(client, ScriptClient) or not client.serves(conn):
        own = RespConnection(conn.broker, 0, conn.table)
        own.scripted = True
        client = scripts.clients[conn.account.name] = ScriptClient(own)
    return client.start(
        conn,
        read_only=read_only,
        allow_oom=allow_oom,
        eval_mode=eval_mode,
        cross_slot=flags is not None and "allow-cross-slot-keys" in flags,
    )


def _run_script(
    conn: RespConnection, engine: Engine, args: list[bytes], numkeys: int, script: Script, ro: bool
) -> None:
    client = _prepare(conn, script.flags, ro, eval_mode=True)
    if client is None:
        return
    keys, argv = args[3 : 3 + numkeys], args[3 + numkeys :]
    protocol = conn.writer.version
    _running(conn, client, lambda: engine.run_script(script, keys, argv, client, protocol))


def _eval(ro: bool) -> Callable[[RespConnection, list[bytes]], None]:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        conn.show_to_monitors(args)  # (before the commands it runs)
        numkeys = _numkeys(conn, args)
        if numkeys is None:
            return
        engine = _engine(conn)
        try:
            script = engine.load_script(args[1])
        except ScriptError as exc:
            conn.error(str(exc))
            return
        _run_script(conn, engine, args, numkeys, script, ro)

    return handler


def _evalsha(ro: bool) -> Callable[[RespConnection, list[bytes]], None]:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        conn.show_to_monitors(args)  # (before the commands it runs)
        sha = args[1]
        if len(sha) != 40:
            conn.error(NOSCRIPT)
            return
        numkeys = _numkeys(conn, args)
        if numkeys is None:
            return
        engine = _engine(conn)
        script = engine.scripts.get(sha.decode("latin-1").lower())
        if script is None:
            conn.error(NOSCRIPT)
            return
        _run_script(conn, engine, args, numkeys, script, ro)

    return handler


def _running(conn: RespConnection, client: ScriptClient, run: Callable[[], Outcome]) -> None:
    """Run a script as the node's running one (what SCRIPT KILL and the busy replies see) and
    send its reply; an error that repeats one a command of the script gave (raised by
    ``redis.call``, or returned as ``redis.pcall`` gave it) is not counted again."""
    scripts = conn.broker.scripts
    scripts.running = client
    try:
        outcome = run()
    finally:
        scripts.running = None
    reply = outcome if isinstance(outcome, bytes) else error(outcome)
    conn.reply(reply)
    if client.last_error and reply.startswith(client.last_error[:-2]):
        conn.broker.redis_stats.uncount_error_reply(reply)


def _kill(conn: RespConnection, eval_mode: bool) -> bytes:
    """SCRIPT KILL (``eval_mode``) or FUNCTION KILL of the running script: its reply."""
    running = conn.broker.scripts.running
    if running is None:
        return error(_NOTBUSY)
    if running.dirty:
        return error(_UNKILLABLE)
    if running.eval_mode != eval_mode:
        return error(_BUSY_FUNCTION if eval_mode else _BUSY_EVAL)
    running.killed = True
    return OK


_ALLOW_BUSY: Final = frozenset((b"multi", b"discard", b"watch", b"unwatch"))
"""The transaction commands redis-server runs while a script is busy."""


def answer_while_busy(conn: RespConnection, data: bytes) -> None:
    """What another client sent while a script is busy: SCRIPT KILL and FUNCTION KILL act, FUNCTION
    STATS answers, MULTI, DISCARD, WATCH, UNWATCH and unknown commands run as usual, every other
    request is refused BUSY as redis-server refuses it then: a transaction it was to join fails,
    and an EXEC ends its transaction with EXECABORT."""
    running = conn.broker.scripts.running
    try:
        conn.parser.receive_data(data)
        for command in conn.parser.commands():
            args = command.args
            name, sub = args[0].lower(), args[1].lower() if len(args) == 2 else b""
            if sub == b"kill" and name in (b"script", b"function"):
                conn.send(_kill(conn, eval_mode=name == b"script"))
            elif (name, sub) == (b"function", b"stats"):
                conn.send(_stats(conn))
            else:
                found = conn.table.find(args[0])
                if found is None or found.key in _ALLOW_BUSY:
                    conn.execute(args)
                else:
                    eval_mode = running is None or running.eval_mode
                    conn.reject(found, _BUSY_EVAL if eval_mode else _BUSY_FUNCTION)
    except RespProtocolError as exc:  # (as the connection answers one when it is not busy)
        if exc.message is not None:
            conn.send(protocol_error(exc.message))
        conn.close(Reason.PROTOCOL_VIOLATION)


def _script_load(conn: RespConnection, args: list[bytes]) -> None:
    try:
        script = _engine(conn).load_script(args[2])
    except ScriptError as exc:
        conn.error(str(exc))
        return
    conn.reply(bulk(script.sha.encode()))


def _script_exists(conn: RespConnection, args: list[bytes]) -> None:
    scripts = _engine(conn).scripts
    conn.reply(array(integer(int(sha.decode("latin-1") in scripts)) for sha in args[2:]))


def _flush_mode(conn: RespConnection, args: list[bytes], message: str) -> bool:
    if len(args) == 2 or (len(args) == 3 and args[2].lower() in (b"sync", b"async")):
        return True
    conn.error(message)
    return False


def _script_flush(conn: RespConnection, args: list[bytes]) -> None:
    if _flush_mode(conn, args, "SCRIPT FLUSH only support SYNC|ASYNC option"):
        _engine(conn).flush_scripts()
        conn.reply(OK)


def _not_busy(conn: RespConnection, args: list[bytes]) -> None:
    """SCRIPT KILL and FUNCTION KILL reached through the command table: no script runs now (one
    that runs holds the node until it ends)."""
    conn.error(_NOTBUSY)


def _function_load(conn: RespConnection, args: list[bytes]) -> None:
    replace = False
    for option in args[2:-1]:
        if option.lower() == b"replace":
            replace = True
        else:
            conn.error(f"Unknown option given: {option.decode('utf-8', 'surrogateescape')}")
            return
    try:
        library = _engine(conn).load_library(args[-1], replace=replace)
    except ScriptError as exc:
        conn.error(str(exc))
        return
    _libraries(conn)[library.name] = library.code
    conn.log_write(args)
    conn.reply(bulk(library.name))


def _function_delete(conn: RespConnection, args: list[bytes]) -> None:
    if not _engine(conn).delete_library(args[2]):
        conn.error("Library not found")
        return
    _libraries(conn).pop(args[2], None)
    conn.log_write(args)
    conn.reply(OK)


def _function_flush(conn: RespConnection, args: list[bytes]) -> None:
    if len(args) > 3:
        conn.error(
            f"unknown subcommand or wrong number of arguments for '{as_text(args[1])[:128]}'. "
            "Try FUNCTION HELP."
        )
        return
    if _flush_mode(conn, args, "FUNCTION FLUSH only supports SYNC|ASYNC option"):
        _engine(conn).flush_functions()
        _libraries(conn).clear()
        conn.log_write(args)
        conn.reply(OK)


def _flags_reply(conn: RespConnection, function: Function) -> bytes:
    return conn.writer.set(simple(f.encode()) for f in FLAG_NAMES if f in function.flags)


def _description(conn: RespConnection, function: Function) -> bytes:
    text = function.description
    return conn.writer.null if text is None else bulk(text)


def _function_list(conn: RespConnection, args: list[bytes]) -> None:
    with_code, pattern = False, None
    i = 2
    while i < len(args):
        option = args[i].lower()
        if not with_code and option == b"withcode":
            with_code = True
        elif pattern is None and option == b"libraryname":
            if i >= len(args) - 1:
                conn.error("library name argument was not given")
                return
            i += 1
            pattern = args[i]
        else:
            conn.error(f"Unknown argument {args[i].decode('utf-8', 'surrogateescape')}")
            return
        i += 1
    writer = conn.writer
    entries = []
    for name, library in sorted(_engine(conn).libraries.items()):
        if pattern is not None and not glob_match(pattern, name, nocase=True):
            continue
        functions = array(
            writer.map(
                [
                    (bulk(b"name"), bulk(f.name)),
                    (
                        bulk(b"description"),
                        writer.null if f.description is None else bulk(f.description),
                    ),
                    (bulk(b"flags"), _flags_reply(conn, f)),
                ]
            )
            for f in library.functions.values()
        )
        fields = [(bulk(b"library_name"), bulk(name)), (bulk(b"engine"), bulk(b"LUA"))]
        fields.append((bulk(b"functions"), functions))
        if with_code:
            fields.append((bulk(b"library_code"), bulk(library.code)))
        entries.append(writer.map(fields))
    conn.reply(array(entries))


def _function_stats(conn: RespConnection, args: list[bytes]) -> None:
    conn.reply(_stats(conn))


def _stats(conn: RespConnection) -> bytes:
    """FUNCTION STATS: the function running now (answered while it is busy too), and the counts."""
    running = conn.broker.scripts.running
    if isinstance(running, ScriptClient) and running.eval_mode:
        return error(_BUSY_EVAL)
    engine = _engine(conn)
    writer = conn.writer
    now = writer.null
    if isinstance(running, ScriptClient):
        now = writer.map(
            [
                (bulk(b"name"), bulk(running.name)),
                (bulk(b"command"), array(bulk(arg) for arg in running.request)),
                (bulk(b"duration_ms"), integer(running.duration_ms)),
            ]
        )
    counts = writer.map(
        [
            (bulk(b"libraries_count"), integer(len(engine.libraries))),
            (bulk(b"functions_count"), integer(len(engine.functions))),
        ]
    )
    return writer.map(
        [(bulk(b"running_script"), now), (bulk(b"engines"), writer.map([(bulk(b"LUA"), counts)]))]
    )


def _fcall(ro: bool) -> Callable[[RespConnection, list[bytes]], None]:
    def handler(conn: RespConnection, args: list[bytes]) -> None:
        conn.show_to_monitors(args)  # (before the commands it runs)
        engine = _engine(conn)
        function = engine.functions.get(args[1].lower())
        if function is None:
            conn.error("Function not found")
            return
        numkeys = _numkeys(conn, args, "Bad number of keys provided")
        if numkeys is None:
            return
        client = _prepare(conn, function.flags, ro, eval_mode=False)
        if client is None:
            return
        client.name = function.name
        client.request = args
        keys, argv = args[3 : 3 + numkeys], args[3 + numkeys :]
        run = lambda: engine.run_function(function, keys, argv, client, conn.writer.version)  # noqa: E731
        _running(conn, client, run)

    return handler


_SCRIPT_HELP = [
    b"SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"EXISTS <sha1> [<sha1> ...]",
    b"    Return information about the existence of the scripts in the script cache.",
    b"FLUSH [ASYNC|SYNC]",
    b"    Flush the Lua scripts cache. Very dangerous on replicas.",
    b"    When called without the optional mode argument, the behavior is determined by the",
    b"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    b"    * ASYNC: Asynchronously flush the scripts cache.",
    b"    * SYNC: Synchronously flush the scripts cache.",
    b"KILL",
    b"    Kill the currently executing Lua script.",
    b"LOAD <script>",
    b"    Load a script into the scripts cache without executing it.",
    b"HELP",
    b"    Print this help.",
]
_FUNCTION_HELP = [
    b"FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    b"LOAD [REPLACE] <FUNCTION CODE>",
    b"    Create a new library with the given library name and code.",
    b"DELETE <LIBRARY NAME>",
    b"    Delete the given library.",
    b"LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    b"    Return general information on all the libraries:",
    b"    * Library name",
    b"    * The engine used to run the Library",
    b"    * Library description",
    b"    * Functions list",
    b"    * Library code (if WITHCODE is given)",
    b"    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    b"STATS",
    b"    Return information about the current function running:",
    b"    * Function name",
    b"    * Command used to run the function",
    b"    * Duration in MS that the function is running",
    b"    If no function is running, return nil",
    b"    In addition, returns a list of available engines.",
    b"KILL",
    b"    Kill the current running function.",
    b"FLUSH [ASYNC|SYNC]",
    b"    Delete all the libraries.",
    b"    When called without the optional mode argument, the behavior is determined by the",
    b"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    b"    * ASYNC: Asynchronously flush the libraries.",
    b"    * SYNC: Synchronously flush the libraries.",
    b"HELP",
    b"    Print this help.",
]

COMMANDS: Final = (
    Command("eval", -3, _eval(ro=False), "noscript on_keys skip_monitor"),
    Command("evalsha", -3, _evalsha(ro=False), "noscript on_keys skip_monitor"),
    Command("eval_ro", -3, _eval(ro=True), "noscript on_keys skip_monitor"),
    Command("evalsha_ro", -3, _evalsha(ro=True), "noscript on_keys skip_monitor"),
    Command(
        "script",
        -2,
        None,
        subcommands=[
            Command("script|load", 3, _script_load, "noscript"),
            Command("script|exists", -3, _script_exists, "noscript"),
            Command("script|flush", -2, _script_flush, "noscript"),
            Command("script|kill", 2, _not_busy, "noscript"),
            Command("script|help", 2, help_reply(_SCRIPT_HELP)),
        ],
    ),
    Command(
        "function",
        -2,
        None,
        subcommands=[
            Command("function|load", -3, _function_load, "write denyoom noscript"),
            Command("function|delete", 3, _function_delete, "write noscript"),
            Command("function|flush", -2, _function_flush, "write noscript"),
            Command("function|list", -2, _function_list, "noscript"),
            Command("function|stats", 2, _function_stats, "noscript"),
            Command("function|kill", 2, _not_busy, "noscript"),
            Command("function|help", 2, help_reply(_FUNCTION_HELP)),
        ],
    ),
    Command("fcall", -3, _fcall(ro=False), "noscript on_keys skip_monitor"),
    Command("fcall_ro", -3, _fcall(ro=True), "noscript on_keys skip_monitor"),
)
"""The scripting commands, in COMMAND's order."""
