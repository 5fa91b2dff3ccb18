"""What the Redis front door counts as it runs commands, one ``RedisStats`` per node, as redis-server
keeps it: calls, time, rejections and failures per command (INFO commandstats), error replies per
error code (INFO errorstats), the slow log (SLOWLOG), latency events (LATENCY), the instantaneous
rates INFO stats shows, and the connections in MONITOR mode.

The cost on the path of every command is ``called``: a dictionary look-up and a few additions; a
slow log entry or latency event is made only past its threshold.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Final

from node.redis_state.settings import RedisSettings

__all__ = ["CommandStat", "LatencyEvent", "RedisStats", "SlowEntry", "redact"]

ERROR_CODES_KEPT: Final = 128
"""Distinct error codes counted at most: past them, errors are counted only in the total (as
redis-server stops its error statistics)."""
SLOW_ARGS: Final = 32
SLOW_ARG_BYTES: Final = 128
LATENCY_SAMPLES: Final = 160
"""Samples kept per latency event (redis-server's ``LATENCY_TS_LEN``)."""
RATE_SAMPLES: Final = 16


class CommandStat:
    """One command's counts (INFO commandstats) and the spread of its times (LATENCY HISTOGRAM,
    INFO latencystats): ``histogram[n]`` counts the calls that took ``2**(n-1)`` to ``2**n - 1``
    microseconds."""

    __slots__ = ("calls", "failed", "histogram", "rejected", "usec")

    def __init__(self) -> None:
        self.calls = self.usec = self.rejected = self.failed = 0
        self.histogram = [0] * 64

    def cumulative(self) -> list[tuple[int, int]]:
        """(microseconds, calls that took at most that long), at each power of two from the
        first call's to the slowest's (LATENCY HISTOGRAM's ``histogram_usec``)."""
        counts = self.histogram
        used = [n for n, count in enumerate(counts) if count]
        if not used:
            return []
        total = 0
        rows = []
        for n in range(used[0], used[-1] + 1):
            total += counts[n]
            rows.append((1 << n, total))
        return rows

    @property
    def tracked(self) -> int:
        """The calls timed into the histogram (while ``latency-tracking`` was on)."""
        return sum(self.histogram)

    def percentile(self, share: float) -> float:
        """The time (microseconds, to a power of two) within which ``share`` percent of the
        tracked calls ran."""
        wanted = self.tracked * share / 100
        total = 0
        for n, count in enumerate(self.histogram):
            total += count
            if count and total >= wanted:
                return float(1 << n)
        return 0.0


class SlowEntry:
    """A SLOWLOG entry."""

    __slots__ = ("addr", "args", "id", "name", "usec", "when")

    def __init__(self, id: int, when: int, usec: int, args: list[bytes], addr: str, name: str) -> None:
        self.id = id
        self.when = when
        self.usec = usec
        self.args = args
        self.addr = addr
        self.name = name


class LatencyEvent:
    """One latency event's samples (LATENCY HISTORY) and its worst ever (LATENCY LATEST)."""

    __slots__ = ("max", "samples")

    def __init__(self) -> None:
        self.samples: collections.deque[tuple[int, int]] = collections.deque(maxlen=LATENCY_SAMPLES)
        """(unix seconds, milliseconds), one per second at most."""
        self.max = 0


def redact(args: list[bytes]) -> list[bytes]:
    """A request as the slow log and MONITOR show it: AUTH's arguments, and those after HELLO's
    AUTH, replaced by ``(redacted)``."""
    name = args[0].lower()
    if name == b"auth":
        return [args[0]] + [b"(redacted)"] * (len(args) - 1)
    if name == b"hello":
        shown = list(args)
        for i in range(2, len(args) - 2):
            if args[i].lower() == b"auth":
                shown[i + 1] = shown[i + 2] = b"(redacted)"
        return shown
    return args


class RedisStats:
    """The counts, the slow log, the latency events and the MONITOR connections of one node.

    The thresholds and the slow log's length are ``settings``' (read at each command).
    """

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self.commands: dict[str, CommandStat] = {}
        self.errors: dict[str, int] = {}
        self.error_replies = 0
        self.net_input = self.net_output = 0
        """Bytes read from and written to Redis clients."""
        self.rejected_connections = 0
        """Redis clients turned away at the connection limit."""
        self.slowlog: collections.deque[SlowEntry] = collections.deque()
        self._next_slow_id = 0
        self.latency: dict[str, LatencyEvent] = {}
        self.monitors: list[Any] = []
        """The connections in MONITOR mode (each has ``feed_monitor``)."""
        self._rates: collections.deque[tuple[float, int, int, int]] = collections.deque(
            maxlen=RATE_SAMPLES
        )
        self.reset_ns = time.time_ns()

    # -- per command ---------------------------------------------------------------------------

    def called(self, name: str, elapsed_ns: int, failed: bool) -> bool:
        """A command ran for ``elapsed_ns`` (whether it answered an error: ``failed``); True when
        it belongs in the slow log (the caller then calls ``slow``)."""
        stat = self.commands.get(name)
        if stat is None:
            stat = self.commands[name] = CommandStat()
        usec = elapsed_ns // 1000
        stat.calls += 1
        stat.usec += usec
        settings = self.settings
        if settings.latency_tracking:
            stat.histogram[usec.bit_length()] += 1  # (2**63 microseconds never pass)
        if failed:
            stat.failed += 1
        threshold = settings.latency_monitor_threshold
        if threshold and usec >= threshold * 1000:
            self.latency_event("command", usec // 1000)
        return usec >= settings.slowlog_log_slower_than >= 0

    def rejected(self, name: str) -> None:
        """A command refused before it ran (arity, sign-in, ``maxmemory``...)."""
        stat = self.commands.get(name)
        if stat is None:
            stat = self.commands[name] = CommandStat()
        stat.rejected += 1

    def error_reply(self, reply: bytes) -> None:
        """An error reply went out: counted under its code (the word after ``-``)."""
        self.error_replies += 1
        end = reply.find(b" ")
        if end < 0:
            end = reply.find(b"\r")
        code = reply[1:end].decode("latin-1")
        if code in self.errors:
            self.errors[code] += 1
        elif len(self.errors) < ERROR_CODES_KEPT:
            self.errors[code] = 1

    def uncount_error_reply(self, reply: bytes) -> None:
        """Take back ``error_reply``'s count of a reply that repeats an error counted already (a
        script's error that a command it ran gave, counted once, as redis-server counts it)."""
        end = reply.find(b" ")
        if end < 0:
            end = reply.find(b"\r")
        code = reply[1:end].decode("latin-1")
        if self.errors.get(code, 0) > 0:
            self.errors[code] -= 1
            self.error_replies -= 1

    @property
    def processed(self) -> int:
        """Commands run (total_commands_processed)."""
        return sum(stat.calls for stat in self.commands.values())

    # -- slow log and latency ------------------------------------------------------------------

    def slow(self, args: list[bytes], elapsed_ns: int, addr: str, name: str) -> None:
        """Log a slow command: at most ``SLOW_ARGS`` arguments, each cut at ``SLOW_ARG_BYTES``, as
        redis-server shows them."""
        shown: list[bytes] = []
        for i, arg in enumerate(redact(args)):
            if i == SLOW_ARGS - 1 and len(args) > SLOW_ARGS:
                shown.append(b"... (%d more arguments)" % (len(args) - SLOW_ARGS + 1))
                break
            if len(arg) > SLOW_ARG_BYTES:
                arg = arg[:SLOW_ARG_BYTES] + b"... (%d more bytes)" % (len(arg) - SLOW_ARG_BYTES)
            shown.append(bytes(arg))
        entry = SlowEntry(self._next_slow_id, int(time.time()), elapsed_ns // 1000, shown, addr, name)
        self._next_slow_id += 1
        self.slowlog.appendleft(entry)
        self.trim_slowlog()

    def trim_slowlog(self) -> None:
        while len(self.slowlog) > self.settings.slowlog_max_len:
            self.slowlog.pop()

    def latency_event(self, event: str, ms: int) -> None:
        """A latency sample (one per second per event: the worst of that second is kept)."""
        record = self.latency.get(event)
        if record is None:
            record = self.latency[event] = LatencyEvent()
        now = int(time.time())
        record.max = max(record.max, ms)
        samples = record.samples
        if samples and samples[-1][0] == now:
            if samples[-1][1] < ms:
                samples[-1] = (now, ms)
        else:
            samples.append((now, ms))

    # -- rates ---------------------------------------------------------------------------------

    def sample(self, now: float) -> None:
        """A sample of the totals the instantaneous rates are measured from (taken ten times a
        second)."""
        self._rates.append((now, self.processed, self.net_input, self.net_output))

    def rates(self) -> tuple[float, float, float]:
        """Commands per second, input and output KiB per second, over the samples kept."""
        if len(self._rates) < 2:
            return 0.0, 0.0, 0.0
        t0, ops0, in0, out0 = self._rates[0]
        t1, ops1, in1, out1 = self._rates[-1]
        span = t1 - t0
        if span <= 0:
            return 0.0, 0.0, 0.0
        return (ops1 - ops0) / span, (in1 - in0) / span / 1024, (out1 - out0) / span / 1024

    def reset(self) -> None:
        """CONFIG RESETSTAT: the counts start again (the slow log and latency events stay)."""
        self.commands.clear()
        self.errors.clear()
        self.error_replies = 0
        self.net_input = self.net_output = self.rejected_connections = 0
        self._rates.clear()
        self.reset_ns = time.time_ns()
