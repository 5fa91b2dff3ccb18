"""Subjects seen from two accounts: an import names a subject in the exporting account and where it
appears in the importing one (``prefix`` or ``to``), and subscriptions and messages are translated
between the two.

A map pairs two patterns with the same wildcards in the same order (``a.*.>`` and ``x.y.*.>``):
the tokens a subject has in the wildcard positions of one are put in those of the other. Literal
tokens may differ freely, which covers prefixes and renames alike.
"""

from __future__ import annotations

from routing.subjects import subject_matches

__all__ = ["SubjectMap", "is_subset"]


def is_subset(pattern: str, of: str) -> bool:
    """Whether every subject ``pattern`` matches is matched by ``of`` as well."""
    mine, theirs = pattern.split("."), of.split(".")
    for i, token in enumerate(mine):
        if i >= len(theirs):
            return False
        other = theirs[i]
        if other == ">":
            return True
        if token == ">" or (other != "*" and token != other):
            return False
    return len(mine) == len(theirs)


def _wildcards(tokens: list[str]) -> list[int]:
    return [i for i, token in enumerate(tokens) if token in ("*", ">")]


class SubjectMap:
    """Translates between a subject pattern in one account (``source``) and in another (``target``).

    Raises:
        ValueError: the two patterns' wildcards differ.
    """

    __slots__ = ("_source", "_source_wild", "_target", "_target_wild", "source", "target")

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target
        self._source, self._target = source.split("."), target.split(".")
        self._source_wild, self._target_wild = _wildcards(self._source), _wildcards(self._target)
        kinds = [self._source[i] for i in self._source_wild]
        if kinds != [self._target[i] for i in self._target_wild]:
            raise ValueError(f"{target!r} must have the wildcards of {source!r}, in the same order")

    def forward(self, subject: bytes) -> bytes:
        """A message's subject (matching ``source``) as the other account sees it."""
        if not self._source_wild:
            return self.target.encode()
        text = subject.decode("utf-8", "surrogateescape")
        return _rewrite(text.split("."), self._source_wild, self._target, self._target_wild).encode(
            "utf-8", "surrogateescape"
        )

    def backward(self, pattern: str) -> str:
        """A subscription's pattern in the other account (a subset of ``target``) as ``source``'s
        account must subscribe to it."""
        return _rewrite(pattern.split("."), self._target_wild, self._source, self._source_wild)

    def covers(self, pattern: str) -> bool:
        """Whether all a subscription on ``pattern`` wants is inside ``target``."""
        return is_subset(pattern, self.target)

    def wants(self, pattern: str, subject: bytes) -> bool:
        """Whether a subscription on ``pattern`` takes a message translated to ``subject``."""
        return subject_matches(pattern, subject.decode("utf-8", "surrogateescape"))


def _rewrite(tokens: list[str], taken: list[int], template: list[str], holes: list[int]) -> str:
    """``template`` with its wildcard ``holes`` filled, in order, from ``tokens`` at ``taken`` (the
    last of which, a ``>``, takes all the rest)."""
    out = list(template)
    for n, (at, hole) in enumerate(zip(taken, holes, strict=True)):
        last = n == len(taken) - 1 and template[hole] == ">"
        out[hole] = ".".join(tokens[at:]) if last else tokens[at]
    return ".".join(out)
