"""The data source's options, checked on the driver before any task runs: every mistake is an
``OptionError`` that names the option, so a job fails at planning time with nothing written."""

from __future__ import annotations

import re
from collections.abc import Mapping
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


@attrs.frozen
class Endpoint:
    """Where the streams are, from ``url``: ``redis://[user:pass@]host:port[/db]``."""

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
            raise OptionError("url", f"cannot connect to {self.host}:{self.port}: {error}") from None
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


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise OptionError(name, f"expected true or false, not {value!r}")
    return value == "true"


def _positive(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default)).strip()
    if not text.isdigit() or int(text) < 1:
        raise OptionError(name, f"expected a positive integer, not {text!r}")
    return int(text)


@attrs.frozen
class ReadOptions:
    endpoint: Endpoint
    streams: tuple[str, ...]
    start: StreamId
    end: StreamId
    partitions: int
    binary: bool
    page: int
    """Entries per XRANGE call: a partition holds at most one page in memory."""


@attrs.frozen
class WriteOptions:
    endpoint: Endpoint
    stream: str


KNOWN = {"url", "stream", "start", "end", "partitions", "binary", "pagesize", "path"}


def _common(options: Mapping[str, str]) -> tuple[Endpoint, tuple[str, ...]]:
    unknown = sorted(set(options) - KNOWN)
    if unknown:
        raise OptionError(unknown[0], f"unknown option (known: {', '.join(sorted(KNOWN - {'path'}))})")
    if "url" not in options:
        raise OptionError("url", "missing (redis://[user:pass@]host:port[/db])")
    streams = tuple(s.strip() for s in options.get("stream", options.get("path", "")).split(","))
    if not all(streams):
        raise OptionError("stream", "missing, or an empty name in the comma-separated list")
    return Endpoint.parse(options["url"]), streams


def read_options(options: Mapping[str, str]) -> ReadOptions:
    endpoint, streams = _common(options)
    start = parse_bound("start", options.get("start", "-"), upper=False)
    end = parse_bound("end", options.get("end", "+"), upper=True)
    if start > end:
        raise OptionError("start", f"{options.get('start')!r} is after end {options.get('end')!r}")
    return ReadOptions(
        endpoint=endpoint,
        streams=streams,
        start=start,
        end=end,
        partitions=_positive(options, "partitions", 1),
        binary=_flag(options, "binary"),
        page=_positive(options, "pagesize", 1000),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    endpoint, streams = _common(options)
    extra = sorted(set(options) & {"start", "end", "partitions", "binary"})
    if extra:
        raise OptionError(extra[0], "is a read option; writes take url and stream")
    if len(streams) != 1:
        raise OptionError("stream", f"a write goes to one stream, not {len(streams)}")
    return WriteOptions(endpoint=endpoint, stream=streams[0])
