"""Fuzzing the link ports of one real node: whatever arrives on a route or gateway connection, the
only outcomes are an ERR and a close of that connection, or normal processing; the node's clients
never notice, and its memory stays bounded.

Streams come typed (well-formed frames with fields of the wrong types or random values, HELLOs
made of random maps, unknown operations, deep nesting, huge length headers), before or after a
proper handshake, and untyped (random msgpack, random bytes), split at random points. The node is
started once (with ``run_node``, in a thread of its own) and a nats-py client of it is asked for a
round trip after every example. ``FUZZ_EXAMPLES`` sets how many examples to run (default: a run of
well under a minute).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import attrs
import msgpack
import nats
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg

from cluster.config import ClusterConfig, GatewayConfig
from cluster.frames import MAX_CLUSTERS, Challenge, Err, RaftFrame, encode
from cluster.raft import messages as raft_messages
from cluster.replication.group import GroupSpec
from cluster.replication.wire import MAX_NONCE
from cluster.routes import MAX_UNMET_PEERS
from node.config.options import Config
from node.run.launch import NodeHandle, run_node
from tests.cluster.impostor import Impostor, frames_in, gateway_hello, route_hello
from tests.cluster.test_real_link_attacks import subscribed

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
SECRET = "fuzz-secret"
QUIET = 0.15
"""Seconds of silence after which a connection the node keeps open counts as processed normally
(once the node said anything: a slow start under load is not silence)."""
MEMORY_GROWTH = 32 * 1024 * 1024
"""How much the process (the node runs in it) may grow over a round of the heaviest attacks."""


# -- the node and its canary ---------------------------------------------------------------------


@attrs.frozen
class Target:
    node: NodeHandle
    token: trio.lowlevel.TrioToken
    canary: Canary


class Canary:
    """A nats-py client of the node, in an asyncio loop of its own, answering its own requests."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client: Client = self._run(self._connect(url))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _connect(self, url: str) -> Client:
        client = await nats.connect(url, allow_reconnect=False)

        async def echo(msg: Msg) -> None:
            await msg.respond(msg.data)

        await client.subscribe("canary", cb=echo)
        await client.flush()
        return client

    def round_trip(self, data: bytes) -> bytes:
        async def ask() -> bytes:
            reply = await self._client.request("canary", data, timeout=5)
            return reply.data

        result: bytes = self._run(ask())
        return result

    def close(self) -> None:
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """One node with routes and gateways on 127.0.0.1, in a thread with its own trio loop; it is a
    member of replica group ``g`` with the impostors' name, so their Raft messages reach a group."""
    config = Config(
        server_name="fuzzed",
        store_dir=str(tmp_path_factory.mktemp("store")),
        host="127.0.0.1",
        port=0,
        cluster=ClusterConfig(
            name="fuzz", host="127.0.0.1", port=0, secret=SECRET, ping_interval=0.5, ping_max=4
        ),
        gateway=GatewayConfig(
            name="fuzz", host="127.0.0.1", port=0, secret=SECRET, ping_interval=0.5, ping_max=4
        ),
    )
    started: queue.Queue[tuple[NodeHandle, trio.lowlevel.TrioToken]] = queue.Queue()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            handle = await nursery.start(run_node, config)
            assert handle.node.replicas is not None
            await handle.node.replicas.start_group(GroupSpec("g", RAFT_VOTERS), Sink())
            started.put((handle, trio.lowlevel.current_trio_token()))

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    node, token = started.get(timeout=30)
    canary = Canary(node.url)
    while not trio.from_thread.run_sync(partial(subscribed, node, "canary"), trio_token=token):
        time.sleep(0.01)
    yield Target(node, token, canary)
    canary.close()
    trio.from_thread.run_sync(node.shutdown, trio_token=token)
    thread.join(30)
    assert not thread.is_alive()


# -- what is sent ----------------------------------------------------------------------------------

