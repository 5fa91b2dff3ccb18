"""The link protocol between nodes, sans I/O: msgpack frames in, typed frames out, and back.

Every frame is one msgpack array whose first element names the operation. Frames are checked field
by field on the way in: a peer that sends a malformed frame (wrong types, unknown operation, bad
msgpack) or an oversized one gets a ``LinkError`` and the link is closed; nothing it sends can
reach the node in a shape the node does not expect. Decoding itself is bounded too: until the peer
has proved who it is, frames are small (``HANDSHAKE_FRAME``) and so are arrays, maps and strings,
so no header can make the node allocate much for a stranger (see ``cluster.decoder``).

Operations, in the order a link opens (see ``cluster.handshake``):

* ``CHALLENGE kind version nonce``: the first frame each side sends; all a stranger learns.
* ``PROOF mac``: HMAC-SHA256 over both nonces and the sender's role, keyed by the shared secret.
* ``HELLO {info}``: who the sender is, sent only once the peer's proof checked out: a route's server
  id and name, cluster, URL, pool, slot and known peers; a gateway's cluster and gateway URLs.
* ``PING`` / ``PONG``: heartbeats; any frame counts as a sign of life.
* ``RS+ account subject queue weight`` / ``RS- account subject queue``: interest changes.
* ``SNAP account [[subject, queue, weight], ...]``: a batch of interest, sent when a link opens.
* ``MSG account subject reply headers payload [queue, ...]``: a message and the queue groups the
  receiver must serve.
* ``GOSSIP [{id, name, url}, ...]``: peers the sender knows, so the full mesh can form.
* ``GATEWAYS {cluster: [url, ...]}``: the gateway URLs of other clusters the sender knows, so
  every node of a cluster dials every cluster any of them has heard of.
* ``CLIENTS [host:port, ...]``: where the sender now takes clients (its HELLO said so first): an
  empty list once it stops (lame duck mode), so its peers stop advertising it to their clients.
* ``RAFT group message``: one Raft message for a replica group (``cluster.replication.wire`` says
  how a message is laid out and checked); routes only.
* ``KEYS id account db hops [arg, ...] protocol`` / ``KEYR id reply``: a Redis command forwarded
  to the node that leads its keys' replica group, and that node's reply (in RESP ``protocol``, the
  client's: 2 or 3; a frame without it, from an earlier release, means 2) (``node.replicated.path``);
  routes only. ``hops`` counts how often the request was passed on. A command of more arguments
  than an array may hold (``MAX_ARRAY``: a wide XADD, a long transaction) has them packed in one
  binary instead, itself a msgpack array, bounded by the frame's size alone.
* ``ERR text``: why the sender is about to close.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import msgpack

from cluster.checks import MAX_ARRAY, LinkError
from cluster.checks import array as _list
from cluster.checks import blob as _bytes
from cluster.checks import integer as _int
from cluster.checks import mapping as _map
from cluster.checks import opt_blob as _opt_bytes
from cluster.checks import opt_text as _opt_str
from cluster.checks import text as _str
from cluster.message_frames import MessageFrame, pack_message
from cluster.raft.messages import Message as RaftMessage
from cluster.replication import wire
from routing.message import Message

__all__ = [
    "HANDSHAKE_FRAME",
    "MAX_CLIENT_URLS",
    "MAX_CLUSTERS",
    "MAX_PEERS",
    "NONCE_SIZE",
    "SNAPSHOT_BATCH",
    "Challenge",
    "ClientUrls",
    "Err",
    "Frame",
    "GatewayHello",
    "Gateways",
    "Gossip",
    "Hello",
    "KeysReply",
    "KeysRequest",
    "LinkError",
    "MessageFrame",
    "PeerInfo",
    "Ping",
    "Pong",
    "Proof",
    "RaftFrame",
    "RouteHello",
    "Snapshot",
    "SubAdd",
    "SubRemove",
    "check_frame",
    "encode",
]

NONCE_SIZE = 32
"""Bytes of a CHALLENGE's nonce, and of a PROOF's MAC (SHA-256)."""
HANDSHAKE_FRAME = 64 * 1024
"""The largest frame a peer may send before it has proved it knows the secret."""
SNAPSHOT_BATCH = 1000
"""Interest entries per SNAP frame: 100k subscriptions are a hundred frames, not 100k."""
MAX_PEERS = 256
"""Peers one HELLO or GOSSIP frame may name."""
MAX_CLUSTERS = 256
"""Clusters one HELLO or GATEWAYS frame may name (and gateway URLs per cluster)."""
MAX_CLIENT_URLS = 32
"""Client URLs one node may advertise (in its HELLO or a CLIENTS frame)."""
MAX_CLIENT_URL = 270
"""The longest client URL (``host:port``: a DNS name of 253 characters, or a bracketed IPv6
address with a zone)."""
MAX_TEXT = 64 * 1024
"""The longest string in any frame (account names, subjects, URLs)."""


@attrs.frozen(slots=True)
class PeerInfo:
    """A route peer as HELLO and GOSSIP name it."""

    id: str
    name: str
    url: str


@attrs.frozen(slots=True)
class RouteHello:
    """What a route peer says of itself once authenticated.

    Attributes:
        slot: which pooled connection this is (set by the dialer; None from the listener).
        connection: the dialer's name for this connection.
        peers: route peers the sender is connected to.
        gateway_url: where the sender accepts gateway links ("" if it does not).
        client_urls: where the sender takes clients (``host:port``), for its peers to advertise
            to theirs.
        redis_url: where the sender takes Redis clients (``host:port``; "" if it does not), for
            its peers to describe in CLUSTER SLOTS and the like.
    """

    id: str
    name: str
    cluster: str
    url: str
    pool_size: int
    pinned: tuple[str, ...] = ()
    peers: tuple[PeerInfo, ...] = ()
    gateway_url: str = ""
    slot: int | str | None = None
    connection: str = ""
    client_urls: tuple[str, ...] = ()
    redis_url: str = ""


@attrs.frozen(slots=True)
class GatewayHello:
    """What a gateway peer says of itself (and of the clusters it knows) once authenticated.

    Attributes:
        gateway: the sender's cluster name in the super-cluster.
        urls: gateway URLs of the sender's cluster's nodes.
        gateways: gateway URLs of the other clusters it knows, by cluster name.
    """

    id: str
    name: str
    gateway: str
    url: str
    gateways: dict[str, tuple[str, ...]]  # (no default: a compiled class takes no factory)
    urls: tuple[str, ...] = ()


@attrs.define(slots=True)
class Challenge:
    kind: str
    version: int
    nonce: bytes


@attrs.define(slots=True)
class Proof:
    mac: bytes


@attrs.define(slots=True)
class Hello:
    info: RouteHello | GatewayHello


@attrs.define(slots=True)
class Ping:
    pass


@attrs.define(slots=True)
class Pong:
    pass


@attrs.define(slots=True)
class SubAdd:
    account: str
    subject: str
    queue: str | None
    weight: int


@attrs.define(slots=True)
class SubRemove:
    account: str
    subject: str
    queue: str | None


@attrs.define(slots=True)
class Snapshot:
    account: str
    entries: list[tuple[str, str | None, int]]


@attrs.define(slots=True)
class Gossip:
    peers: list[PeerInfo]


@attrs.define(slots=True)
class Gateways:
    known: dict[str, tuple[str, ...]]


@attrs.define(slots=True)
class ClientUrls:
    urls: tuple[str, ...]


@attrs.define(slots=True)
class RaftFrame:
    group: str
    message: RaftMessage | wire.SnapshotPart


@attrs.define(slots=True)
class KeysRequest:
    id: int
    account: str
    db: int
    hops: int
    args: list[bytes]
    protocol: int = 2
    """The RESP version the reply is wanted in (the client's)."""


@attrs.define(slots=True)
class KeysReply:
    id: int
    reply: bytes


@attrs.define(slots=True)
class Err:
    text: str


Frame = (
    Challenge | Proof | Hello | Ping | Pong | SubAdd | SubRemove | Snapshot | MessageFrame | Gossip
    | Gateways | ClientUrls | RaftFrame | KeysRequest | KeysReply | Err
)  # fmt: skip

_PING: bytes = msgpack.packb(["PING"])
_PONG: bytes = msgpack.packb(["PONG"])


def encode(frame: Frame) -> bytes:
    """The bytes of one frame."""
    if isinstance(frame, MessageFrame):
        return pack_message(frame.account, frame.msg, frame.queues)
    if isinstance(frame, SubAdd):
        return _pack(["RS+", frame.account, frame.subject, frame.queue, frame.weight])
    if isinstance(frame, SubRemove):
        return _pack(["RS-", frame.account, frame.subject, frame.queue])
    if isinstance(frame, Ping):
        return _PING
    if isinstance(frame, Pong):
        return _PONG
    if isinstance(frame, Snapshot):
        return _pack(["SNAP", frame.account, [list(e) for e in frame.entries]])
    if isinstance(frame, Challenge):
        return _pack(["CHALLENGE", frame.kind, frame.version, frame.nonce])
    if isinstance(frame, Proof):
        return _pack(["PROOF", frame.mac])
    if isinstance(frame, Hello):
        return _pack(["HELLO", _hello_map(frame.info)])
    if isinstance(frame, Gossip):
        return _pack(["GOSSIP", [_peer_map(p) for p in frame.peers]])
    if isinstance(frame, Gateways):
        return _pack(["GATEWAYS", {name: list(urls) for name, urls in frame.known.items()}])
    if isinstance(frame, ClientUrls):
        return _pack(["CLIENTS", list(frame.urls)])
    if isinstance(frame, RaftFrame):
        return _pack(["RAFT", frame.group, wire.pack(frame.message)])
    if isinstance(frame, KeysRequest):
        args = frame.args if len(frame.args) <= MAX_ARRAY else _packer.pack(frame.args)
        return _pack(["KEYS", frame.id, frame.account, frame.db, frame.hops, args, frame.protocol])
    if isinstance(frame, KeysReply):
        return _pack(["KEYR", frame.id, frame.reply])
    return _pack(["ERR", frame.text])


_packer = msgpack.Packer(use_bin_type=True)


def _pack(obj: list[Any]) -> bytes:
    data: bytes = _packer.pack(obj)
    return data


def _peer_map(peer: PeerInfo) -> dict[str, str]:
    return {"id": peer.id, "name": peer.name, "url": peer.url}


def _hello_map(info: RouteHello | GatewayHello) -> dict[str, Any]:
    if isinstance(info, GatewayHello):
        return {
            "kind": "gateway", "id": info.id, "name": info.name, "gateway": info.gateway,
            "url": info.url, "urls": list(info.urls),
            "gateways": {name: list(urls) for name, urls in info.gateways.items()},
        }  # fmt: skip
    out: dict[str, Any] = {
        "kind": "route", "id": info.id, "name": info.name, "cluster": info.cluster,
        "url": info.url, "pool_size": info.pool_size, "pinned": list(info.pinned),
        "peers": [_peer_map(p) for p in info.peers], "gateway_url": info.gateway_url,
        "client_urls": list(info.client_urls), "redis_url": info.redis_url,
    }  # fmt: skip
    if info.slot is not None:
        out["slot"] = info.slot
        out["connection"] = info.connection
    return out


# -- checked decoding ------------------------------------------------------------------------


def _weight(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise LinkError(f"bad queue weight {str(value)[:20]!r}")
    return value


def _strs(value: Any, most: int = MAX_ARRAY) -> tuple[str, ...]:
    return tuple([_str(item) for item in _list(value, most)])


def _entry(value: Any) -> tuple[str, str | None, int]:
    if type(value) is not list or len(value) != 3:
        raise LinkError("bad snapshot entry")
    return _str(value[0]), _opt_str(value[1]), _weight(value[2])


def _peer(value: Any) -> PeerInfo:
    fields = _map(value)
    return PeerInfo(_str(fields.get("id")), _str(fields.get("name")), _str(fields.get("url")))


def _peers(value: Any) -> list[PeerInfo]:
    return [_peer(p) for p in _list(value, MAX_PEERS)]


def _gateways(value: Any) -> dict[str, tuple[str, ...]]:
    known = _map(value)
    if len(known) > MAX_CLUSTERS:
        raise LinkError(f"{len(known)} clusters where at most {MAX_CLUSTERS} may be")
    return {_str(name): _strs(urls, MAX_CLUSTERS) for name, urls in known.items()}


_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]")


def _client_urls(value: Any) -> tuple[str, ...]:
    """Client URLs as a peer advertises them: each ``host:port``, a name, an IPv4 address or a
    bracketed IPv6 one (they go into every client's INFO, so nothing else gets through)."""
    urls = _strs(value, MAX_CLIENT_URLS)
    for url in urls:
        _client_url(url)
    return urls


def _client_url(url: str) -> str:
    """``url`` if it is a client URL as ``_client_urls`` takes them."""
    host, _, port = url.rpartition(":")
    if (
        len(url) > MAX_CLIENT_URL
        or not _HOST.fullmatch(host)
        or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
    ):
        raise LinkError(f"bad client URL {url[:64]!r}")
    return url


def _redis_url(value: Any) -> str:
    """Where a peer takes Redis clients: a client URL, or "" (it does not)."""
    url = _str(value)
    return _client_url(url) if url else ""


def _slot(value: Any) -> int | str | None:
    if value is None or type(value) is str:
        return value
    return _int(value, 0, 63)


def _route_hello(fields: dict[Any, Any]) -> RouteHello:
    get = fields.get
    return RouteHello(
        id=_str(get("id")), name=_str(get("name")), cluster=_str(get("cluster")),
        url=_str(get("url")), pool_size=_int(get("pool_size"), 1, 64),
        pinned=_strs(get("pinned", []), MAX_PEERS), peers=tuple(_peers(get("peers", []))),
        gateway_url=_str(get("gateway_url", "")), slot=_slot(get("slot")),
        connection=_str(get("connection", "")), client_urls=_client_urls(get("client_urls", [])),
        redis_url=_redis_url(get("redis_url", "")),
    )  # fmt: skip


def _gateway_hello(fields: dict[Any, Any]) -> GatewayHello:
    get = fields.get
    gateway = _str(get("gateway"))
    if not gateway:
        raise LinkError("HELLO without a gateway name")
    return GatewayHello(
        id=_str(get("id")), name=_str(get("name")), gateway=gateway, url=_str(get("url")),
        urls=_strs(get("urls", []), MAX_CLUSTERS), gateways=_gateways(get("gateways", {})),
    )  # fmt: skip


def _hello(value: Any) -> Hello:
    fields = _map(value)
    kind = fields.get("kind")
    if kind == "route":
        return Hello(_route_hello(fields))
    if kind == "gateway":
        return Hello(_gateway_hello(fields))
    raise LinkError(f"HELLO of an unknown kind {str(kind)[:32]!r}")


def _nonce(value: Any) -> bytes:
    if type(value) is not bytes or len(value) != NONCE_SIZE:
        raise LinkError(f"a nonce or MAC must be {NONCE_SIZE} bytes")
    return value


def check_frame(obj: Any) -> Frame:
    """The frame an unpacked msgpack object is, checked field by field (``LinkError`` if it is none)."""
    if type(obj) is not list or not obj:
        raise LinkError("a frame must be a non-empty array")
    op, n = obj[0], len(obj)
    if op == "MSG" and n == 7:
        queues = obj[6]
        if type(queues) is not list:
            raise LinkError("bad queue list")
        msg = Message(_bytes(obj[2]), _opt_bytes(obj[3]), _opt_bytes(obj[4]), _bytes(obj[5]))
        return MessageFrame(_str(obj[1]), msg, tuple([_str(q) for q in queues]) if queues else ())
    if op == "RS+" and n == 5:
        return SubAdd(_str(obj[1]), _str(obj[2]), _opt_str(obj[3]), _weight(obj[4]))
    if op == "RS-" and n == 4:
        return SubRemove(_str(obj[1]), _str(obj[2]), _opt_str(obj[3]))
    if op == "PING" and n == 1:
        return Ping()
    if op == "PONG" and n == 1:
        return Pong()
    if op == "SNAP" and n == 3:
        return Snapshot(_str(obj[1]), [_entry(e) for e in _list(obj[2])])
    if op == "CHALLENGE" and n == 4:
        return Challenge(_str(obj[1]), _int(obj[2], 0, 0xFFFF), _nonce(obj[3]))
    if op == "PROOF" and n == 2:
        return Proof(_nonce(obj[1]))
    if op == "HELLO" and n == 2:
        return _hello(obj[1])
    if op == "GOSSIP" and n == 2:
        return Gossip(_peers(obj[1]))
    if op == "GATEWAYS" and n == 2:
        return Gateways(_gateways(obj[1]))
    if op == "CLIENTS" and n == 2:
        return ClientUrls(_client_urls(obj[1]))
    if op == "RAFT" and n == 3:
        return RaftFrame(wire.check_group(obj[1]), wire.unpack(obj[2]))
    if op == "KEYS" and n in (6, 7):  # (6: from a node that forwards in RESP2 only)
        args = [_bytes(arg) for arg in _keys_args(obj[5])]
        if not args:
            raise LinkError("a forwarded command without arguments")
        return KeysRequest(
            _int(obj[1], 0, 1 << 63), _str(obj[2]), _int(obj[3], 0, 255), _int(obj[4], 0, 8), args,
            _int(obj[6], 2, 3) if n == 7 else 2,
        )  # fmt: skip
    if op == "KEYR" and n == 3:
        return KeysReply(_int(obj[1], 0, 1 << 63), _bytes(obj[2]))
    if op == "ERR" and n == 2:
        return Err(_str(obj[1]))
    raise LinkError(f"unknown or malformed frame {str(op)[:16]!r}/{n}")


def _keys_args(value: Any) -> list[Any]:
    """A KEYS frame's arguments: an array, or (past ``MAX_ARRAY`` of them) one binary holding a
    msgpack array of binaries, read here by hand so that nothing in it can make the reader
    allocate more than the binary's own size (a nested array, a length past the end)."""
    if not isinstance(value, bytes):
        return _list(value)
    head = value[:1]
    if head == b"\xdc":
        count, at = int.from_bytes(value[1:3]), 3
    elif head == b"\xdd":
        count, at = int.from_bytes(value[1:5]), 5
    else:
        raise LinkError("KEYS arguments packed in something else than an array")
    if not MAX_ARRAY < count <= len(value):
        raise LinkError(f"KEYS arguments packed as {count} (more than {MAX_ARRAY} only)")
    args: list[bytes] = []
    for _ in range(count):
        kind = value[at : at + 1]
        width = {b"\xc4": 1, b"\xc5": 2, b"\xc6": 4}.get(kind)
        if width is None:
            raise LinkError("a packed KEYS argument that is no binary")
        start = at + 1 + width
        end = start + int.from_bytes(value[at + 1 : start])
        if end > len(value) or start > len(value):
            raise LinkError("a packed KEYS argument past the end of its frame")
        args.append(value[start:end])
        at = end
    if at != len(value):
        raise LinkError("bytes after the packed KEYS arguments")
    return args
