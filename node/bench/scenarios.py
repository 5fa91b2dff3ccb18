"""The benchmark scenarios and the coordinator that runs one: workers out, reports in, one result.

A run measures end to end: from the moment the first message is sent to the moment the last
subscriber has received everything (or, publishing alone, the server has confirmed it read the last
message). Workers connect and subscribe before the clock starts, so connection setup is not timed;
when subscribers use another server than publishers (two nodes of a cluster), neither is the time
their interest takes to cross the route (see ``node.bench.workers`` on probes).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import multiprocessing
import secrets
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import attrs

from node.bench import keys, resp, streams
from node.bench.wire import BenchError, Endpoint, Reader, connect, flush
from node.bench.workers import (
    GO,
    READY,
    Job,
    Progress,
    Report,
    Role,
    publisher,
    requester,
    responder,
    subscriber,
    work,
)
from node.nats.protocol import writer as w

__all__ = ["DEFAULT_TIMEOUT", "SCENARIOS", "Latency", "Result", "Scenario", "Spec", "run"]

DEFAULT_TIMEOUT = 300.0
READY_TIMEOUT = 30.0
"""Time for the worker processes to start, connect and subscribe."""
POLL = 0.1
"""How often the coordinator looks at progress while it waits."""
PROBE_INTERVAL = 0.005
"""How often probes go out while workers wait for their interest to cross a route."""
PROBE_FLUSH_TIMEOUT = 10.0
GRACE = 2.0
"""How long the other workers may go on once one has failed: a subscriber whose publisher died
would otherwise wait for its marker until the run's timeout."""

ProgressCallback = Callable[[int, int], None]
"""Called with (done, total) while a run is under way."""


@attrs.frozen
class Scenario:
    """One kind of run, with the defaults that make it what its name says."""

    name: str
    summary: str
    subs: int
    msgs: int
    queue: bool = False
    protocol: str = "nats"
    """``nats``, or ``redis`` for a RESP server: the scheme of its URLs."""
    patterns: int = 0
    """Non-matching patterns each subscriber holds (RESP)."""


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("pub", "publish only: how fast the server takes messages in", subs=0, msgs=1_000_000),
        Scenario("pubsub", "1 publisher -> 1 subscriber", subs=1, msgs=1_000_000),
        Scenario("fanout", "1 publisher -> N subscribers; reports deliveries/s", subs=10, msgs=100_000),
        Scenario(
            "queue", "1 publisher -> N members of one queue group", subs=4, msgs=1_000_000, queue=True
        ),
        Scenario("reqrep", "request/reply round trips, one request at a time", subs=1, msgs=20_000),
        Scenario(
            "resp-pubsub", "RESP: 1 publisher -> 1 subscriber", subs=1, msgs=1_000_000, protocol="redis"
        ),
        Scenario(
            "resp-fanout",
            "RESP: 1 publisher -> N subscribers; reports deliveries/s",
            subs=10,
            msgs=100_000,
            protocol="redis",
        ),
        Scenario(
            "resp-xadd",
            "RESP: pipelined XADD to one stream; reports entries added/s",
            subs=0,
            msgs=1_000_000,
            protocol="redis",
        ),
        Scenario(
            "resp-consume",
            "RESP: N consumers of one group drain a filled stream with XREADGROUP and XACK",
            subs=1,
            msgs=300_000,
            protocol="redis",
        ),
        Scenario(
            "resp-blocked",
            "RESP: XADD, one at a time, to a stream N readers of one group wait on in XREADGROUP"
            " BLOCK (each re-blocks once served)",
            subs=1000,
            msgs=20_000,
            protocol="redis",
        ),
        Scenario(
            "resp-set",
            "RESP: pipelined SET of one key to the payload",
            subs=0,
            msgs=1_000_000,
            protocol="redis",
        ),
        Scenario("resp-get", "RESP: pipelined GET of one key", subs=0, msgs=1_000_000, protocol="redis"),
        Scenario(
            "resp-evalsha",
            "RESP: pipelined EVALSHA of a loaded script that SETs one key",
            subs=0,
            msgs=500_000,
            protocol="redis",
        ),
        Scenario(
            "resp-patterns",
            "RESP: 1 publisher -> 1 subscriber that also holds N patterns that never match",
            subs=1,
            msgs=20_000,
            protocol="redis",
            patterns=10_000,
        ),
    )
}


