"""LCS: the longest common subsequence of two strings, as redis-server 7.2 answers it (the string,
its length with LEN, or the matching ranges with IDX, WITHMATCHLEN and MINMATCHLEN).

redis-server fills a table of ``LCS(i, j)`` (the length for the first ``i`` bytes of one string and
the first ``j`` of the other) and walks back from its corner, taking a matching byte when the two
bytes match and otherwise stepping towards the larger neighbour (the first string's when they tie
or it is larger). The same walk is made here over the same values, kept compactly: row ``i`` of the
table is one integer whose bit ``j`` is set where ``LCS(i, j + 1)`` does not exceed ``LCS(i, j)``
(the bit-parallel form of Allison and Dix), so a row costs a few big-integer operations to build
and a value one population count to read. redis-server's limit on the table's size (4 bytes a cell
within ``proto-max-bulk-len``) is kept as is.
"""

from __future__ import annotations

from typing import Final

from node.integers import string2ll
from node.resp.commands.common import NOT_INTEGER, SYNTAX, now_ms
from node.resp.connection import RespConnection
from node.resp.dispatch import Command
from node.resp.writer import array, integer

__all__ = ["COMMANDS", "lcs_rows"]

_MAX_TABLE: Final = 512 * 1024 * 1024
"""``proto-max-bulk-len``, which the table's 4-byte cells may not exceed."""


def _positions(b: bytes, byte: int) -> int:
    """The bits ``j`` where ``b[j] == byte``."""
    table = bytearray(b"0" * 256)
    table[byte] = ord("1")
    return int(b.translate(table)[::-1] or b"0", 2)


def lcs_rows(a: bytes, b: bytes) -> tuple[list[int], dict[int, int]]:
    """The table's rows, as the module's notes say (``rows[i]`` for the first ``i`` bytes of
    ``a``, ``len(b)`` bits each), and where each byte of ``a`` is in ``b`` (byte -> bits)."""
    full = (1 << len(b)) - 1
    matches = {byte: _positions(b, byte) for byte in set(a)}
    row = full
    rows = [row]
    for byte in a:
        match = row & matches[byte]
        row = ((row + match) | (row - match)) & full
        rows.append(row)
    return rows, matches


def _length(rows: list[int], i: int, j: int) -> int:
    """``LCS(i, j)``."""
    return j - (rows[i] & ((1 << j) - 1)).bit_count()


class _Options:
    __slots__ = ("idx", "len", "min_match", "with_match_len")

    def __init__(self) -> None:
        self.idx = self.len = self.with_match_len = False
        self.min_match = 0


def _parse(conn: RespConnection, args: list[bytes]) -> _Options | None:
    options = _Options()
    i = 3
    while i < len(args):
        option = args[i].lower()
        if option == b"idx":
            options.idx = True
        elif option == b"len":
            options.len = True
        elif option == b"withmatchlen":
            options.with_match_len = True
        elif option == b"minmatchlen" and i + 1 < len(args):
            number = string2ll(args[i + 1])
            if number is None:
                conn.error(NOT_INTEGER)
                return None
            options.min_match = max(0, number)
            i += 1
        else:
            conn.error(SYNTAX)
            return None
        i += 1
    if options.idx and options.len:
        conn.error("If you want both the length and indexes, please just use IDX.")
        return None
    return options


def _lcs(conn: RespConnection, args: list[bytes]) -> None:
    db, now = conn.database, now_ms()
    a, b = db.read(args[1], now), db.read(args[2], now)
    if not isinstance(a, (bytes, bytearray, type(None))) or not isinstance(
        b, (bytes, bytearray, type(None))
    ):
        conn.error("The specified keys must contain string values")
        return
    options = _parse(conn, args)
    if options is None:
        return
    first, second = bytes(a or b""), bytes(b or b"")
    if (len(first) + 1) * (len(second) + 1) * 4 > _MAX_TABLE:
        conn.error("Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
        return
    rows, matches = lcs_rows(first, second)
    total = _length(rows, len(first), len(second))
    if options.len:
        conn.reply(integer(total))
        return
    common, ranges = _walk(rows, matches, first, second, options)
    if not options.idx:
        conn.reply(b"$%d\r\n%b\r\n" % (len(common), common))
        return
    writer = conn.writer
    conn.reply(
        writer.map_header(2) + b"$7\r\nmatches\r\n" + array(ranges) + b"$3\r\nlen\r\n" + integer(total)
    )


def _walk(
    rows: list[int], matches: dict[int, int], a: bytes, b: bytes, options: _Options
) -> tuple[bytes, list[bytes]]:
    """redis-server's walk back through the table: the common subsequence, and the IDX ranges
    (encoded replies) from the last match to the first.

    Where the bytes differ, ``LCS(i, j)`` is the larger of ``LCS(i - 1, j)`` and ``LCS(i, j - 1)``,
    so redis-server's step (up a row if ``LCS(i - 1, j)`` is larger, else left) goes left exactly
    when row ``i`` does not grow at ``j``: its bit ``j - 1`` is set. Steps left go on until a
    matching byte or a place where the row grows, which one search of the row's bits finds, so
    the walk costs a few big-integer operations per row rather than a step per byte.
    """
    common = bytearray()
    ranges: list[bytes] = []
    i, j = len(a), len(b)
    unset = len(a)
    a_start, a_end, b_start, b_end = unset, 0, 0, 0
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            common.append(a[i - 1])
            if a_start == unset:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start -= 1
                b_start -= 1
            else:
                emit = True
            if a_start == 0 or b_start == 0:
                emit = True
            i -= 1
            j -= 1
        else:
            row = rows[i]
            if not row >> (j - 1) & 1:
                i -= 1
            else:  # (left, as far as the bytes differ and the row does not grow)
                j = ((~row | matches[a[i - 1]]) & ((1 << (j - 1)) - 1)).bit_length()
            if a_start != unset:
                emit = True
        if emit:
            length = a_end - a_start + 1
            if options.idx and (options.min_match == 0 or length >= options.min_match):
                parts = [
                    array([integer(a_start), integer(a_end)]),
                    array([integer(b_start), integer(b_end)]),
                ]
                if options.with_match_len:
                    parts.append(integer(length))
                ranges.append(array(parts))
            a_start = unset
    common.reverse()
    return bytes(common), ranges


COMMANDS: Final = (Command("lcs", -3, _lcs, "readonly", keys=(1, 2, 1)),)
"""LCS, in COMMAND's order."""