OPS = ["CHALLENGE", "PROOF", "HELLO", "PING", "PONG", "RS+", "RS-", "SNAP", "MSG", "GOSSIP",
       "GATEWAYS", "CLIENTS", "RAFT", "ERR"]  # fmt: skip
IMPOSTOR = "0" * 56
"""The name (and id) of the route peer an impostor with a HELLO claims to be."""
RAFT_VOTERS = frozenset({"fuzzed", IMPOSTOR, "absent"})
RAFT_OPS = ["VOTE", "VOTED", "APPEND", "APPENDED", "BEAT", "BEATEN", "SNAP", "TIMEOUT"]


class Sink:
    """A state machine that takes anything (what a hostile leader sends is its business)."""

    def apply(self, data: bytes) -> object:
        return None

    def term_began(self) -> None:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


# No ":" in any string: nothing generated is a URL, so a node that accepts what it is sent never
# dials (or resolves) anything but what the test names.
TEXT = st.text(st.characters(codec="utf-8", blacklist_characters=":"), max_size=20)
SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | TEXT
    | st.binary(max_size=40)
)
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(TEXT, inner, max_size=6),
    max_leaves=24,
)
HELLO_KEYS = ["kind", "id", "name", "cluster", "url", "pool_size", "pinned", "peers", "gateway_url",
              "slot", "connection", "gateway", "urls", "gateways", "client_urls",
              "redis_url"]  # fmt: skip


