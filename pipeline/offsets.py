"""Streaming read offsets, independent of Spark: per stream, the last ID read (or skipped) and how
many entries the stream had been given up to it (XINFO's ``entries-added`` counts them).

The count is what detects trimming: neither redis-server nor pubmesh moves ``max-deleted-entry-id``
when XTRIM or MAXLEN drops entries, and a first entry beyond the offset is normal (new entries), so
what tells a loss is a stream whose entries up to the offset are all gone while more entries are
gone than the stream ever held up to the offset.

A micro-batch covers, per stream, the IDs after its start offset up to and including its end offset.
IDs only grow (XADD refuses an ID at or below the stream's last generated one), so the entries of a
range already planned never change except by deletion: replanning a (start, end) pair after a restart
gives the same rows unless entries were trimmed in between, which is the data-loss case.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from pipeline.options import MAX_SEQ, OptionError, Position, StreamId
from pipeline.resp import ProtocolError, Reply, RespClient, ServerError
from pipeline.streams import Slice, check_stream, plan, read_pages

ZERO = StreamId(0, 0)
"""Before every entry: no stream holds 0-0."""


@attrs.frozen
class Mark:
    """Where a query is in one stream: after ``id``, which ``added`` entries were at or below."""

    id: StreamId
    added: int


Offsets = dict[str, Mark]
Json = dict[str, dict[str, str | int]]
"""An offset as Spark keeps it: ``{"orders": {"id": "1700000000000-3", "added": 42}}``."""


def to_json(offsets: Mapping[str, Mark]) -> Json:
    return {s: {"id": str(m.id), "added": m.added} for s, m in sorted(offsets.items())}


def from_json(offsets: Mapping[str, object], streams: Iterable[str]) -> Offsets:
    """An offset Spark hands back; a stream it does not name (one added to the ``stream`` option
    since the checkpoint was written) is read from its beginning."""
    out = {}
    for stream in streams:
        value = offsets.get(stream)
        if isinstance(value, dict):
            out[stream] = Mark(StreamId.parse(str(value["id"])), int(value["added"]))
        else:
            out[stream] = Mark(ZERO, 0)
    return out


def before(entry_id: StreamId) -> StreamId:
    ms, seq = entry_id.ms, entry_id.seq
    return StreamId(ms, seq - 1) if seq else StreamId(ms - 1, MAX_SEQ)


def after(entry_id: StreamId) -> StreamId:
    ms, seq = entry_id.ms, entry_id.seq
    return StreamId(ms, seq + 1) if seq < MAX_SEQ else StreamId(ms + 1, 0)


@attrs.frozen
class StreamInfo:
    """What XINFO STREAM says about where a stream's entries begin and end."""

    last_generated: StreamId
    first: StreamId | None
    """The first entry present; None when the stream is empty."""
    length: int
    added: int
    """Entries ever added (``entries-added``)."""

    @property
    def end(self) -> Mark:
        return Mark(self.last_generated, self.added)


def _id_of(reply: Reply) -> StreamId:
    if not isinstance(reply, bytes):
        raise ProtocolError(f"expected a stream ID, got {reply!r}")
    return StreamId.parse(reply.decode())


def stream_info(client: RespClient, stream: str) -> StreamInfo | None:
    """None when there is no such stream (any more)."""
    try:
        reply = client.call("XINFO", "STREAM", stream)
    except ServerError as error:
        if "no such key" in str(error):
            return None
        raise
    if not isinstance(reply, list):
        raise ProtocolError(f"XINFO STREAM replied {reply!r}")
    fields = {key: value for key, value in zip(reply[::2], reply[1::2], strict=True)}
    first = fields.get(b"first-entry")
    return StreamInfo(
        last_generated=_id_of(fields.get(b"last-generated-id")),
        first=_id_of(first[0]) if isinstance(first, list) and first else None,
        length=_int_of(fields.get(b"length")),
        added=_int_of(fields.get(b"entries-added")),
    )


def _int_of(reply: Reply) -> int:
    if not isinstance(reply, int):
        raise ProtocolError(f"expected an integer, got {reply!r}")
    return reply


