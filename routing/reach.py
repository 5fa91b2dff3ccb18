"""Whether a Redis pattern can reach a channel its subscriber may not subscribe to, decided exactly.

Subscribe permissions are subject patterns, a PSUBSCRIBE pattern is a Redis glob over channel
bytes, and each channel travels on a subject of its own (``routing.channels``): the channel itself
when it is a valid literal subject, else ``$R.`` and its bytes in hex. A pattern may be subscribed
to when every channel it matches could be subscribed to one by one, so the question is whether
two regular languages meet: the glob's channels and the refused ones.

Each language is an automaton over bytes whose moves carry byte sets as 256-bit integer masks:
the glob (read from ``routing.glob.positions``, so exactly as matching reads it), the valid literal
subjects (UTF-8, no empty token, no whitespace, no ``*`` or ``>`` token, not under ``$R.``) and
the allow and deny lists (a ``*`` token is one or more bytes other than ``.``, a ``>`` one or
more tokens). A breadth-first search of their product, each made deterministic as it goes (sets
of states are integers), finds a shortest refused channel, a witness that an error can name, or
proves there is none. The channels that are not valid subjects are searched in a second product
in which the permission automata read ``$R.`` and then each channel byte as its two hex digits,
so that branch is exact as well; the shorter of the two witnesses is the answer.

Both searches share a budget of work (product states, byte-set intersections, automaton moves);
a pattern that needs more is refused without a witness, which errs on the safe side. Patterns
people write take a few thousand steps; the budget stops hostile ones (``*a?????...`` needs a set
of states per combination of its last bytes) after a fraction of a second and a few megabytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from routing.channels import RESERVED_PREFIX
from routing.glob import GlobPattern, positions
from routing.subjects import FWC, PWC, tokenize

__all__ = ["MAX_WORK", "ChannelRules", "Verdict"]

MAX_WORK: Final = 250_000
"""Steps one check may take before it gives up and refuses the pattern (see ``_Budget``)."""

_ALL: Final = (1 << 256) - 1
_DOT: Final = 1 << ord(".")
_NOT_DOT: Final = _ALL & ~_DOT
_HEX_DIGITS: Final = b"0123456789abcdef"
_LOWER: Final = sum(1 << b for b in b"abcdefghijklmnopqrstuvwxyz")
_ALNUM: Final = _LOWER | sum(1 << b for b in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_PRINTABLE: Final = sum(1 << b for b in range(0x20, 0x7F))

Edges = tuple[tuple[int, int], ...]
"""Where a set of states goes: (byte mask, next set of states) pairs partitioning all 256 bytes."""


@attrs.frozen
class Verdict:
    """The outcome of a check.

    Attributes:
        allowed: every channel the pattern matches may be subscribed to.
        witness: when refused, a shortest channel the pattern matches that may not be subscribed
            to; None when refused because the check gave up.
    """

    allowed: bool
    witness: bytes | None = None


def _bits(states: int) -> Iterable[int]:
    while states:
        low = states & -states
        yield low.bit_length() - 1
        states ^= low


class _Nfa:
    """An automaton without empty moves: states are bit positions, a move is (byte mask, targets)."""

    __slots__ = ("accept", "moves", "start")

    def __init__(self) -> None:
        self.moves: list[list[tuple[int, int]]] = []
        self.start = 0
        self.accept = 0

    def state(self) -> int:
        self.moves.append([])
        return len(self.moves) - 1

    def step(self, states: int, byte: int) -> int:
        out = 0
        for state in _bits(states):
            for mask, targets in self.moves[state]:
                if mask >> byte & 1:
                    out |= targets
        return out

    def run(self, states: int, data: bytes) -> int:
        for byte in data:
            states = self.step(states, byte)
        return states

    def edges(self, states: int) -> tuple[Edges, int]:
        """The partition of all bytes by the set of states each leads to (refined move by move),
        and the work that took."""
        blocks: list[tuple[int, int]] = [(_ALL, 0)]
        work = 1
        for state in _bits(states):
            for mask, targets in self.moves[state]:
                work += len(blocks)
                refined: list[tuple[int, int]] = []
                for block, nxt in blocks:
                    inside = block & mask
                    if not inside:
                        refined.append((block, nxt))
                        continue
                    if block != inside:
                        refined.append((block & ~mask, nxt))
                    refined.append((inside, nxt | targets))
                blocks = refined
        merged: dict[int, int] = {}
        for block, nxt in blocks:
            merged[nxt] = merged.get(nxt, 0) | block
        return _readable_first(merged), work


def _readable_first(merged: dict[int, int]) -> Edges:
    """Edges from a {next set: bytes} map, those with letters or digits first, then printable
    ones: breadth-first search takes the first edge it meets, so witnesses come out readable."""
    return tuple(
        sorted(
            ((block, nxt) for nxt, block in merged.items()),
            key=lambda edge: (not edge[0] & _ALNUM, not edge[0] & _PRINTABLE),
        )
    )


class _Budget:
    """The work one check may still do; each unit is one small step (a byte-set intersection, a
    move examined, a product state kept), so time and memory stay bounded whatever the pattern."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left

    def spend(self, work: int) -> bool:
        """Take ``work`` units; False once the budget is exhausted."""
        self.left -= work
        return self.left >= 0


