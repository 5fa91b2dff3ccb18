"""A Lua 5.1 runtime for Redis scripts, without I/O: EVAL's script cache and FUNCTION's libraries,
run as redis-server 7.2 runs them.

An ``Engine`` owns one sandboxed runtime (``prelude.lua`` builds the sandbox: read-only globals
and libraries, no ``os``/``io``/``require``/``loadfile``/``dofile``/``print``/``debug``, Python
unreachable). A script reaches the node only through the ``Host`` it is run with: ``command`` runs
one command and answers its reply as RESP bytes, which the engine converts to Lua values as
redis-server does (integers to numbers, bulk strings to strings, nulls to false, arrays to tables,
status to ``{ok=...}``, errors to ``{err=...}`` raised by ``redis.call``; RESP3's map, set, double,
big number, verbatim string, boolean and null after ``redis.setresp(3)``). What a script returns is
converted the other way into the caller's protocol (numbers truncated to integers, tables read up
to their first nil, ``{ok=}``, ``{err=}``, false as null, true as 1) by the prelude's serializer.
Scripts run inside one long-lived coroutine of the runtime (see the prelude).

Errors come out as redis-server words them: ``Error compiling script (new function): ...``,
runtime errors with `` script: <sha>, on @user_script:<line>.`` appended. Memory is bounded
(``MAX_MEMORY``): a script that exhausts it fails with an error reply. ``Host.tick`` is called every
``HOOK_INSTRUCTIONS`` Lua instructions; answering True kills the script. A library's code that
runs past ``LOAD_TIMEOUT`` while FUNCTION LOAD registers it fails the same way.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final, Protocol

import lupa.lua51 as lua51

from node.scripting.libraries import (
    LibraryError,
    bit_library,
    cjson_library,
    cmsgpack_library,
    unsupported_library,
)
from node.scripting.records import (
    FLAG_NAMES,
    Function,
    Library,
    Rand48,
    Script,
    ScriptError,
    lua_text,
    parse_shebang,
    sha1hex,
    split_args,
    valid_name,
)

__all__ = ["HOOK_INSTRUCTIONS", "LOAD_TIMEOUT", "MAX_MEMORY", "Engine", "Host", "Outcome"]

MAX_MEMORY: Final = 256 * 1024 * 1024
"""The most memory one runtime may hold (a script past it fails)."""
LOAD_TIMEOUT: Final = 0.5
"""Seconds a library's code may run while FUNCTION LOAD registers its functions."""
HOOK_INSTRUCTIONS: Final = 100_000
"""Lua instructions between two ``Host.tick`` calls (redis-server's count hook)."""
_KILLED: Final = b"ERR Script killed by user with SCRIPT KILL..."
_LOAD_TIMEOUT: Final = b"ERR FUNCTION LOAD timeout"
_NO_ARGUMENTS: Final = b"Please specify at least one argument for this redis lib call"
_BAD_ARGUMENT: Final = b"Lua redis lib command arguments must be strings or integers"
_LOG_LEVELS: Final = range(4)
_MAX_SPREAD: Final = 256
"""The most KEYS and ARGV handed to a script as arguments (more go as tables: the runtime's C stack
holds fewer than 8000 values)."""


Outcome = bytes | str
"""What running a script gives: its reply (RESP bytes), or an error's text (after ``-ERR ``, or a
whole ``-CODE ...`` line) that the caller writes as an error reply."""


class Host(Protocol):
    """What a running script reaches the node through."""

    resp: int
    """The protocol replies come back in to the script (``redis.setresp``)."""

    def command(self, args: list[bytes]) -> bytes:
        """Run ``args`` as ``redis.call`` does; its reply (an error reply when refused)."""
        ...

    def log(self, level: int, text: str) -> None: ...

    def acl_check(self, args: list[bytes]) -> bool | None:
        """Whether the caller may run ``args`` (None: no such command)."""
        ...

    def tick(self) -> bool:
        """Called while the script runs; True kills it."""
        ...


