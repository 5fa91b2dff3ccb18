"""The data source's options, checked on the driver before any task runs: every mistake is an
``OptionError`` that names the option, so a job fails at planning time with nothing written."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal
from urllib.parse import unquote, urlsplit

import attrs

from pipeline.resp import RespClient, ServerError

MAX_SEQ = (1 << 64) - 1
CONNECT_TIMEOUT = 10.0


class OptionError(ValueError):
    """A bad option value, or a server that refuses what an option asked for."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"pubmesh option '{option}': {problem}")
        self.option = option


@attrs.frozen(order=True)
class StreamId:
    """A stream entry ID, ``ms-seq``; ordered as the server orders entries."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> StreamId:
        ms, _, seq = text.partition("-")
        return cls(int(ms), int(seq or 0))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?")


def parse_bound(option: str, text: str, *, upper: bool) -> StreamId:
    """``start``/``end``: ``-``, ``+``, ``ms`` (a whole millisecond) or ``ms-seq``."""
    if text == ("+" if upper else "-"):
        return StreamId(MAX_SEQ, MAX_SEQ) if upper else StreamId(0, 0)
    match = _ID.fullmatch(text.strip())
    if match is None or int(match[1]) > MAX_SEQ or int(match[2] or 0) > MAX_SEQ:
        raise OptionError(option, f"malformed stream ID {text!r} (expected ms or ms-seq)")
    seq = match[2]
    return StreamId(int(match[1]), int(seq) if seq is not None else (MAX_SEQ if upper else 0))


class Unreachable(OptionError):
    """A node in ``url`` does not answer."""


@attrs.frozen
class Endpoint:
    """One node of ``url``: ``redis://[user:pass@]host:port[/db]``."""

    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise OptionError("url", f"{url!r} is not a redis:// URL ({error})") from None
        if parts.scheme != "redis" or not parts.hostname:
            raise OptionError("url", f"{url!r} is not redis://[user:pass@]host:port[/db]")
        path = parts.path.strip("/")
        if path and not path.isdigit():
            raise OptionError("url", f"database {path!r} is not a number")
        return cls(
            host=parts.hostname,
            port=port or 6379,
            db=int(path or 0),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
        )

    def connect(self) -> RespClient:
        """A connection, authenticated and on the right database; failures name ``url``."""
        try:
            client = RespClient.connect(self.host, self.port, CONNECT_TIMEOUT)
        except OSError as error:
            raise Unreachable("url", f"cannot connect to {self.host}:{self.port}: {error}") from None
        try:
            if self.password is not None:
                auth = [self.username, self.password] if self.username else [self.password]
                client.call("AUTH", *auth)
            if self.db:
                client.call("SELECT", self.db)
        except (ServerError, OSError) as error:
            client.close()
            raise OptionError("url", f"{self.host}:{self.port} refused the login: {error}") from None
        return client


@attrs.frozen
class Endpoints:
    """Where the streams are, from ``url``: one ``redis://`` URL, or several, comma-separated, of
    nodes of one cluster (any of which serves every key: pubmesh with replicated keys)."""

    nodes: tuple[Endpoint, ...]

    @classmethod
    def parse(cls, url: str) -> Endpoints:
        urls = [part.strip() for part in url.split(",")]
        if not all(urls):
            raise OptionError("url", "an empty URL in the comma-separated list")
        return cls(tuple(Endpoint.parse(part) for part in urls))

    def connect(self, first: int = 0) -> RespClient:
        """A connection to the first node that answers, trying them in turn from node number
        ``first`` on (modulo their number: partitions spread this way); a node that is down is
        passed over, one that refuses the login is not."""
        count, failures = len(self.nodes), []
        for turn in range(count):
            try:
                return self.nodes[(first + turn) % count].connect()
            except Unreachable as error:
                failures.append(str(error).removeprefix("pubmesh option 'url': "))
        raise Unreachable("url", "; ".join(failures))