class _Determinized:
    """An automaton read deterministically, its sets of states' edges computed once per check."""

    __slots__ = ("_memo", "accept", "budget", "nfa", "start")

    def __init__(self, nfa: _Nfa, budget: _Budget) -> None:
        self.nfa = nfa
        self.budget = budget
        self.start = nfa.start
        self.accept = nfa.accept
        self._memo: dict[int, Edges] = {}

    def edges(self, states: int) -> Edges:
        found = self._memo.get(states)
        if found is None:
            found, work = self._compute(states)
            self._memo[states] = found
            self.budget.spend(work)
        return found

    def _compute(self, states: int) -> tuple[Edges, int]:
        return self.nfa.edges(states)


class _HexDeterminized(_Determinized):
    """A subject automaton fed a channel's ``$R.`` subject: each channel byte is two hex digits."""

    __slots__ = ()

    def __init__(self, nfa: _Nfa, budget: _Budget) -> None:
        super().__init__(nfa, budget)
        self.start = nfa.run(nfa.start, RESERVED_PREFIX)

    def _compute(self, states: int) -> tuple[Edges, int]:
        nfa = self.nfa
        after: dict[int, list[int]] = {}
        merged: dict[int, int] = {}
        for high, digit in enumerate(_HEX_DIGITS):
            middle = nfa.step(states, digit)
            ends = after.get(middle)
            if ends is None:
                ends = after[middle] = [nfa.step(middle, low) for low in _HEX_DIGITS]
            for low, nxt in enumerate(ends):
                merged[nxt] = merged.get(nxt, 0) | 1 << (high << 4 | low)
        steps = len(_HEX_DIGITS) * (1 + len(after))
        return _readable_first(merged), steps * (states.bit_count() + 1)


def _glob_nfa(pattern: bytes) -> _Nfa:
    """The channels ``pattern`` matches, save that a pattern other than the empty one never matches
    the empty channel (that is left to the searches)."""
    nfa = _Nfa()
    tokens = positions(pattern)
    for _ in range(len(tokens) + 1):
        nfa.state()
    closure = [0] * (len(tokens) + 1)
    closure[-1] = 1 << len(tokens)
    for i in range(len(tokens) - 1, -1, -1):
        closure[i] = 1 << i | (closure[i + 1] if tokens[i] is None else 0)
    for i, token in enumerate(tokens):
        if token is None:
            nfa.moves[i].append((_ALL, closure[i]))
        elif token:
            nfa.moves[i].append((sum(1 << b for b in token), closure[i + 1]))
    nfa.start = closure[0]
    nfa.accept = 1 << len(tokens)
    return nfa


