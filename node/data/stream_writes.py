"""Adding an entry to a stored stream: the one write that XADD and stream capture share.

Whoever adds, the same things must follow: a new stream is stored (an existing one touched, which
spoils WATCHes and wakes blocked readers), the change is journaled as the XADD that repeats it with
the ID it got, and a trim as the exact length it left (which replays the same whatever the trim was:
any trim removes the oldest live entries); the keyspace notifications ``xadd`` and ``xtrim`` (and
``new`` for a new stream) are announced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from node.config.keyspace_events import STREAM
from node.data.keyspace import Database
from node.data.streams import IdParts, Stream, Trim, format_parts

__all__ = ["Log", "add_entry", "trim_record"]

Log = Callable[[list[bytes]], None]
"""Records one change as the command that repeats it (the journal of the key's account and db)."""


def trim_record(key: bytes, stream: Stream) -> list[bytes]:
    """The command that repeats a trim of ``stream``, whatever the trim was."""
    return [b"XTRIM", key, b"MAXLEN", b"=", b"%d" % stream.length]


def add_entry(
    db: Database,
    key: bytes,
    stream: Stream,
    new: IdParts,
    fields: list[bytes],
    *,
    created: bool,
    trims: Sequence[Trim],
    log: Log,
) -> None:
    """Append ``fields`` as the ID ``new`` (checked by ``parse_add_id``) to ``stream``, stored at
    ``key`` unless ``created`` (then it is stored now), and apply ``trims`` in order."""
    stream.add(new, fields)
    if created:
        db.put(key, stream)
    journaled = db.keyspaces.journal is not None  # (else the records are not even made)
    if journaled:
        log([b"XADD", key, format_parts(new), *fields])
    db.notify(STREAM, b"xadd", key)
    trimmed = 0
    for trim in trims:
        trimmed += stream.trim(trim)
    if trimmed:
        if journaled:
            log(trim_record(key, stream))
        db.notify(STREAM, b"xtrim", key)
    if not created:
        db.touch(key)
