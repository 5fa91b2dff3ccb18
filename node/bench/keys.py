"""The load generator's string-key roles, for any Redis-protocol server: pipelined ``SET``, ``GET``
and ``EVALSHA`` on one key.

Each role sends its command in pre-built pipelines, as ``node.bench.resp``'s publisher sends
PUBLISH (``pipelined``: batches of 256 KiB, a bounded number unconfirmed), and counts the replies
by a token each holds once: ``+OK`` for ``SET`` and for the script (which returns ``SET``'s
status reply), ``$`` for ``GET``'s bulk string (the value is filler, which holds none). Errors
start with ``-`` and end the run.

``prepare`` is what the coordinator does before the clock starts: for ``GET``, set the key to the
run's payload; for ``EVALSHA``, load the script (its SHA1 is known beforehand, as for any script).
"""

from __future__ import annotations

import hashlib
import time
from functools import partial
from multiprocessing.connection import Connection

from node.bench.resp import RESP, command, connect, pipelined
from node.bench.wire import BenchError, Endpoint, Reader
from node.bench.workers import READY, Job, Progress, Report, Role

__all__ = ["KEY_SCENARIOS", "ROLES", "SCRIPT", "prepare", "script_sha"]

SCRIPT = b"return redis.call('SET', KEYS[1], ARGV[1])"
"""What ``EVALSHA`` runs: a ``SET`` of the key to the payload, whose ``+OK`` it returns."""
OK = b"+OK"
BULK = b"$"
FILLER = b"x"


def script_sha() -> bytes:
    return hashlib.sha1(SCRIPT).hexdigest().encode()


def _run(job: Job, one: bytes, token: bytes, conn: Connection, progress: Progress, slot: int) -> Report:
    with connect(job.endpoint) as sock:
        reader = Reader(sock, token, dialect=RESP)
        conn.send(READY)
        conn.recv()  # GO
        start = time.perf_counter()
        done = pipelined(sock, reader, one, job.count, partial(progress.__setitem__, slot))
        return Report(done, start, time.perf_counter(), reader.error)


def setter(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    one = command(b"SET", job.subject, FILLER * job.size)
    return _run(job, one, OK, conn, progress, slot)


def getter(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    return _run(job, command(b"GET", job.subject), BULK, conn, progress, slot)


def evaluator(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    one = command(b"EVALSHA", script_sha(), b"1", job.subject, FILLER * job.size)
    return _run(job, one, OK, conn, progress, slot)


ROLES: dict[str, Role] = {"resp-set": setter, "resp-get": getter, "resp-evalsha": evaluator}
"""Each scenario's role."""
KEY_SCENARIOS = frozenset(ROLES)


def prepare(scenario: str, endpoint: Endpoint, job: Job) -> None:
    """Make what the run needs before the clock starts (see the module docstring)."""
    if scenario == "resp-get":
        setup, expected = command(b"SET", job.subject, FILLER * job.size), b"+OK\r\n"
    elif scenario == "resp-evalsha":
        sha = script_sha()
        setup, expected = command(b"SCRIPT", b"LOAD", SCRIPT), b"$%d\r\n%b\r\n" % (len(sha), sha)
    else:
        return
    with connect(endpoint) as sock:
        sock.sendall(setup)
        reply = bytearray()
        while not reply.endswith(b"\r\n") or (reply[:1] == b"$" and reply.count(b"\r\n") < 2):
            data = sock.recv(4096)
            if not data:
                raise BenchError("server closed the connection")
            reply += data
        if bytes(reply) != expected:
            raise BenchError(f"setting up {scenario}: {bytes(reply).decode(errors='replace').strip()}")