def _subjects_nfa(patterns: Iterable[str]) -> _Nfa:
    """The literal subjects matched by any of these subject patterns."""
    nfa = _Nfa()
    start = nfa.state()
    nfa.start = 1 << start
    for pattern in patterns:
        current = start
        for i, token in enumerate(tokenize(pattern)):
            if i:
                after_dot = nfa.state()
                nfa.moves[current].append((_DOT, 1 << after_dot))
                current = after_dot
            if token in (PWC, FWC):
                inside = nfa.state()
                nfa.moves[current].append((_NOT_DOT, 1 << inside))
                nfa.moves[inside].append((_NOT_DOT, 1 << inside))
                if token == FWC:
                    next_token = nfa.state()
                    nfa.moves[inside].append((_DOT, 1 << next_token))
                    nfa.moves[next_token].append((_NOT_DOT, 1 << inside))
                current = inside
            else:
                for byte in token.encode():
                    following = nfa.state()
                    nfa.moves[current].append((1 << byte, 1 << following))
                    current = following
        nfa.accept |= 1 << current
    return nfa


def _everything() -> _Nfa:
    nfa = _Nfa()
    nfa.moves.append([(_ALL, 1)])
    nfa.start = nfa.accept = 1
    return nfa


# The valid literal subjects as a deterministic automaton, states (prefix, token, utf8):
# prefix 0/1/2 = read "", "$", "$R" so far (3: cannot be under "$R." any more); token "" = empty,
# "*" / ">" = exactly that so far, "x" = any other non-empty token; utf8 = (continuation bytes
# still due, the range allowed for the next one), so overlong forms, surrogates and code points
# past U+10FFFF fail as Python's strict decoder fails them.
_State = tuple[int, str, tuple[int, int, int] | None]
_WHITESPACE: Final = frozenset(b" \t\n\r\f")
_LEADS: Final = (
    (range(0xC2, 0xE0), (1, 0x80, 0xBF)),
    (range(0xE0, 0xE1), (2, 0xA0, 0xBF)),
    (range(0xE1, 0xED), (2, 0x80, 0xBF)),
    (range(0xED, 0xEE), (2, 0x80, 0x9F)),
    (range(0xEE, 0xF0), (2, 0x80, 0xBF)),
    (range(0xF0, 0xF1), (3, 0x90, 0xBF)),
    (range(0xF1, 0xF4), (3, 0x80, 0xBF)),
    (range(0xF4, 0xF5), (3, 0x80, 0x8F)),
)


def _valid_step(state: _State, byte: int) -> _State | None:
    prefix, token, utf8 = state
    if utf8 is not None:
        due, low, high = utf8
        if not low <= byte <= high:
            return None
        return (3, "x", (due - 1, 0x80, 0xBF) if due > 1 else None)
    if byte >= 0x80:
        for leads, expect in _LEADS:
            if byte in leads:
                return (3, "x", expect)
        return None
    if byte in _WHITESPACE:
        return None
    if byte == ord("."):
        if token != "x" or prefix == 2:
            return None
        return (3, "", None)
    char = chr(byte)
    token = char if token == "" and char in (PWC, FWC) else "x"
    if (prefix, char) == (0, "$"):
        return (1, token, None)
    if (prefix, char) == (1, "R"):
        return (2, token, None)
    return (3, token, None)


def _valid_subjects() -> _Nfa:
    nfa = _Nfa()
    start: _State = (0, "", None)
    index = {start: nfa.state()}
    todo = [start]
    while todo:
        state = todo.pop()
        targets: dict[int, int] = {}
        for byte in range(256):
            nxt = _valid_step(state, byte)
            if nxt is None:
                continue
            if nxt not in index:
                index[nxt] = nfa.state()
                todo.append(nxt)
            targets[index[nxt]] = targets.get(index[nxt], 0) | 1 << byte
        nfa.moves[index[state]] = [(mask, 1 << target) for target, mask in targets.items()]
        if state[1] == "x" and state[2] is None:
            nfa.accept |= 1 << index[state]
    nfa.start = 1 << index[start]
    return nfa


_VALID: Final = _valid_subjects()


def _representative(block: int) -> int:
    """The byte a witness shows for a set of equivalent bytes: readable when there is one."""
    for preferred in (block & _LOWER, block & _ALNUM, block & _PRINTABLE, block):
        if preferred:
            return (preferred & -preferred).bit_length() - 1
    raise ValueError("empty byte set")