class _ErrorReply(Exception):
    """The error a ``redis.call`` raises into the script: its error table."""

    def __init__(self, table: Any) -> None:
        super().__init__("error reply")
        self.table = table


class Engine:
    """One sandboxed Lua runtime: the script cache and the function libraries of an account."""

    def __init__(
        self,
        *,
        version: str,
        double_text: Callable[[float], bytes],
        max_memory: int = MAX_MEMORY,
    ) -> None:
        self._double_text = double_text
        self._runtime = lua51.LuaRuntime(
            encoding=None,
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            attribute_filter=_no_attributes,
            max_memory=max_memory,
        )
        self._max_memory = max_memory
        self.scripts: dict[str, Script] = {}
        self.libraries: dict[bytes, Library] = {}
        self.functions: dict[bytes, Function] = {}
        """Every library's functions, by lowercase name (FCALL finds them in any case)."""
        self._host: Host | None = None
        self._load_deadline = 0.0  # (while a library's code runs: when it has run too long)
        self._rand = Rand48()
        self.hook_instructions = HOOK_INSTRUCTIONS
        runtime = self._runtime
        self._table_from = runtime.table_from
        self._lua_null: Any = None  # (not ``_null``: compiled, its C name is GCC's ``__null``)
        major, minor, patch = (int(p) for p in version.split("."))
        host = runtime.table_from(
            {
                b"call": self._call_raising,
                b"pcall": self._call_protected,
                b"error_of": _error_of,
                b"log": self._log,
                b"sha1hex": lambda *a: sha1hex(lua_text(a[0]) or b"").encode(),
                b"error_table": lambda text: self.error_table(text),
                b"setresp": self._setresp,
                b"random": self._random,
                b"randomseed": lambda seed: self._rand.seed(int(seed)),
                b"acl_check": self._acl_check,
                b"tick": self._tick,
                b"bit": self._library(bit_library()),
                b"cjson": self._library(cjson_library(self)),
                b"cmsgpack": self._library(cmsgpack_library(self)),
                b"struct": self._library(unsupported_library("struct", ["pack", "unpack", "size"])),
                b"version": version.encode(),
                b"resp": self._resp,
                b"format_double": lambda n: double_text(float(n)),
                b"version_num": (major << 16) | (minor << 8) | patch,
            }
        )
        code = resources.files("node.scripting").joinpath("prelude.lua").read_bytes()
        prelude = runtime.execute(b"return loadstring(...)", code, b"=prelude")
        self._api = prelude(host)
        api = self._api
        self._load, self._run_eval, self._run_function = api.load, api.run_eval, api.run_function
        self._run_library = api.run_library
        self._rawget, self._next, self._type = api.rawget, api.next, api.type
        self._lua_null = api.null

    # -- the host's callbacks (never raise: a Python exception must not reach a script) ------------

    def _library(self, functions: Mapping[str, Callable[..., Any]]) -> Any:
        """A library table: each function answers (true, value) or (false, message)."""

        def guard(fn: Callable[..., Any]) -> Callable[..., Any]:
            def guarded(*values: Any) -> tuple[Any, ...]:
                try:
                    result = fn(*values)
                    return (True, *result) if isinstance(result, tuple) else (True, result)
                except LibraryError as exc:
                    return False, str(exc).encode()
                except Exception as exc:  # (a script must get an error, never a Python object)
                    return False, f"{type(exc).__name__}".encode()

            return guarded

        return self._table_from({name.encode(): guard(fn) for name, fn in functions.items()})

    def _call(self, values: tuple[Any, ...]) -> tuple[bool, Any]:
        """Run the command ``values`` name: whether it answered no error, and its reply."""
        try:
            if not values:
                return False, self.error_table(_NO_ARGUMENTS)
            args = list(values)
            for n, value in enumerate(args):
                if type(value) is not bytes:
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        args[n] = self._double_text(float(value))
                    else:
                        return False, self.error_table(_BAD_ARGUMENT)
            host = self._host
            if host is None:
                return False, self.error_table(b"redis.call can only be called from a running script")
            reply = host.command(args)
            return reply[:1] != b"-", self._reply_to_lua(reply)
        except Exception as exc:
            return False, self.error_table(f"{type(exc).__name__}".encode())

    def _call_raising(self, *values: Any) -> Any:
        """redis.call: the reply, or an ``_ErrorReply`` raised (a Lua error) for an error."""
        ok, value = self._call(values)
        if not ok:
            raise _ErrorReply(value)
        return value

    def _resp(self) -> int:
        """redis.setresp's current choice (2 outside a script)."""
        host = self._host
        return host.resp if host is not None else 2

    def _call_protected(self, *values: Any) -> Any:
        """redis.pcall: the reply, an error as its table."""
        return self._call(values)[1]

    def _acl_check(self, *values: Any) -> tuple[bool, Any]:
        args = [lua_text(v) for v in values]
        if not args or any(a is None for a in args):
            return False, self.error_table(
                b"Lua redis lib command arguments must be strings or integers"
            )
        host = self._host
        allowed = host.acl_check([a for a in args if a is not None]) if host is not None else None
        if allowed is None:
            return False, self.error_table(b"Invalid command passed to redis.acl_check_cmd()")
        return True, allowed

    def _log(self, *values: Any) -> tuple[bool, Any]:
        level = values[0]
        if isinstance(level, bool) or not isinstance(level, int | float):
            if not (isinstance(level, bytes) and _is_number(level)):
                return False, b"ERR First argument must be a number (log level)."
            level = float(level)
        if int(level) not in _LOG_LEVELS:
            return False, b"ERR Invalid debug level."
        parts = [t for t in map(lua_text, values[1:]) if t is not None]
        if self._host is not None:
            self._host.log(int(level), b" ".join(parts).decode("utf-8", "replace"))
        return True, None

    def _setresp(self, version: Any) -> bool:
        if isinstance(version, bool) or not isinstance(version, int | float) or version not in (2, 3):
            return False
        if self._host is not None:
            self._host.resp = int(version)
        return True

    def _random(self, *bounds: Any) -> float:
        r = (self._rand.next() % 0x7FFFFFFF) / 0x7FFFFFFF
        if not bounds:
            return r
        low, high = (1, int(bounds[0])) if len(bounds) == 1 else (int(bounds[0]), int(bounds[1]))
        return float(math.floor(r * (high - low + 1)) + low)

    def _tick(self) -> bytes | None:
        """Whether to stop what runs now: the error it stops with, or None."""
        if self._load_deadline:
            return _LOAD_TIMEOUT if time.monotonic() > self._load_deadline else None
        host = self._host
        return _KILLED if host is not None and host.tick() else None

    # -- LuaView (what the libraries read Lua values through) --------------------------------------

    def kind(self, value: Any) -> str:
        return lua51.lua_type(value) or type(value).__name__

    def get(self, table: Any, key: Any) -> Any:
        return self._rawget(table, key)

    def items(self, table: Any) -> list[tuple[Any, Any]]:
        found: list[tuple[Any, Any]] = []
        key = None
        while True:
            pair = self._next(table, key)
            if pair is None or pair[0] is None:
                return found
            key = pair[0]
            found.append((pair[0], pair[1]))

    def table(self, items: dict[Any, Any] | list[Any]) -> Any:
        return self._table_from(items)

    @property
    def null(self) -> Any:
        return self._lua_null

    # -- conversions --------------------------------------------------------------------------------

    def error_table(self, text: bytes) -> Any:
        """redis.pcall's error table for ``text`` (``-CODE message`` or a message, ERR then)."""
        if text[:1] == b"-":
            code, space, message = text[1:].partition(b" ")
            if not space:
                code, message = b"ERR", text[1:]
        else:
            code, message = b"ERR", text
        return self._table_from({b"err": code + b" " + message.strip(b"\r\n")})

    def _reply_to_lua(self, reply: bytes) -> Any:
        """A command's reply as a Lua value (the common kinds read here, the others by
        ``_to_lua``)."""
        kind = reply[:1]
        if kind == b"+":
            return self._table_from({b"ok": reply[1 : reply.index(b"\r\n")]})
        if kind == b"$":
            end = reply.index(b"\r\n")
            size = int(reply[1:end])
            return False if size < 0 else reply[end + 2 : end + 2 + size]
        if kind == b":":
            return float(int(reply[1 : reply.index(b"\r\n")]))
        return self._to_lua(reply, 0)[0]

    def _to_lua(self, reply: bytes, at: int) -> tuple[Any, int]:
        """The RESP reply at ``at`` as a Lua value, and where it ends."""
        kind = reply[at : at + 1]
        end = reply.index(b"\r\n", at)
        line = reply[at + 1 : end]
        after = end + 2
        if kind in (b"$", b"="):
            size = int(line)
            if size < 0:
                return False, after
            data = reply[after : after + size]
            if kind == b"=":
                return self._table_from(
                    {b"verbatim_string": self._table_from({b"format": data[:3], b"string": data[4:]})}
                ), after + size + 2
            return data, after + size + 2
        if kind == b":":
            return float(int(line)), after
        if kind == b"+":
            return self._table_from({b"ok": line}), after
        if kind == b"-":
            return self.error_table(b"-" + line), after
        if kind in (b"*", b">", b"~", b"%"):
            count = int(line)
            if count < 0:
                return False, after
            items = []
            for _ in range(count * 2 if kind == b"%" else count):
                item, after = self._to_lua(reply, after)
                items.append(item)
            if kind == b"%":
                inner = self._runtime.table()
                for key, value in zip(items[::2], items[1::2], strict=True):
                    inner[key] = value
                return self._table_from({b"map": inner}), after
            if kind == b"~":
                inner = self._runtime.table()
                for item in items:
                    inner[item] = True
                return self._table_from({b"set": inner}), after
            table = self._runtime.table()
            for n, item in enumerate(items, 1):
                table[n] = item
            return table, after
        if kind == b"_":
            return None, after
        if kind == b"#":
            return line == b"t", after
        if kind == b",":
            return self._table_from({b"double": float(line)}), after
        if kind == b"(":
            return self._table_from({b"big_number": line}), after
        raise ValueError(f"unexpected reply type {kind!r}")

    # -- EVAL ---------------------------------------------------------------------------------------

    def load_script(self, body: bytes) -> Script:
        """The cached script of ``body``, compiled and cached first if need be.

        Raises:
            ScriptError: a bad shebang, or the script does not compile.
        """
        sha = sha1hex(body)
        script = self.scripts.get(sha)
        if script is not None:
            return script
        flags, skip = parse_shebang(body)
        # (The shebang's line is left out but its line feed kept, so line numbers stay right.)
        compiled = self._load(body[skip:], b"@user_script")
        if isinstance(compiled, tuple):
            message = compiled[1].decode("utf-8", "surrogateescape") if compiled[1] else "?"
            raise ScriptError(f"Error compiling script (new function): {message}")
        script = self.scripts[sha] = Script(sha, body, flags, compiled)
        return script

    def run_script(
        self, script: Script, keys: list[bytes], argv: list[bytes], host: Host, protocol: int
    ) -> Outcome:
        """Run ``script`` with KEYS and ARGV; its reply in RESP ``protocol`` (2 or 3)."""
        return self._run(self._run_eval, script.function, keys, argv, host, protocol, script.sha)

    def flush_scripts(self) -> None:
        self.scripts.clear()
        self._runtime.gccollect()

    # -- FUNCTION -----------------------------------------------------------------------------------

    def load_library(self, code: bytes, *, replace: bool) -> Library:
        """Load (or with ``replace`` reload) the library ``code`` defines.

        Raises:
            ScriptError: as redis-server refuses the library.
        """
        if not code.startswith(b"#!"):
            raise ScriptError("Missing library metadata")
        end = code.find(b"\n")
        if end < 0:
            raise ScriptError("Invalid library metadata")
        parts = split_args(code[:end])
        if not parts:
            raise ScriptError("Invalid library metadata")
        engine, name = parts[0][2:], None
        for part in parts[1:]:
            if part[:5].lower() == b"name=":
                if name is not None:
                    raise ScriptError("Invalid metadata value, name argument was given multiple times")
                name = part[5:]
                continue
            raise ScriptError(f"Invalid metadata value given: {part.decode('utf-8', 'replace')}")
        if name is None:
            raise ScriptError("Library name was not given")
        if not valid_name(name):
            raise ScriptError(
                "Library names can only contain letters, numbers, or underscores(_) and must be at "
                "least one character long"
            )
        if engine.lower() != b"lua":
            raise ScriptError(f"Engine '{engine.decode('utf-8', 'replace')}' not found")
        old = self.libraries.get(name)
        if old is not None and not replace:
            raise ScriptError(f"Library '{name.decode()}' already exists")
        library = Library(name, code)
        compiled = self._load(code[end:], b"@user_function")
        if isinstance(compiled, tuple):
            message = compiled[1].decode("utf-8", "surrogateescape") if compiled[1] else "?"
            raise ScriptError(f"Error compiling function: {message}")
        register = self._registrar(library)
        self._load_deadline = time.monotonic() + LOAD_TIMEOUT
        try:
            ok, outcome = self._run_library(compiled, register, self.hook_instructions)
        finally:
            self._load_deadline = 0.0
        if not ok:
            text = self._rawget(outcome, b"err") if self._type(outcome) == b"table" else outcome
            shown = text.decode("utf-8", "surrogateescape") if isinstance(text, bytes) else str(text)
            raise ScriptError(f"Error registering functions: {shown}")
        if not library.functions:
            raise ScriptError("No functions registered")
        for fname, function in library.functions.items():
            function.callback = self._rawget(outcome, fname)
        for fname in library.functions:
            owner = self.functions.get(fname.lower())
            if owner is not None and owner.library is not old:
                raise ScriptError(f"Function {fname.decode()} already exists")
        if old is not None:
            self._unlink(old)
        self.libraries[name] = library
        self.functions.update((f.lower(), function) for f, function in library.functions.items())
        return library

    def _registrar(self, library: Library) -> Callable[..., tuple[bytes | None, bytes]]:
        """``redis.register_function``'s checks while ``library`` loads: (None, the function's
        name), or the error's text. (The callback itself stays in the runtime until the library
        has loaded: a value handed over inside a script is only valid while the script runs.)"""

        def register(*values: Any) -> tuple[bytes | None, bytes]:
            named: list[bytes] = []
            failure = check(named, *values)
            return failure, named[0] if named else b""

        def check(named: list[bytes], *values: Any) -> bytes | None:
            if len(values) not in (1, 2):
                return b"ERR wrong number of arguments to redis.register_function"
            description: bytes | None = None
            flags: set[str] = set()
            if len(values) == 2:
                name, callback = lua_text(values[0]), values[1]
                if name is None:
                    return b"ERR first argument to redis.register_function must be a string"
                if self._type(callback) != b"function":
                    return b"ERR second argument to redis.register_function must be a function"
            else:
                if self._type(values[0]) != b"table":
                    return (
                        b"ERR calling redis.register_function with a single argument is only "
                        b"applicable to Lua table (representing named arguments)."
                    )
                name = callback = None
                for key, value in self.items(values[0]):
                    if not isinstance(key, bytes | int | float) or isinstance(key, bool):
                        return b"ERR named argument key given to redis.register_function is not a string"
                    field = (lua_text(key) or b"").lower()
                    if field == b"function_name":
                        name = lua_text(value)
                        if name is None:
                            return (
                                b"ERR function_name argument given to redis.register_function "
                                b"must be a string"
                            )
                    elif field == b"description":
                        description = lua_text(value)
                        if description is None:
                            return (
                                b"ERR description argument given to redis.register_function "
                                b"must be a string"
                            )
                    elif field == b"callback":
                        if self._type(value) != b"function":
                            return (
                                b"ERR callback argument given to redis.register_function must be "
                                b"a function"
                            )
                        callback = value
                    elif field == b"flags":
                        if self._type(value) != b"table":
                            return (
                                b"ERR flags argument to redis.register_function must be a table "
                                b"representing function flags"
                            )
                        for _, flag in self.items(value):
                            text = lua_text(flag)
                            found = (text or b"").decode("utf-8", "replace").lower()
                            if text is None or found not in FLAG_NAMES:
                                return b"ERR unknown flag given"
                            flags.add(found)
                    else:
                        return b"ERR unknown argument given to redis.register_function"
                if name is None:
                    return b"ERR redis.register_function must get a function name argument"
                if callback is None:
                    return b"ERR redis.register_function must get a callback argument"
            if not valid_name(name):
                return (
                    b"ERR Library names can only contain letters, numbers, or underscores(_) and "
                    b"must be at least one character long"
                )
            if name in library.functions:
                return b"ERR Function already exists in the library"
            library.functions[name] = Function(name, library, None, description, frozenset(flags))
            named.append(name)
            return None

        return register

    def _unlink(self, library: Library) -> None:
        for name, function in library.functions.items():
            if self.functions.get(name.lower()) is function:
                del self.functions[name.lower()]
        self.libraries.pop(library.name, None)

    def delete_library(self, name: bytes) -> bool:
        library = self.libraries.get(name)
        if library is None:
            return False
        self._unlink(library)
        return True

    def flush_functions(self) -> None:
        self.libraries.clear()
        self.functions.clear()
        self._runtime.gccollect()

    def run_function(
        self, function: Function, keys: list[bytes], argv: list[bytes], host: Host, protocol: int
    ) -> Outcome:
        """Call a registered function with its keys and arguments; its reply."""
        name = function.name.decode("utf-8", "surrogateescape")
        return self._run(self._run_function, function.callback, keys, argv, host, protocol, name)

    # -- running ------------------------------------------------------------------------------------

    def _run(
        self,
        run: Any,
        fn: Any,
        keys: list[bytes],
        argv: list[bytes],
        host: Host,
        protocol: int,
        name: str,
    ) -> Outcome:
        """Call the prelude's ``run`` (``run_eval`` or ``run_function``) on ``fn``: KEYS and ARGV
        go as its arguments after their count, or as two tables when there are many."""
        self._host = host
        try:
            try:
                hook = self.hook_instructions
                if len(keys) + len(argv) <= _MAX_SPREAD:
                    outcome = run(protocol, fn, hook, len(keys), *keys, *argv)
                else:
                    outcome = run(protocol, fn, hook, -1, self._table_from(keys), self._table_from(argv))
            except lua51.LuaMemoryError:
                self._runtime.gccollect()
                return "Error running script, not enough memory"
            except lua51.LuaError as exc:
                return f"Error running script {name}, {str(exc)[:100]}"
            ok, value = outcome
            if ok:
                return bytes(value)
            return self._error_reply(value, name)
        finally:
            self._host = None
            if self._runtime.get_memory_used() > self._max_memory // 2:
                self._runtime.gccollect()

    def _error_reply(self, err: Any, name: str) -> str:
        if self._type(err) != b"table":
            text = (
                err.decode("utf-8", "surrogateescape") if isinstance(err, bytes) else "execution failure"
            )
            return f"Error running script {name}, {text[:100]}"
        get = self._rawget
        message = (lua_text(get(err, b"err")) or b"").partition(b"\0")[0]  # (a C string there)
        line = "-" + message.decode("utf-8", "surrogateescape")
        source, where = lua_text(get(err, b"source")), lua_text(get(err, b"line"))
        if source is not None and where is not None:
            line += f" script: {name}, on {source.decode('utf-8', 'surrogateescape')}:{where.decode()}."
        return line


def _error_of(value: object) -> Any:
    """What a script sees of an error raised from Python: a ``redis.call``'s error table, any
    other exception's message (never the exception itself)."""
    if isinstance(value, _ErrorReply):
        return value.table
    if isinstance(value, BaseException):
        return str(value).encode("utf-8", "replace")
    return None


def _is_number(text: bytes) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _no_attributes(obj: object, name: object, setting: bool) -> object:
    """No script reaches a Python object's attributes."""
    raise AttributeError("not accessible")