STREAM_SCENARIOS = frozenset({"resp-xadd", "resp-consume", "resp-blocked"})
"""The RESP scenarios on a stream (``node.bench.streams``) rather than channels."""


@attrs.frozen
class Spec:
    """Everything that defines one run."""

    scenario: str
    endpoint: Endpoint
    msgs: int
    size: int = 16
    subs: int = 1
    pubs: int = 1
    subject: str = "bench"
    timeout: float = DEFAULT_TIMEOUT
    """Seconds the run may take once started; what has not arrived by then counts as lost."""
    sub_endpoint: Endpoint | None = None
    """Where subscribers (the responder) connect, when not to ``endpoint`` with the publishers."""
    patterns: int = 0
    """Non-matching patterns each subscriber holds (resp-patterns)."""

    @property
    def across(self) -> bool:
        """Whether publishers and subscribers use different servers."""
        return self.sub_endpoint is not None and self.sub_endpoint != self.endpoint

    def check(self) -> None:
        """Refuse a spec that cannot run, or that the counting could not measure faithfully."""
        scenario = SCENARIOS.get(self.scenario)
        if scenario is None:
            raise BenchError(f"unknown scenario {self.scenario!r}")
        if self.msgs < 1 or self.size < 0 or self.pubs < 1 or self.subs < 0 or self.patterns < 0:
            raise BenchError(
                "--msgs and --pubs must be positive, --size, --subs and --patterns not negative"
            )
        if self.endpoint.scheme != scenario.protocol:
            raise BenchError(f"{self.scenario} needs a {scenario.protocol}:// URL")
        if self.patterns and self.scenario != "resp-patterns":
            raise BenchError("only resp-patterns holds patterns")
        if scenario.protocol == "redis":
            self._check_resp()
            return
        if self.scenario == "pub" and (self.subs or self.across):
            raise BenchError("pub runs without subscribers (pubsub and fanout have them)")
        if self.scenario == "reqrep" and (self.subs, self.pubs) != (1, 1):
            raise BenchError("reqrep runs one requester and one responder")
        if self.scenario not in ("pub", "reqrep") and self.subs < 1:
            raise BenchError(f"{self.scenario} needs at least one subscriber")
        tokens = self.subject.split(".")
        if any(t in ("", "*", ">") for t in tokens) or any(c.isspace() for c in self.subject):
            raise BenchError(f"--subject must be a literal subject, not {self.subject!r}")
        # Deliveries are counted by their "MSG " token and errors by "-ERR": the subject must not
        # make either appear in a MSG line a second time.
        if self.subject.endswith("MSG") or "-ERR" in self.subject:
            raise BenchError(f"--subject {self.subject!r} would be miscounted; choose another")

    def _check_resp(self) -> None:
        if self.sub_endpoint is not None:
            raise BenchError(f"{self.scenario} runs on one server (no --sub-url)")
        if self.scenario in STREAM_SCENARIOS:
            self._check_stream()
            return
        if self.scenario in keys.KEY_SCENARIOS:
            if self.subs:
                raise BenchError(f"{self.scenario} runs without subscribers")
            if not self.subject or any(c.isspace() for c in self.subject):
                raise BenchError(f"--subject must be a key, not {self.subject!r}")
            return
        if self.subs < 1:
            raise BenchError(f"{self.scenario} needs at least one subscriber")
        if not self.subject or any(c.isspace() for c in self.subject):
            raise BenchError(f"--subject must be a channel name, not {self.subject!r}")
        # Deliveries are counted by their frame's type string: a channel with the same name would
        # be counted too.
        if self.subject in resp.FRAME_WORDS:
            raise BenchError(f"--subject {self.subject!r} would be miscounted; choose another")

    def _check_stream(self) -> None:
        if self.scenario == "resp-xadd" and self.subs:
            raise BenchError("resp-xadd runs without consumers (resp-consume has them)")
        if self.scenario in ("resp-consume", "resp-blocked") and (self.subs < 1 or self.pubs != 1):
            who = "consumer" if self.scenario == "resp-consume" else "reader"
            raise BenchError(f"{self.scenario} needs at least one {who} (--subs), and no --pubs")
        if not self.subject or any(c.isspace() for c in self.subject):
            raise BenchError(f"--subject must be a stream key, not {self.subject!r}")


