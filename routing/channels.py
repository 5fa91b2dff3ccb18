"""Redis channels in the subject namespace: one name space for both protocols.

A channel that is a valid literal subject (and not in the reserved ``$R.`` space) is that subject,
so Redis and NATS clients meet on it. Any other channel (spaces, empty tokens, ``*`` or ``>`` as
literal names, bytes that are not UTF-8) becomes ``$R.`` followed by the channel's bytes in
lowercase hex: a valid literal subject that routes across the cluster like any other, and that NATS
clients cannot name (the NATS front door reserves ``$R.``).

A pattern subscription (PSUBSCRIBE) is announced to other nodes as interest in ``$R.P.`` followed by
the pattern's bytes in hex: an ordinary RS+/RS- that snapshots, resyncs and gateway announcements
carry like any other, and that no publish can ever match (a channel's subject has two tokens; this
one has three). The far side files it in a pattern index, not in its subject trie, and sends a
message across only when its channel matches the pattern exactly.
"""

from __future__ import annotations

from typing import Final

from routing.subjects import is_valid_literal_subject

__all__ = [
    "PATTERN_PREFIX",
    "RESERVED_PREFIX",
    "channel_subject",
    "pattern_subject",
    "subject_channel",
    "subject_pattern",
]

RESERVED_PREFIX: Final = b"$R."
PATTERN_PREFIX: Final = "$R.P."
"""Where pattern interest lives in the subject namespace (``str``: interest is announced as text)."""


def channel_subject(channel: bytes) -> bytes:
    """The subject a channel is published and subscribed on."""
    if not channel.startswith(RESERVED_PREFIX):
        try:
            text = channel.decode()
        except UnicodeDecodeError:
            text = ""
        if text and is_valid_literal_subject(text):
            return channel
    return RESERVED_PREFIX + (channel.hex().encode() or b"0")


def subject_channel(subject: bytes) -> bytes:
    """The channel a subject stands for (the inverse of ``channel_subject``)."""
    if subject.startswith(RESERVED_PREFIX):
        code = subject[len(RESERVED_PREFIX) :]
        if code == b"0":
            return b""
        try:
            return bytes.fromhex(code.decode("ascii"))
        except ValueError:
            return subject
    return subject


def pattern_subject(pattern: bytes) -> str:
    """The interest subject a pattern subscription is announced as."""
    return PATTERN_PREFIX + (pattern.hex() or "0")


def subject_pattern(subject: str) -> bytes | None:
    """The pattern an interest subject announces, or None if it is not pattern interest.

    Raises:
        ValueError: it claims to be pattern interest but is not spelled as ``pattern_subject`` spells
            it (a hostile or broken peer).
    """
    if not subject.startswith(PATTERN_PREFIX):
        return None
    pattern = bytes.fromhex(subject[len(PATTERN_PREFIX) :]) if subject != PATTERN_PREFIX + "0" else b""
    if pattern_subject(pattern) != subject:  # one spelling per pattern: no spaces, no capitals
        raise ValueError(f"pattern interest {subject!r} is not in canonical hex")
    return pattern
