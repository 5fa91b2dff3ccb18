"""Stream reads and writes over RESP, independent of Spark: ID ranges split into slices, paged XRANGE
reads of one slice, and staged writes that reach the target stream only on commit.

The keys a write adds beside its target (staging streams, a query's commit marker) hash to the
target's slot (``beside``: Redis Cluster's hash tags), so that on pubmesh with replicated keys
they are held by the target's replica group and one transaction may span them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping

import attrs

from pipeline.options import MAX_SEQ, Endpoints, OptionError, StreamId
from pipeline.resp import ProtocolError, Reply, RespClient

Fields = list[tuple[bytes, bytes]]
LAST = StreamId(MAX_SEQ, MAX_SEQ)


@attrs.frozen
class Slice:
    """Entries of one stream with ``first <= ID <= last``: what one partition reads."""

    stream: str
    first: StreamId
    last: StreamId
    fence: StreamId | None = None
    """The last ID the stream had when the slice was planned (read from its leader, so every
    entry up to it is committed): a replica that has generated it holds the whole slice."""


def _bytes(reply: Reply) -> bytes:
    if not isinstance(reply, bytes):
        raise ProtocolError(f"expected a string, got {reply!r}")
    return reply


def _array(reply: Reply) -> list[Reply]:
    if not isinstance(reply, list):
        raise ProtocolError(f"expected an array, got {reply!r}")
    return reply


def _entries(reply: Reply) -> list[tuple[bytes, Fields]]:
    """XRANGE's reply: ``[[id, [field, value, ...]], ...]``."""
    out = []
    for entry in _array(reply):
        entry_id, flat = _array(entry)
        items = [_bytes(item) for item in _array(flat)]
        out.append((_bytes(entry_id), list(zip(items[::2], items[1::2], strict=True))))
    return out


def check_stream(client: RespClient, stream: str) -> None:
    kind = client.call("TYPE", stream)
    if kind == b"none":
        raise OptionError("stream", f"no stream {stream!r} on the server")
    if kind != b"stream":
        raise OptionError("stream", f"{stream!r} holds a {kind!r}, not a stream")


def plan(client: RespClient, stream: str, first: StreamId, last: StreamId, parts: int) -> list[Slice]:
    """Up to ``parts`` slices covering the entries of ``stream`` in ``[first, last]``, split by
    millisecond between the first and last entry actually present (so slices are not spent on the
    empty range before a stream's first entry)."""
    head = _entries(client.call("XRANGE", stream, str(first), str(last), "COUNT", 1))
    tail = _entries(client.call("XREVRANGE", stream, str(last), str(first), "COUNT", 1))
    if not head:
        return []
    lo, hi = StreamId.parse(head[0][0].decode()), StreamId.parse(tail[0][0].decode())
    span = hi.ms - lo.ms + 1
    cuts = sorted({lo.ms + span * i // parts for i in range(1, parts)} - {lo.ms})
    starts = [lo, *(StreamId(ms, 0) for ms in cuts)]
    ends = [*(StreamId(ms - 1, MAX_SEQ) for ms in cuts), hi]
    return [Slice(stream, a, b, hi) for a, b in zip(starts, ends, strict=True)]


def read_pages(
    client: RespClient, part: Slice, page: int, limit: int | None = None
) -> Iterator[list[tuple[bytes, Fields]]]:
    """The slice's entries in ID order (the first ``limit`` of them), ``page`` at a time (the next
    page starts after the last ID)."""
    start, left = str(part.first), limit
    while True:
        count = page if left is None else min(page, left)
        batch = _entries(client.call("XRANGE", part.stream, start, str(part.last), "COUNT", count))
        if batch:
            yield batch
        if left is not None:
            left -= len(batch)
        if len(batch) < count or left == 0:
            return
        start = "(" + batch[-1][0].decode()


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it is not the whole key: the text between its
    first ``{`` and the first ``}`` after it, if not empty."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else None


def beside(stream: str, suffix: str) -> str:
    """A key named after ``stream`` that hashes to its slot: ``stream:suffix`` when the name has a
    hash tag, ``{stream}:suffix`` when it can be one (no ``}`` in it); else ``stream:suffix``,
    which only a single node (or a cluster that does not keep transactions to a slot) takes."""
    if hash_tag(stream) is not None or "}" in stream:
        return f"{stream}:{suffix}"
    return f"{{{stream}}}:{suffix}"


STAGING = "pubmesh-write:{job}"
"""Suffix of the staging streams of one write job (``job`` is a fresh UUID), beside the target."""

BATCH = 500
"""XADDs sent per round trip."""


def _xadds(key: str, rows: Iterable[Fields]) -> Iterator[list[str | bytes]]:
    for fields in rows:
        if not fields:
            raise ValueError("a row whose columns are all null (or an empty fields map) has no fields")
        yield ["XADD", key, "*", *(item for pair in fields for item in pair)]


def _send(client: RespClient, commands: Iterable[list[str | bytes]]) -> int:
    sent, batch = 0, []
    for command in commands:
        batch.append(command)
        if len(batch) == BATCH:
            client.pipeline(batch)
            sent, batch = sent + len(batch), []
    if batch:
        client.pipeline(batch)
    return sent + len(batch)


@attrs.frozen
class StagedWrite:
    """One write job: tasks append to staging streams of their own; the driver's commit appends each
    partition's staging stream to the target, in partition order, and drops all staging streams.

    A task attempt stages under its own key (partition and attempt number), so a retried or
    speculative attempt never mixes with an earlier one; the driver commits only the attempts Spark
    reports as successful, and drops the rest.
    """

    nodes: Endpoints
    stream: str
    job: str

    @property
    def prefix(self) -> str:
        return beside(self.stream, STAGING.format(job=self.job))

    def stage(self, partition: int, attempt: int, rows: Iterable[Fields]) -> tuple[str, int]:
        key = f"{self.prefix}:{partition}:{attempt}"
        with self.nodes.connect(first=partition) as client:
            client.call("DEL", key)
            return key, _send(client, _xadds(key, rows))

    def commit(self, staged: Iterable[str]) -> None:
        with self.nodes.connect() as client:
            for key in staged:
                pages = read_pages(client, Slice(key, StreamId(0, 0), LAST), BATCH)
                _send(client, _xadds(self.stream, (fields for page in pages for _, fields in page)))
                client.call("DEL", key)
            self._drop(client)

    def abort(self) -> None:
        with self.nodes.connect() as client:
            self._drop(client)

    def _drop(self, client: RespClient) -> None:
        """Delete every staging stream of this job, including those of failed attempts."""
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in self.prefix) + ":*"
        cursor = b"0"
        while True:
            next_cursor, found = _array(client.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000))
            cursor, keys = _bytes(next_cursor), [_bytes(key) for key in _array(found)]
            if keys:
                client.call("DEL", *keys)
            if cursor == b"0":
                return