@attrs.frozen
class Latency:
    """Round-trip times in microseconds."""

    p50: float
    p99: float
    mean: float

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> Latency:
        micros = sorted(ns / 1000 for ns in samples_ns)
        if len(micros) < 2:
            only = micros[0] if micros else 0.0
            return cls(only, only, only)
        cuts = statistics.quantiles(micros, n=100, method="inclusive")
        return cls(cuts[49], cuts[98], statistics.fmean(micros))


@attrs.frozen
class Result:
    """The outcome of one run: what arrived, how long it took, and whether anything went wrong."""

    spec: Spec
    expected: int
    """Deliveries the run must see (messages for publish-only, replies for request/reply)."""
    received: int
    seconds: float
    per_worker: tuple[int, ...]
    """Each subscriber's deliveries (each publisher's confirmed messages for publish-only)."""
    errors: tuple[str, ...] = ()
    latency: Latency | None = None

    @property
    def ok(self) -> bool:
        return self.received == self.expected and not self.errors

    @property
    def rate(self) -> float:
        """Messages (deliveries, replies) per second."""
        return self.received / self.seconds if self.seconds > 0 else 0.0

    @property
    def megabytes_per_second(self) -> float:
        """Payload bytes moved per second, in MB (10^6 bytes)."""
        return self.rate * self.spec.size / 1e6

    def failure(self) -> str:
        """Why the run failed its check, in a line."""
        return f"received {self.received:,} of {self.expected:,}" + "".join(
            f" ({e})" for e in self.errors
        )

    def as_dict(self) -> dict[str, Any]:
        spec = self.spec
        out: dict[str, Any] = {
            "scenario": spec.scenario,
            "url": spec.endpoint.url,
            "sub_url": (spec.sub_endpoint or spec.endpoint).url,
            "msgs": spec.msgs,
            "size": spec.size,
            "pubs": spec.pubs,
            "subs": spec.subs,
            "subject": spec.subject,
            "patterns": spec.patterns,
            "expected": self.expected,
            "received": self.received,
            "per_worker": list(self.per_worker),
            "seconds": self.seconds,
            "msgs_per_sec": self.rate,
            "mb_per_sec": self.megabytes_per_second,
            "ok": self.ok,
            "errors": list(self.errors),
        }
        if self.latency is not None:
            out["latency_us"] = attrs.asdict(self.latency)
        return out


@attrs.frozen
class _Plan:
    """Who runs in a spec's run, and how its reports become a result."""

    roles: list[tuple[Role, Job]]
    starters: list[int]
    """Slots that wait for GO (publishers, requesters)."""
    counted: list[int]
    """Slots whose counts make ``received`` (and the progress bar), and whose last event ends the
    timed span."""
    expected: int
    probes: list[tuple[Endpoint, bytes]] = attrs.Factory(list)
    """What to publish, and where, until every worker's interest has crossed (PUB lines)."""
    prepare: Callable[[], None] | None = None
    """What the coordinator does before workers start (untimed): fill a stream to consume."""
    settle: Callable[[], None] | None = None
    """What the coordinator waits for once workers are ready, before the clock starts (untimed):
    readers blocked."""