def packed(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


TYPED_FRAME = st.one_of(
    # a known operation, its fields anything
    st.builds(
        lambda op, fields: packed([op, *fields]), st.sampled_from(OPS), st.lists(VALUE, max_size=7)
    ),
    # a HELLO: a map of the right keys (and a few others) with values of any type
    st.builds(
        lambda fields: packed(["HELLO", fields]),
        st.dictionaries(st.sampled_from(HELLO_KEYS) | TEXT, VALUE, max_size=14),
    ),
    # an unknown operation
    st.builds(lambda op, fields: packed([op, *fields]), TEXT, st.lists(VALUE, max_size=4)),
    # deep nesting
    st.builds(lambda depth: b"\x91" * depth + b"\xc0", st.integers(1, 50_000)),
    # a header announcing far more than follows: array, map, str, bin, ext
    st.builds(
        lambda kind, size, tail: kind + size.to_bytes(4, "big") + tail,
        st.sampled_from([b"\xdd", b"\xdf", b"\xdb", b"\xc6"]),
        st.integers(0, 2**32 - 1),
        st.binary(max_size=64),
    ),
)
NAME = st.sampled_from([IMPOSTOR, "fuzzed", "absent"])
INDEX = st.integers(0, 2**63 - 1) | st.integers(0, 50)
ENTRY = st.builds(raft_messages.Entry, INDEX, INDEX, st.binary(max_size=20))
NONCE = st.just(0) | st.integers(1, MAX_NONCE)
WELL_FORMED_RAFT = st.one_of(
    st.builds(raft_messages.VoteRequest, sender=NAME, to=NAME, term=INDEX, last_index=INDEX,
              last_term=INDEX, pre=st.booleans(), transfer=st.booleans(), recovering=NONCE),
    st.builds(raft_messages.VoteResponse, sender=NAME, to=NAME, term=INDEX, granted=st.booleans(),
              pre=st.booleans()),
    st.builds(lambda prev, entries, **kw: raft_messages.AppendEntries(
        prev_index=prev, entries=tuple(attrs.evolve(e, index=prev + 1 + i)
                                       for i, e in enumerate(entries)), **kw),
        st.integers(0, 60), st.lists(ENTRY, max_size=4), sender=NAME, to=NAME, term=INDEX,
        prev_term=INDEX, commit=INDEX),
    st.builds(raft_messages.AppendResponse, sender=NAME, to=NAME, term=INDEX, index=INDEX,
              reject=st.booleans(), hint_index=INDEX, hint_term=INDEX, recovering=NONCE),
    st.builds(raft_messages.Heartbeat, sender=NAME, to=NAME, term=INDEX, commit=INDEX,
              read_seq=INDEX, recovered=NONCE),
    st.builds(raft_messages.InstallSnapshot, sender=NAME, to=NAME, term=INDEX,
              snapshot=st.builds(raft_messages.Snapshot, INDEX, INDEX,
                                 st.frozensets(NAME, max_size=3), st.binary(max_size=20))),
    st.builds(raft_messages.TimeoutNow, sender=NAME, to=NAME, term=INDEX),
)  # fmt: skip
RAFT_FRAME = st.one_of(
    # a Raft message of a known type, its fields anything
    st.builds(
        lambda group, op, fields: packed(["RAFT", group, [op, *fields]]),
        st.sampled_from(["g", "nope"]) | TEXT,
        st.sampled_from(RAFT_OPS) | TEXT,
        st.lists(NAME | VALUE, max_size=9),
    ),
    # a well-formed Raft message, whoever it claims to be from and to
    st.builds(lambda message: encode(RaftFrame("g", message)), WELL_FORMED_RAFT),
)
UNTYPED = st.one_of(st.binary(max_size=4096), VALUE.map(packed))


@attrs.frozen
class Case:
    port: str
    """"route" or "gateway"."""
    handshake: str
    """"none" (raw bytes from the first), "proved" (a proper handshake, then the stream instead of a
    HELLO) or "hello" (a proper handshake and HELLO, then the stream)."""
    stream: bytes = attrs.field(repr=lambda data: f"{data[:64]!r}... ({len(data)} bytes)")
    cuts: tuple[int, ...]
    """Where the stream is split into separate sends."""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    stream = b"".join(draw(st.lists(TYPED_FRAME | RAFT_FRAME | UNTYPED, min_size=1, max_size=4)))
    cuts = tuple(sorted(draw(st.lists(st.integers(0, len(stream)), max_size=4))))
    return Case(
        draw(st.sampled_from(["route", "gateway"])),
        draw(st.sampled_from(["none", "proved", "hello"])),
        stream,
        cuts,
    )


# -- one example -----------------------------------------------------------------------------------


@attrs.define
class Outcome:
    received: bytes = b""
    closed: bool = False
    """Whether the node closed the connection (or reset it)."""
    reset: bool = False
    """Whether it was reset: the node closed while bytes it had not read were still arriving, so
    what it sent last (an ERR) may never have been delivered."""


async def attack(target: Target, case: Case) -> Outcome:
    """Send one case, reading what the node sends back meanwhile."""
    node = target.node
    port = node.cluster_port if case.port == "route" else node.gateway_port
    assert port is not None
    impostor = Impostor(await trio.open_tcp_stream("127.0.0.1", port), case.port, SECRET)
    outcome = Outcome()
    try:
        if case.handshake != "none":
            hello = b""
            if case.handshake == "hello":
                # (an id that sorts first, so the node never dials back a route to nowhere)
                hello = route_hello(IMPOSTOR, "fuzz") if case.port == "route" else gateway_hello("x")
            assert await impostor.authenticate(hello) is not None
        outcome.received = impostor.received

        async def send(cancel: trio.CancelScope) -> None:
            try:
                start = 0
                for cut in (*case.cuts, len(case.stream)):
                    await impostor.send(case.stream[start:cut])
                    start = cut
            except trio.BrokenResourceError:
                outcome.closed = outcome.reset = True
                cancel.cancel()

        async def read(cancel: trio.CancelScope) -> None:
            while True:
                with trio.move_on_after(QUIET) as quiet:
                    try:
                        chunk = await impostor.stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        outcome.closed = outcome.reset = True
                        break
                    if not chunk:
                        outcome.closed = True
                        break
                    outcome.received += chunk
                if quiet.cancelled_caught and sent.is_set() and outcome.received:
                    break  # (the node speaks first, a CHALLENGE: silence before it is no verdict)
            cancel.cancel()

        sent = trio.Event()
        with trio.move_on_after(10) as cancel:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, cancel)
                await send(cancel)
                sent.set()
        return outcome
    finally:
        await impostor.aclose()