def _flag(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = options.get(name.lower(), str(default)).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(name, f"expected true or false, not {value!r}")
    return value == "true"


def _positive(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name.lower(), str(default)).strip()
    if not text.isdigit() or int(text) < 1:
        raise OptionError(name, f"expected a positive integer, not {text!r}")
    return int(text)


@attrs.frozen
class ReadOptions:
    nodes: Endpoints
    streams: tuple[str, ...]
    start: StreamId
    end: StreamId
    partitions: int
    binary: bool
    page: int
    """Entries per XRANGE call: a partition holds at most one page in memory."""


@attrs.frozen
class WriteOptions:
    nodes: Endpoints
    stream: str


MODES: dict[str, tuple[str, ...]] = {
    "batch read": ("url", "stream", "start", "end", "partitions", "binary", "pageSize"),
    "streaming read": (
        "url",
        "stream",
        "partitions",
        "binary",
        "pageSize",
        "startingOffsets",
        "maxRecordsPerTrigger",
        "failOnDataLoss",
    ),
    "batch write": ("url", "stream"),
    # Spark adds the query's checkpointLocation and queryName to a streaming write's options.
    "streaming write": ("url", "stream", "commitKey", "checkpointLocation", "queryName"),
}
"""The options each mode takes (``path`` is ``stream``'s alias); Spark hands them over lowercase."""


def _common(options: Mapping[str, str], mode: str) -> tuple[Endpoints, tuple[str, ...]]:
    allowed = {name.lower() for name in MODES[mode]} | {"path"}
    for given in sorted(set(options) - allowed):
        owners = [other for other, names in MODES.items() if given in {n.lower() for n in names}]
        name = next((n for names in MODES.values() for n in names if n.lower() == given), given)
        if not owners:
            known = sorted({n for names in MODES.values() for n in names}, key=str.lower)
            raise OptionError(name, f"unknown option (known: {', '.join(known)})")
        takes = ", ".join(sorted(MODES[mode], key=str.lower))
        raise OptionError(name, f"is a {' and '.join(owners)} option; a {mode} takes {takes}")
    if "url" not in options:
        raise OptionError("url", "missing (redis://[user:pass@]host:port[/db], comma-separated)")
    streams = tuple(s.strip() for s in options.get("stream", options.get("path", "")).split(","))
    if not all(streams):
        raise OptionError("stream", "missing, or an empty name in the comma-separated list")
    return Endpoints.parse(options["url"]), streams


def binary(options: Mapping[str, str]) -> bool:
    """The one option the schema depends on."""
    return _flag(options, "binary")


def read_options(options: Mapping[str, str], mode: str = "batch read") -> ReadOptions:
    nodes, streams = _common(options, mode)
    start = parse_bound("start", options.get("start", "-"), upper=False)
    end = parse_bound("end", options.get("end", "+"), upper=True)
    if start > end:
        raise OptionError("start", f"{options.get('start')!r} is after end {options.get('end')!r}")
    return ReadOptions(
        nodes=nodes,
        streams=streams,
        start=start,
        end=end,
        partitions=_positive(options, "partitions", 1),
        binary=binary(options),
        page=_positive(options, "pageSize", 1000),
    )


def write_options(options: Mapping[str, str], mode: str = "batch write") -> WriteOptions:
    nodes, streams = _common(options, mode)
    if len(streams) != 1:
        raise OptionError("stream", f"a write goes to one stream, not {len(streams)}")
    return WriteOptions(nodes=nodes, stream=streams[0])


Position = StreamId | Literal["earliest", "latest"]
"""Where a streaming read starts in one stream: after this ID, before the first entry, or after the
last one."""


@attrs.frozen
class StreamReadOptions:
    read: ReadOptions
    starting: Mapping[str, Position]
    max_records: int | None
    """Entries per micro-batch, across all streams (``maxRecordsPerTrigger``); None: all there are."""
    fail_on_data_loss: bool


def _starting(text: str, streams: tuple[str, ...]) -> dict[str, Position]:
    """``startingOffsets``: ``earliest``, ``latest``, or a JSON object naming every stream, each
    with ``earliest``, ``latest`` or the ID after which to start (the form of the query's offsets)."""
    name = "startingOffsets"
    if text.strip() in ("earliest", "latest"):
        keyword: Position = "earliest" if text.strip() == "earliest" else "latest"
        return dict.fromkeys(streams, keyword)
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        expected = 'earliest, latest or {"stream": "ms-seq", ...}'
        raise OptionError(name, f"expected {expected}, not {text!r}")
    if set(given) != set(streams):
        odd = sorted(set(given) ^ set(streams))
        raise OptionError(name, f"names other streams than the stream option: {', '.join(odd)}")
    out: dict[str, Position] = {}
    for stream, value in given.items():
        if value in ("earliest", "latest"):
            out[stream] = value
        elif isinstance(value, str):
            out[stream] = parse_bound(name, value, upper=True)
        else:
            raise OptionError(name, f"the position of {stream!r} is not a string: {value!r}")
    return out


def stream_read_options(options: Mapping[str, str]) -> StreamReadOptions:
    read = read_options(options, "streaming read")
    limit = "maxRecordsPerTrigger"
    return StreamReadOptions(
        read=read,
        starting=_starting(options.get("startingoffsets", "earliest"), read.streams),
        max_records=_positive(options, limit, 1) if limit.lower() in options else None,
        fail_on_data_loss=_flag(options, "failOnDataLoss", default=True),
    )


@attrs.frozen
class StreamWriteOptions:
    nodes: Endpoints
    stream: str
    commit_key: str
    """Names the query in the target's commit marker: stable across restarts of one checkpoint."""


def stream_write_options(options: Mapping[str, str]) -> StreamWriteOptions:
    """The commit key is ``commitKey`` if given, else the query's ``checkpointLocation``, else its
    ``queryName`` (when checkpoints go under ``spark.sql.streaming.checkpointLocation``)."""
    write = write_options(options, "streaming write")
    if "commitkey" in options and not options["commitkey"].strip():
        raise OptionError("commitKey", "is empty")
    for name in ("commitkey", "checkpointlocation", "queryname"):
        key = options.get(name, "").strip()
        if key:
            return StreamWriteOptions(write.nodes, write.stream, key)
    raise OptionError(
        "checkpointLocation",
        "a streaming write needs a key that survives restarts: give the query a checkpointLocation "
        "(or a queryName, or the commitKey option)",
    )