def _plan(spec: Spec) -> _Plan:
    run_id = secrets.token_hex(4)
    subject = spec.subject.encode()
    done = f"bench-done.{run_id}".encode()
    probe = f"bench-probe.{run_id}".encode() if spec.across else b""
    base = Job(spec.endpoint, subject, spec.size, done=done, probe=probe)
    far = spec.sub_endpoint or spec.endpoint
    probes = [(spec.endpoint, w.pub(subject, b"", probe) + w.pub(done, b"", probe))] if probe else []
    if spec.scenario in STREAM_SCENARIOS:
        key = f"{spec.subject}.stream.{run_id}".encode()  # (a fresh stream and group each run)
        return _stream_plan(spec, attrs.evolve(base, subject=key))
    if spec.scenario in keys.KEY_SCENARIOS:
        key = f"{spec.subject}.key.{run_id}".encode()  # (a fresh key each run)
        return _key_plan(spec, attrs.evolve(base, subject=key))
    if SCENARIOS[spec.scenario].protocol == "redis":
        return _resp_plan(spec, base)
    if spec.scenario == "reqrep":
        inbox = f"_INBOX.{run_id}".encode()
        job = attrs.evolve(base, count=spec.msgs, inbox=inbox)
        if probe:
            probes.append((far, w.pub(inbox, b"", probe)))
        roles: list[tuple[Role, Job]] = [(responder, attrs.evolve(job, endpoint=far)), (requester, job)]
        return _Plan(roles, starters=[1], counted=[1], expected=spec.msgs, probes=probes)
    queue = b"bench" if SCENARIOS[spec.scenario].queue else None
    subs = spec.subs
    roles = [
        (subscriber, attrs.evolve(base, endpoint=far, queue=queue, publishers=spec.pubs))
        for _ in range(subs)
    ]
    share, extra = divmod(spec.msgs, spec.pubs)
    for i in range(spec.pubs):
        job = attrs.evolve(base, count=share + (i < extra), done=base.done if subs else b"")
        roles.append((publisher, job))
    publishers = list(range(subs, subs + spec.pubs))
    if not subs:
        return _Plan(roles, publishers, publishers, expected=spec.msgs)
    expected = spec.msgs if queue else spec.msgs * subs
    return _Plan(roles, publishers, list(range(subs)), expected=expected, probes=probes)


def _resp_plan(spec: Spec, base: Job) -> _Plan:
    sub = attrs.evolve(base, publishers=spec.pubs, patterns=spec.patterns)
    roles: list[tuple[Role, Job]] = [(resp.subscriber, sub) for _ in range(spec.subs)]
    share, extra = divmod(spec.msgs, spec.pubs)
    roles += [(resp.publisher, attrs.evolve(base, count=share + (i < extra))) for i in range(spec.pubs)]
    publishers = list(range(spec.subs, spec.subs + spec.pubs))
    return _Plan(roles, publishers, list(range(spec.subs)), expected=spec.msgs * spec.subs)


def _key_plan(spec: Spec, base: Job) -> _Plan:
    """Clients sharing the commands on one key, made ready by ``keys.prepare``."""
    share, extra = divmod(spec.msgs, spec.pubs)
    role = keys.ROLES[spec.scenario]
    roles: list[tuple[Role, Job]] = [
        (role, attrs.evolve(base, count=share + (i < extra))) for i in range(spec.pubs)
    ]
    clients = list(range(spec.pubs))
    prepare = functools.partial(keys.prepare, spec.scenario, spec.endpoint, base)
    return _Plan(roles, clients, clients, expected=spec.msgs, prepare=prepare)


