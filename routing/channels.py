"""Redis channels in the subject namespace: one name space for both protocols.

A channel that is a valid literal subject (and not in the reserved ``$R.`` space) is that subject,
so Redis and NATS clients meet on it. Any other channel (spaces, empty tokens, ``*`` or ``>`` as
literal names, bytes that are not UTF-8) becomes ``$R.`` followed by the channel's bytes in
lowercase hex: a valid literal subject that routes across the cluster like any other, and that NATS
clients cannot name (the NATS front door reserves ``$R.``).
"""

from __future__ import annotations

from typing import Final

from routing.subjects import is_valid_literal_subject

__all__ = ["RESERVED_PREFIX", "channel_subject", "subject_channel"]

RESERVED_PREFIX: Final = b"$R."


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
