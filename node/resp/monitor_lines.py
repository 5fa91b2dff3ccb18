"""The line a MONITOR client is fed for each command the node runs, as redis-server 7.2 writes it:
``+<unix seconds>.<micros> [<db> <addr>] "arg" ...``, every argument quoted with C escapes for
what is not printable, and AUTH's (and HELLO's) credentials redacted (``node.redis_state.stats``).
"""

from __future__ import annotations

from typing import Final

from node.redis_state.stats import redact

__all__ = ["monitor_line"]


def _quoted(arg: bytes) -> str:
    """An argument as MONITOR shows it: quoted, with C escapes for what is not printable."""
    out = ['"']
    for byte in arg:
        char = chr(byte)
        if char in '\\"':
            out.append("\\" + char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    out.append('"')
    return "".join(out)


_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\a": "\\a", "\b": "\\b"}


def monitor_line(micros: int, db: int, addr: str, args: list[bytes]) -> bytes:
    """A MONITOR line: ``+<unix seconds>.<micros> [<db> <addr>] "arg" ...`` (AUTH redacted)."""
    shown = " ".join(_quoted(arg) for arg in redact(args))
    return f"+{micros // 10**6}.{micros % 10**6:06d} [{db} {addr}] {shown}\r\n".encode()