def _stream_plan(spec: Spec, base: Job) -> _Plan:
    """Adders sharing the messages, or consumers draining a stream ``prepare`` fills."""
    if spec.scenario == "resp-xadd":
        share, extra = divmod(spec.msgs, spec.pubs)
        roles: list[tuple[Role, Job]] = [
            (streams.adder, attrs.evolve(base, count=share + (i < extra))) for i in range(spec.pubs)
        ]
        adders = list(range(spec.pubs))
        return _Plan(roles, adders, adders, expected=spec.msgs)
    if spec.scenario == "resp-blocked":
        return _blocked_plan(spec, base)
    roles = [(streams.consumer, base) for _ in range(spec.subs)]
    consumers = list(range(spec.subs))
    fill = functools.partial(streams.fill, spec.endpoint, attrs.evolve(base, count=spec.msgs))
    return _Plan(roles, consumers, consumers, expected=spec.msgs, prepare=fill)


def _blocked_plan(spec: Spec, base: Job) -> _Plan:
    """Reader processes sharing ``spec.subs`` blocked readers, and the writer that comes last."""
    share = streams.READERS_PER_WORKER
    roles: list[tuple[Role, Job]] = [
        (streams.blocked_reader, attrs.evolve(base, readers=min(share, spec.subs - first)))
        for first in range(0, spec.subs, share)
    ]
    readers = list(range(len(roles)))
    roles.append((streams.writer, attrs.evolve(base, count=spec.msgs, readers=spec.subs)))
    return _Plan(
        roles,
        starters=[len(readers)],
        counted=readers,
        expected=spec.msgs,
        prepare=functools.partial(streams.create_group, spec.endpoint, base.subject),
        settle=functools.partial(streams.await_blocked, spec.endpoint, spec.subs, READY_TIMEOUT),
    )


def run(spec: Spec, on_progress: ProgressCallback | None = None) -> Result:
    """Run one benchmark against a live server.

    Raises:
        BenchError: the spec is invalid, or the workers could not connect and subscribe.
    """
    spec.check()
    plan = _plan(spec)
    if plan.prepare is not None:
        plan.prepare()
    with _Crew(plan.roles) as crew:
        with _Prober(plan.probes) as prober:
            crew.wait_ready(prober.send)
        if plan.settle is not None:
            plan.settle()
        crew.go(plan.starters)
        reports = crew.reports(spec.timeout, plan.counted, plan.expected, on_progress)
    starters = [reports[i] for i in plan.starters]
    counted = [reports[i] for i in plan.counted]
    start = min(r.start for r in starters)
    end = max(r.end for r in counted)
    latencies = [ns for r in starters for ns in r.latencies]
    return Result(
        spec,
        expected=plan.expected,
        received=sum(r.count for r in counted),
        seconds=max(0.0, end - start),
        per_worker=tuple(r.count for r in counted),
        errors=tuple(dict.fromkeys(r.error for r in reports.values() if r.error)),
        latency=Latency.of(latencies) if spec.scenario == "reqrep" else None,
    )