_Product = tuple[int, ...]


def _find(
    parts: tuple[_Determinized, ...],
    pruned: tuple[bool, ...],
    refused: Callable[[_Product], bool],
    budget: _Budget,
) -> bytes | None:
    """A shortest channel whose product state is ``refused``, searched breadth first; None if there
    is none or the budget ran out. ``pruned`` marks the parts whose empty set ends a path."""
    start = tuple(part.start for part in parts)
    parents: dict[_Product, tuple[_Product, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        product = queue.popleft()
        blocks: list[tuple[int, _Product]] = [(_ALL, ())]
        work = 0
        for part, states, prune in zip(parts, product, pruned, strict=True):
            edges = part.edges(states)
            work += len(blocks) * len(edges)
            joined: list[tuple[int, _Product]] = []
            for block, partial in blocks:
                for mask, nxt in edges:
                    both = block & mask
                    if both and (nxt or not prune):
                        joined.append((both, (*partial, nxt)))
            blocks = joined
        if not budget.spend(work + len(blocks)):
            return None
        for block, following in blocks:
            if following in parents:
                continue
            parents[following] = (product, _representative(block))
            if refused(following):
                return _path(parents, following)
            queue.append(following)
    return None


def _path(parents: dict[_Product, tuple[_Product, int] | None], product: _Product) -> bytes:
    out = bytearray()
    step = parents[product]
    while step is not None:
        product, byte = step
        out.append(byte)
        step = parents[product]
    return bytes(out[::-1])


class ChannelRules:
    """One user's subscribe permissions, compiled to answer for Redis patterns.

    ``allow`` is None when everything not denied is allowed; both hold subject patterns that apply
    to plain subscriptions (entries naming a queue group are the caller's to leave out).
    """

    __slots__ = ("_allow", "_deny", "_unrestricted")

    def __init__(self, allow: Iterable[str] | None, deny: Iterable[str]) -> None:
        deny = tuple(deny)
        self._unrestricted = allow is None and not deny
        self._allow = _everything() if allow is None else _subjects_nfa(allow)
        self._deny = _subjects_nfa(deny)

    def check(self, pattern: bytes, *, max_work: int = MAX_WORK) -> Verdict:
        """Whether every channel ``pattern`` matches may be subscribed to; if not, which one may not."""
        if self._unrestricted or GlobPattern(pattern).matches_nothing:
            return Verdict(True)
        allow, deny = self._allow, self._deny
        if not pattern:  # the empty channel alone, on "$R.0"
            subject = RESERVED_PREFIX + b"0"
            denied = deny.run(deny.start, subject) & deny.accept
            allowed = allow.run(allow.start, subject) & allow.accept and not denied
            return Verdict(True) if allowed else Verdict(False, b"")
        budget = _Budget(max_work)
        glob = _Determinized(_glob_nfa(pattern), budget)
        valid = _Determinized(_VALID, budget)
        plain = (glob, valid, _Determinized(allow, budget), _Determinized(deny, budget))
        found = [_find(plain, (True, True, False, False), _refusal(plain, expect_valid=True), budget)]
        if budget.left >= 0:
            hexed = (glob, valid, _HexDeterminized(allow, budget), _HexDeterminized(deny, budget))
            found.append(
                _find(hexed, (True, False, False, False), _refusal(hexed, expect_valid=False), budget)
            )
        witnesses = [witness for witness in found if witness is not None]
        if witnesses:
            return Verdict(False, min(witnesses, key=len))
        return Verdict(budget.left >= 0)


def _refusal(parts: tuple[_Determinized, ...], *, expect_valid: bool) -> Callable[[_Product], bool]:
    """Whether a product state ends a channel the glob matches, on the branch being searched, whose
    subject is denied or not allowed."""
    glob, valid, allow, deny = (part.accept for part in parts)

    def refused(product: _Product) -> bool:
        g, v, a, d = product
        return bool(g & glob and bool(v & valid) == expect_valid and (d & deny or not a & allow))

    return refused
