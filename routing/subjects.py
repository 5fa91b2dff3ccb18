"""Subject syntax: what a subject is, and the plain rule for when a pattern matches it.

Subjects are ``.``-separated tokens compared byte for byte (so case matters). A token that is exactly
``*`` matches any one token; a token that is exactly ``>`` matches one or more trailing tokens and may
only stand last. Longer tokens that merely contain those characters (``*foo``, ``a>``) are literals.

A few subjects are reserved for the node's own use: ``REPLY_PREFIX`` marks reply subjects mapped
across gateways (``cluster.replies``), and clients may not publish to them; the Redis channels that
are not subjects live under ``routing.channels.RESERVED_PREFIX``.

``subject_matches`` is deliberately the slow, obvious definition: the tries in this package are tested
against it, so it must stay simple enough to be believed by reading it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "FWC",
    "PWC",
    "REPLY_PREFIX",
    "InvalidSubjectError",
    "is_valid_literal_subject",
    "is_valid_subject",
    "subject_is_literal",
    "subject_matches",
    "subjects_collide",
    "tokenize",
]

PWC = "*"
FWC = ">"
SEP = "."

REPLY_PREFIX: Final = b"_GR_."
"""Reply subjects that crossed a gateway: ``_GR_.<cluster hash>.<node hash>.<original reply>``."""

# nats-server rejects exactly these; other Unicode spaces are ordinary characters there too.
_WHITESPACE = re.compile(r"[ \t\n\r\f]")


class InvalidSubjectError(ValueError):
    """A subject or pattern that breaks the token rules (empty token, ``>`` not last, whitespace)."""


def tokenize(subject: str) -> list[str]:
    """Split a subject or pattern into tokens, raising ``InvalidSubjectError`` if it breaks a rule."""
    if not subject:
        raise InvalidSubjectError("empty subject")
    if _WHITESPACE.search(subject):
        raise InvalidSubjectError(f"whitespace in subject {subject!r}")
    tokens = subject.split(SEP)
    if "" in tokens:
        raise InvalidSubjectError(f"empty token in subject {subject!r}")
    if FWC in tokens and tokens.index(FWC) != len(tokens) - 1:
        raise InvalidSubjectError(f"'>' is not the last token of {subject!r}")
    return tokens


def is_valid_subject(subject: str) -> bool:
    """Whether ``subject`` may be subscribed to: non-empty tokens, ``>`` only last, no whitespace."""
    try:
        tokenize(subject)
    except InvalidSubjectError:
        return False
    return True


def subject_is_literal(subject: str) -> bool:
    """Whether no token is a wildcard. Validates nothing else (a fast pre-check, as in nats-server)."""
    tokens = subject.split(SEP)
    return PWC not in tokens and FWC not in tokens


def is_valid_literal_subject(subject: str) -> bool:
    """Whether ``subject`` may be published to: valid and free of wildcard tokens."""
    return is_valid_subject(subject) and subject_is_literal(subject)


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a subscription on ``pattern`` receives a message published on ``subject``.

    The subject's tokens are taken literally, even ``*`` or ``>`` (a non-pedantic client may publish
    them): a wildcard in the pattern matches them, a literal pattern token only matches itself. Any
    invalid pattern, and any subject with an empty token, matches nothing.
    """
    if not is_valid_subject(pattern) or not subject:
        return False
    ptoks = pattern.split(SEP)
    stoks = subject.split(SEP)
    if "" in stoks:
        return False
    for i, ptok in enumerate(ptoks):
        if ptok == FWC:
            return len(stoks) > i
        if i >= len(stoks):
            return False
        if ptok != PWC and ptok != stoks[i]:
            return False
    return len(ptoks) == len(stoks)


def subjects_collide(a: str, b: str) -> bool:
    """Whether some literal subject could match both patterns (e.g. ``foo.*`` and ``*.bar``).

    Used to decide whether a wildcard subscription can overlap a denied subject, in which case its
    deliveries must be filtered one by one.
    """
    if not is_valid_subject(a) or not is_valid_subject(b):
        return False
    ta, tb = a.split(SEP), b.split(SEP)
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == FWC or y == FWC:
            # The other pattern must still have a token here for `>` to cover it.
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != PWC and y != PWC and x != y:
            return False
    return True
