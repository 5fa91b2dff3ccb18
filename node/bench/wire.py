"""The load generator's side of the wire: blocking sockets and raw bytes, no parser in the hot loops.

A benchmark client that parses every delivery would measure itself. Everything the load generator
sends is generated here, so it knows exactly what the server will send back: deliveries are counted
by scanning received chunks for tokens (``Tally``), which is a few C-speed passes per chunk instead
of Python work per message. The same reading serves both protocols the load generator speaks: a
``Dialect`` says how a server's keepalives and errors look (NATS here, RESP in ``node.bench.resp``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs

from node.nats.protocol import writer as w

__all__ = [
    "ERR",
    "NATS",
    "PING",
    "PONG",
    "READ_SIZE",
    "BenchError",
    "Dialect",
    "Endpoint",
    "Reader",
    "Tally",
    "connect",
    "flush",
    "parse_url",
    "pub_lines",
    "server_error",
]

PING = w.PING
PONG = w.PONG
ERR = b"-ERR"
READ_SIZE = 1 << 20
"""Large reads: at millions of deliveries a second, the number of ``recv`` calls is what costs. They
go into one buffer allocated up front: ``recv`` of a fresh megabyte costs more than the read itself."""
QUIET_READ_SIZE = 4096
"""For handshakes and flushes, where a few lines are all there is."""
CONNECT_TIMEOUT = 10.0
DEFAULT_PORTS = {"nats": 4222, "tcp": 4222, "redis": 6379}


class BenchError(Exception):
    """A failure reported as one line (server unreachable, refused, disconnected), not a traceback."""


@attrs.frozen
class Endpoint:
    """Where the server under test listens, the protocol it speaks there (``scheme``: ``nats`` or
    ``redis``), and the credentials its URL may carry."""

    host: str
    port: int
    user: str | None = None
    password: str | None = None
    token: str | None = None
    scheme: str = "nats"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "verbose": False,
            "pedantic": False,
            "headers": True,
            "no_responders": True,
            "protocol": 1,
            "name": "pubmesh-bench",
        }
        if self.token is not None:
            options["auth_token"] = self.token
        elif self.user is not None:
            options["user"] = self.user
            options["pass"] = self.password or ""
        return options


def parse_url(url: str, default_scheme: str = "nats") -> Endpoint:
    """``nats://[user:pass@|token@]host[:port]`` or ``redis://[[user]:pass@]host[:port]``; the
    scheme may be left out (``default_scheme`` is assumed), as nats and redis tools allow."""
    parts = urlsplit(url if "://" in url else f"{default_scheme}://{url}")
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise BenchError(f"not a nats:// or redis:// server URL: {url!r}")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError as exc:
        raise BenchError(f"bad port in {url!r}") from exc
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if parts.scheme == "redis":
        return Endpoint(parts.hostname, port, user=user, password=password, scheme="redis")
    if user is not None and password is None:
        return Endpoint(parts.hostname, port, token=user)
    return Endpoint(parts.hostname, port, user=user, password=password)


def dial(endpoint: Endpoint, handshake: Callable[[socket.socket], None]) -> socket.socket:
    """A blocking socket to ``endpoint`` past its protocol's ``handshake``, ready for load."""
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        raise BenchError(f"cannot connect to {endpoint.url}: {exc.strerror or exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handshake(sock)
    except BaseException:
        sock.close()
        raise
    sock.settimeout(None)
    return sock


def connect(endpoint: Endpoint) -> socket.socket:
    """A NATS connection past the handshake (INFO, CONNECT, and a PING answered)."""

    def handshake(sock: socket.socket) -> None:
        _read_until(sock, b"\r\n")  # INFO
        sock.sendall(w.connect(endpoint.connect_options()))
        flush(sock)

    return dial(endpoint, handshake)


def flush(sock: socket.socket, timeout: float | None = None) -> None:
    """Wait until the server has processed everything sent so far (its PONG answers our PING).

    A publisher must do this before closing: the kernel resets a connection closed with unread data
    in its receive queue, and the server would lose whatever it had not read yet. With a ``timeout``
    (seconds), a server that does not answer in time is an error rather than a hang.
    """
    previous = sock.gettimeout()
    if timeout is not None:
        sock.settimeout(timeout)
    try:
        sock.sendall(PING)
        _read_until(sock, PONG)
    except TimeoutError as exc:
        raise BenchError(f"no answer to PING within {sock.gettimeout():g} s") from exc
    finally:
        sock.settimeout(previous)


def _read_until(sock: socket.socket, token: bytes) -> None:
    """Read until ``token`` arrives, answering the server's PINGs; for quiet moments only (the bytes
    are kept until then)."""
    buf = b""
    while token not in buf:
        data = sock.recv(QUIET_READ_SIZE)
        if not data:
            raise BenchError(_closed_text(buf))
        buf += data
        error = server_error(buf)
        if error is not None:
            raise BenchError(error)
    pings = buf.count(PING)
    if pings:
        sock.sendall(PONG * pings)


def server_error(data: bytes | bytearray) -> str | None:
    """The first complete ``-ERR`` line in ``data``, as text."""
    start = data.find(ERR)
    if start < 0:
        return None
    end = data.find(b"\r\n", start)
    if end < 0:
        return None
    return "server error: " + data[start + 5 : end].decode(errors="replace").strip().strip("'")


def _closed_text(buf: bytes) -> str:
    start = buf.find(ERR)
    if start >= 0:
        return "server closed the connection: " + buf[start:].decode(errors="replace").strip()
    return "server closed the connection"


def pub_lines(subject: bytes, payload: bytes, count: int, reply: bytes | None = None) -> bytes:
    """``count`` identical PUBs in one buffer, to be sent with one ``sendall``."""
    return w.pub(subject, payload, reply) * count


@attrs.frozen
class Dialect:
    """How a protocol's server checks on a client, and how it reports an error."""

    error: bytes
    """The token that starts an error."""
    describe: Callable[[bytes | bytearray], str | None]
    """The text of the first complete error in a chunk."""
    ping: bytes = b""
    """The server's keepalive, which a client must answer with ``pong``; empty when it has none."""
    pong: bytes = b""
    lead: bytes = b""
    """What the stream is known to end with before the reader's first byte (tokens that start with
    it are found at the very start too)."""


NATS = Dialect(ERR, server_error, PING, PONG)


class Reader:
    """A connection's incoming stream, seen as counts of the caller's tokens.

    It also answers the server's PINGs (a client that ignores them is eventually dropped as stale)
    and keeps the first error it sees, which makes the run fail its check.
    """

    __slots__ = ("_buf", "_dialect", "_recv_into", "_sock", "_tally", "error")

    def __init__(self, sock: socket.socket, *tokens: bytes, dialect: Dialect = NATS) -> None:
        self._sock = sock
        self._recv_into = sock.recv_into
        self._buf = bytearray(READ_SIZE)
        self._dialect = dialect
        keepalive = (dialect.ping,) if dialect.ping else ()
        self._tally = Tally(*tokens, *keepalive, dialect.error, lead=dialect.lead)
        self.error: str | None = None

    def read(self) -> list[int]:
        """Block for the next chunk; how many of each token it completes."""
        return self._count(self._recv_into(self._buf))

    def poll(self) -> list[int] | None:
        """Like ``read``, but only what has already arrived (None when nothing has): a publisher
        that only sends still answers the server's PINGs."""
        try:
            size = self._recv_into(self._buf, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        return self._count(size)

    def _count(self, size: int) -> list[int]:
        if not size:
            raise BenchError(self.error or "server closed the connection")
        counts = self._tally.feed(self._buf, size)
        errors = counts.pop()
        dialect = self._dialect
        pings = counts.pop() if dialect.ping else 0
        if pings:
            self._sock.sendall(dialect.pong * pings)
        if errors and self.error is None:
            self.error = dialect.describe(self._buf[:size]) or "server sent an error"
        return counts


class Tally:
    """Counts occurrences of fixed tokens in a byte stream read in arbitrary chunks.

    An occurrence split across two chunks is counted in the chunk that completes it: for each token
    the last ``len - 1`` bytes seen so far are kept and searched together with the first ``len - 1``
    bytes of the next chunk. No occurrence can lie wholly inside that window, so none is counted
    twice, provided a token cannot overlap itself (none of ours can: they start with a verb and end
    with a space or CRLF).
    """

    __slots__ = ("_keep", "_tail", "_tokens")

    def __init__(self, *tokens: bytes, lead: bytes = b"") -> None:
        """``lead``: what the stream is known to have ended with before the first chunk."""
        self._tokens = tuple((token, len(token) - 1) for token in tokens)
        self._keep = max(len(token) for token in tokens) - 1
        self._tail = lead[-self._keep :] if self._keep else b""

    def feed(self, data: bytes | bytearray, size: int) -> list[int]:
        """How many of each token (in the order given) the chunk ``data[:size]`` completes."""
        tail = self._tail
        counts = [
            (tail[max(0, len(tail) - keep) :] + data[: min(keep, size)]).count(token)
            + data.count(token, 0, size)
            for token, keep in self._tokens
        ]
        keep = self._keep
        if size >= keep:
            self._tail = bytes(data[size - keep : size])
        else:
            self._tail = (tail + data[:size])[-keep:]
        return counts