def initial(client: RespClient, starting: Mapping[str, Position]) -> Offsets:
    """``earliest`` starts just before a stream's first entry (so entries trimmed before the query
    started are not a loss), ``latest`` after its last generated ID; every stream must exist."""
    out = {}
    for stream, position in starting.items():
        check_stream(client, stream)
        info = stream_info(client, stream)
        if info is None:
            raise OptionError("stream", f"no stream {stream!r} on the server")
        gone = info.added - info.length
        if isinstance(position, StreamId):
            below = sum(len(page) for page in read_pages(client, Slice(stream, ZERO, position), 1000))
            out[stream] = Mark(position, gone + below)
        elif position == "earliest" and info.first is not None:
            out[stream] = Mark(before(info.first), gone)
        else:
            out[stream] = info.end
    return out


def latest(client: RespClient, streams: Iterable[str]) -> Offsets:
    """Each stream's last generated ID (nothing for a stream that is gone)."""
    out = {}
    for stream in streams:
        info = stream_info(client, stream)
        out[stream] = info.end if info is not None else Mark(ZERO, 0)
    return out


def advance(
    client: RespClient, start: Offsets, ceiling: Offsets, budget: int | None, page: int
) -> Offsets:
    """The end offset of the next micro-batch: everything up to ``ceiling``, or at most ``budget``
    entries shared fairly between the streams that have entries to give (each round gives every
    such stream an equal share of what is left; a stream with less than its share drops out)."""
    ahead = [stream for stream in sorted(start) if ceiling[stream].id > start[stream].id]
    end = dict(start) | {stream: ceiling[stream] for stream in ahead}
    if budget is None:
        return end
    end, active, left = dict(start), ahead, budget
    while left and active:
        share = max(1, left // len(active))
        for stream in list(active):
            want = min(share, left)
            mark = end[stream]
            got, last = _skip(client, stream, mark.id, ceiling[stream].id, want, page)
            left -= got
            if got < want:
                active.remove(stream)
                end[stream] = ceiling[stream]
            elif last is not None:
                end[stream] = Mark(last, mark.added + got)
            if not left:
                break
    return end


def _skip(
    client: RespClient, stream: str, start: StreamId, ceiling: StreamId, count: int, page: int
) -> tuple[int, StreamId | None]:
    """How many of the next ``count`` entries after ``start`` exist (up to ``ceiling``), and the ID of
    the last of them; paged, so the driver never holds more than ``page`` entries."""
    got, last = 0, None
    part = Slice(stream, after(start), ceiling)
    for batch in read_pages(client, part, min(page, count), limit=count):
        got += len(batch)
        last = StreamId.parse(batch[-1][0].decode())
    return got, last


def losses(client: RespClient, start: Offsets) -> list[str]:
    """Why entries after ``start`` can no longer be read, per stream that lost some: every entry up to
    the offset is gone and so are more entries than the stream held up to it (trimmed by XTRIM,
    MAXLEN or MINID before the query read them; an XDEL of an unread entry counts too, once the
    entries before the offset are gone), or the stream was deleted and created anew below the
    offset. A stream that is gone altogether reads as empty."""
    found = []
    for stream, mark in sorted(start.items()):
        info = stream_info(client, stream)
        if info is None:
            continue
        if info.last_generated < mark.id:
            found.append(
                f"stream {stream!r} was created anew: its last ID {info.last_generated} is before "
                f"the offset {mark.id}"
            )
            continue
        lost = info.added - info.length - mark.added
        if (info.first is None or info.first > mark.id) and lost > 0:
            now = f"its first entry is now {info.first}" if info.first else "it is empty now"
            found.append(
                f"stream {stream!r} lost {lost} entries after the offset {mark.id} before they "
                f"were read (trimmed); {now}"
            )
    return found


def slices(client: RespClient, start: Offsets, end: Offsets, parts: int) -> list[Slice]:
    """The micro-batch (start, end] as ID-range slices, up to ``parts`` per stream."""
    out = []
    for stream in sorted(end):
        first, last = after(start[stream].id), end[stream].id
        if first <= last:
            out += plan(client, stream, first, last, parts)
    return out