class _Prober:
    """The coordinator's connections that publish probes while workers wait for them to arrive.

    It sends a round every ``PROBE_INTERVAL`` and, when the workers are ready, makes sure each server
    has read all it was sent before hanging up (see ``flush``).
    """

    def __init__(self, probes: list[tuple[Endpoint, bytes]]) -> None:
        self._probes = probes
        self._socks: list[tuple[socket.socket, Reader, bytes]] = []
        self._stack = contextlib.ExitStack()
        self._next = 0.0

    def __enter__(self) -> _Prober:
        with self._stack:
            for endpoint, lines in self._probes:
                sock = self._stack.enter_context(connect(endpoint))
                self._socks.append((sock, Reader(sock), lines))
            self._stack = self._stack.pop_all()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        with self._stack:
            if exc_type is None:
                for sock, _, _ in self._socks:
                    flush(sock, PROBE_FLUSH_TIMEOUT)

    def send(self) -> None:
        """A round of probes, if one is due; and the servers' PINGs answered."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + PROBE_INTERVAL
        for sock, reader, lines in self._socks:
            sock.sendall(lines)
            reader.poll()


class _Crew:
    """The worker processes of one run, from start to last report; none outlives the ``with``.

    Workers are started with ``spawn``: a fresh interpreter is safe whatever other threads the
    caller runs (an event loop, when a test drives the coordinator from a worker thread), which
    ``fork`` is not.
    """

    def __init__(self, roles: list[tuple[Role, Job]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.progress: Progress = ctx.RawArray(ctypes.c_longlong, len(roles))
        self.conns: list[Connection] = []
        self.procs: list[multiprocessing.process.BaseProcess] = []
        self._ends: list[Connection] = []
        for slot, (role, job) in enumerate(roles):
            ours, theirs = ctx.Pipe()
            self.conns.append(ours)
            self._ends.append(theirs)
            self.procs.append(
                ctx.Process(
                    target=work,
                    args=(role, theirs, job, self.progress, slot),
                    name=f"bench-{role.__name__}-{slot}",
                    daemon=True,
                )
            )

    def __enter__(self) -> _Crew:
        for proc in self.procs:
            proc.start()
        for end in self._ends:
            end.close()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(5)
        for conn in self.conns:
            conn.close()

    def wait_ready(self, tick: Callable[[], None]) -> None:
        """Wait for every worker to connect and subscribe, calling ``tick`` every ``PROBE_INTERVAL``
        meanwhile; the first failure ends the run."""
        waiting = set(range(len(self.conns)))
        deadline = time.monotonic() + READY_TIMEOUT
        while waiting:
            tick()
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"workers not ready after {READY_TIMEOUT:.0f} s")
            ready = self._wait([self.conns[i] for i in waiting], min(left, PROBE_INTERVAL))
            for conn in ready:
                message = self._receive(conn)
                if message != READY:
                    error = message.error if isinstance(message, Report) else None
                    raise BenchError(error or "a worker ended before the run started")
                waiting.discard(self.conns.index(conn))

    def go(self, slots: list[int]) -> None:
        for slot in slots:
            self.conns[slot].send(GO)

    def reports(
        self,
        timeout: float,
        counted: list[int],
        total: int,
        on_progress: ProgressCallback | None,
    ) -> dict[int, Report]:
        """Every worker's report by slot, in the order they came (so a failure's cause comes before
        its consequences); a worker still busy at the deadline is reported as unfinished."""
        reports: dict[int, Report] = {}
        deadline = time.monotonic() + timeout
        unfinished = f"timed out after {timeout:g} s"
        while len(reports) < len(self.conns):
            pending = [c for i, c in enumerate(self.conns) if i not in reports]
            left = deadline - time.monotonic()
            if left <= 0:
                for i in range(len(self.conns)):
                    reports.setdefault(i, Report(self.progress[i], error=unfinished))
                break
            for conn in self._wait(pending, min(left, POLL)):
                slot = self.conns.index(conn)
                message = self._receive(conn)
                report = message if isinstance(message, Report) else self._lost(slot)
                reports[slot] = report
                if report.error and time.monotonic() + GRACE < deadline:
                    deadline = time.monotonic() + GRACE
                    unfinished = "stopped after another worker failed"
            if on_progress is not None:
                on_progress(sum(self.progress[i] for i in counted), total)
        return reports

    def _lost(self, slot: int) -> Report:
        return Report(
            self.progress[slot], error=f"worker {self.procs[slot].name} ended without a report"
        )

    @staticmethod
    def _wait(conns: list[Connection], timeout: float) -> list[Connection]:
        return [c for c in wait(conns, max(0.0, timeout)) if isinstance(c, Connection)]

    @staticmethod
    def _receive(conn: Connection) -> object:
        try:
            return conn.recv()
        except EOFError:
            return None