def judge(case: Case, outcome: Outcome) -> None:
    """An ERR and a close, or normal processing (the connection kept, nothing but the protocol's
    own frames sent back)."""
    frames = frames_in(outcome.received)
    if not outcome.reset:
        assert frames, outcome.received[:200]
    assert not frames or isinstance(frames[0], Challenge)
    peer_said_bye = b"ERR" in case.stream and case.handshake != "none"
    if outcome.closed and not outcome.reset and not peer_said_bye:
        # (a peer's own ERR closes the link without one back, once the handshake is done)
        assert any(isinstance(f, Err) for f in frames), frames


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases())
@example(case=Case("route", "none", b"\xdd\x03\x93\x87\x00" + b"\x01" * (1 << 20), ()))
@example(case=Case("gateway", "none", b"\xdd\x03\x93\x87\x00" + b"\x01" * (1 << 20), ()))
@example(case=Case("route", "proved", b"\xdd\x03\x93\x87\x00" + b"\x01" * (1 << 20), ()))
@example(
    case=Case("route", "hello", packed(["GOSSIP", [{"id": "f", "name": "f", "url": "u"}] * 300]), ())
)
@example(case=Case("route", "proved", packed(["HELLO", {"kind": "route", "peers": None}]), ()))
@example(case=Case("route", "none", route_hello("0" * 56, "fuzz"), ()))
def test_whatever_a_link_sends_only_that_link_suffers(target: Target, case: Case) -> None:
    judge(case, trio.run(attack, target, case))
    assert target.canary.round_trip(b"still here") == b"still here"
    bounded(target.node)


def bounded(node: NodeHandle) -> None:
    """What links can make the node keep is bounded, whatever they sent."""
    routes, gateways = node.routes, node.gateways
    assert routes is not None
    assert gateways is not None
    assert sum(not peer.met for peer in routes.peers.values()) <= MAX_UNMET_PEERS
    assert len(gateways.remotes) <= MAX_CLUSTERS
    assert all(len(gateway.urls) <= MAX_CLUSTERS for gateway in gateways.remotes.values())
    for manager in (routes, gateways):
        assert len(manager.link_accounts) <= manager.config.max_accounts
    replicas = node.node.replicas
    assert replicas is not None
    assert not replicas.groups["g"].stopped  # (whatever the peers said, the group runs on)


HEAVY = [
    b"\xdd\x03\x93\x87\x00" + b"\x01" * (8 << 20),  # an array of 60M elements, then 8 MB
    b"\xdf\x03\x93\x87\x00" + b"\x01" * (1 << 20),  # a map of 60M pairs
    b"\x91" * (1 << 20),  # nesting a million deep
    b"\x9f" * (1 << 20),  # a million arrays of 15, nested
    b"\x90" * (1 << 20),  # a million empty arrays, each a frame
]


@pytest.mark.parametrize("handshake", ["none", "hello"])
def test_memory_stays_bounded_under_the_heaviest_attacks(target: Target, handshake: str) -> None:
    """Frames that would decode into gigabytes, on both ports, before and after the handshake: the
    process (the node runs in it) barely grows, and the canary still gets its answers."""
    trio.run(attack, target, Case("route", handshake, HEAVY[0][:1000], ()))  # (warm up)
    before = rss()
    for data in HEAVY:
        for port in ("route", "gateway"):
            case = Case(port, handshake, data, ())
            outcome = trio.run(attack, target, case)
            judge(case, outcome)
            assert outcome.closed
    assert rss() - before < MEMORY_GROWTH
    assert target.canary.round_trip(b"after") == b"after"
    bounded(target.node)