COMMITS = "pubmesh-commits:{query}"
"""Suffix of the commit marker of one query writing into a stream, beside it: a stream whose last
entry names the last micro-batch committed (``query`` is a digest of the query's commit key)."""

KEPT_COMMITS = 16
"""Marker entries kept (MAXLEN): only the last one counts; the others help whoever inspects it."""


@attrs.frozen
class BatchCommits:
    """Exactly-once micro-batches of one streaming query into one stream.

    Tasks stage rows as a ``StagedWrite`` named after the query and the batch. The driver's commit
    appends the staged entries to the target and adds the batch's marker entry in one MULTI/EXEC,
    under WATCH of the marker: the entries and the marker land together or not at all, and a batch
    Spark runs again after a failure finds itself in the marker and adds nothing. The transaction
    holds a whole micro-batch on the server until EXEC (the client sends it in pipelined chunks
    while reading the staging streams page by page on a second connection).
    """

    nodes: Endpoints
    stream: str
    key: str
    """The query's commit key: the same across restarts from one checkpoint."""

    @property
    def query(self) -> str:
        return hashlib.sha256(self.key.encode()).hexdigest()[:16]

    @property
    def marker(self) -> str:
        return beside(self.stream, COMMITS.format(query=self.query))

    @property
    def earlier_marker(self) -> str:
        """Where releases before hash tags kept the marker (read, never written)."""
        return f"{self.stream}:{COMMITS.format(query=self.query)}"

    def staged(self, batch: int) -> StagedWrite:
        return StagedWrite(self.nodes, self.stream, f"{self.query}-{batch}")

    def last(self, client: RespClient) -> int | None:
        """The last micro-batch committed, if any (in the marker, or else where an earlier release
        kept it: a query restarted across an upgrade still finds what it committed)."""
        for marker in dict.fromkeys((self.marker, self.earlier_marker)):
            tail = _entries(client.call("XREVRANGE", marker, "+", "-", "COUNT", 1))
            if tail:
                return int(dict(tail[0][1])[b"batch"])
        return None

    def commit(self, batch: int, staged: Iterable[str]) -> bool:
        """Appends the staged streams (in the order given) unless ``batch`` was committed already;
        either way drops the batch's staging streams. True when this call committed it."""
        with self.nodes.connect() as client, self.nodes.connect() as reader:
            client.call("WATCH", self.marker)
            done = self.last(client)
            if done is None or batch > done:
                client.call("MULTI")
                for key in staged:
                    pages = read_pages(reader, Slice(key, StreamId(0, 0), LAST), BATCH)
                    rows = (fields for page in pages for _, fields in page)
                    _send(client, _xadds(self.stream, rows))
                mark = ["batch", str(batch), "key", self.key]
                client.call("XADD", self.marker, "MAXLEN", KEPT_COMMITS, "*", *mark)
                if client.call("EXEC") is None:
                    raise ConcurrentCommitError(
                        f"{self.marker} changed during the commit of batch {batch}: another query "
                        "writes with the same commit key"
                    )
            else:
                client.call("UNWATCH")
            self.staged(batch)._drop(client)
        return done is None or batch > done


class ConcurrentCommitError(RuntimeError):
    """Two writers committed under one commit key at once."""


def field_pairs(row: Mapping[str, object]) -> Fields:
    """A row as entry fields: a ``fields`` map is spread out, other columns become fields; values are
    strings (bytes kept as they are), nulls are left out."""
    pairs: Fields = []
    for name, value in row.items():
        if name == "fields" and isinstance(value, Mapping):
            pairs.extend((_text(k), _text(v)) for k, v in value.items() if v is not None)
        elif value is not None:
            pairs.append((name.encode(), _text(value)))
    return pairs


def _text(value: object) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    return str(value).encode()
