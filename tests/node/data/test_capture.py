"""Streams that capture subjects, without I/O: entries, trimming, the journal and acknowledgements,
and the ``[[streams]]`` configuration with its errors."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pytest
import trio
import trio.testing

from node.broker import Broker
from node.config.load import from_mapping
from node.config.options import Config, ConfigError, StreamConfig
from node.data.capture import Captures, header_fields
from node.data.durability import CommitFailed
from node.data.streams import Stream, format_id
from routing import Message, Subscription, channel_subject


class Recorder:
    """A subscriber that keeps what it is delivered, noting each arrival in a shared log."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        self.log.append(("delivered", msg.subject, msg.payload))
        return True


class Journal:
    """Records appends and commits in the shared log (``node.data.durability``'s journal protocol)."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        self.log.append(("append", account, db, args[0], args[1]))

    def expire(self, account: str, db: int, key: bytes) -> None:
        self.log.append(("append", account, db, b"DEL", key))

    def commit(self) -> None:
        self.log.append(("commit",))

    size_bytes = 0
    fsync_lag_seconds = 0.0
    buffered = 0
    refusal: str | None = None
    discards = 0


def node(*streams: StreamConfig) -> tuple[Broker, Captures]:
    config = Config(streams=streams)
    broker = Broker(config)
    captures = Captures(broker, streams)
    captures.subscribe()
    return broker, captures


def publish(broker: Broker, subject: bytes, payload: bytes = b"x", **kw: Any) -> None:
    msg = Message(subject, kw.get("reply"), kw.get("headers"), payload)
    broker.publish(broker.account(kw.get("account", "$G")), msg)


def stream(broker: Broker, name: bytes = b"events", account: str = "$G") -> Stream:
    found = broker.keyspaces.database(account, 0).stream(name, 0)
    assert found is not None
    return found


def test_entries_hold_subject_data_and_headers() -> None:
    broker, _ = node(StreamConfig("events", ("orders.*", "$R.>")))
    headers = b"NATS/1.0\r\nTrace: abc\r\nX-Tag:  one \r\nX-Tag: two\r\n\r\n"
    publish(broker, b"orders.eu", b"payload", headers=headers)
    publish(broker, channel_subject(b"hello world"), b"redis")
    publish(broker, b"orders.eu.deep")  # not captured
    entries = stream(broker).range(0, 1 << 128, None)
    assert [fields for _, fields in entries] == [
        [
            b"subject",
            b"orders.eu",
            b"data",
            b"payload",
            b"header:Trace",
            b"abc",
            b"header:X-Tag",
            b"one",
            b"header:X-Tag",
            b"two",
        ],
        [b"subject", b"hello world", b"data", b"redis"],
    ]


def test_header_fields_skip_the_status_line_and_lines_without_a_name() -> None:
    block = b"NATS/1.0 503 No Responders\r\nA: 1\r\nnonsense\r\n: empty\r\nB:\r\n\r\n"
    assert header_fields(block) == [b"header:A", b"1", b"header:B", b""]


def test_acknowledgement_follows_the_commit_and_the_journal_has_the_xadd() -> None:
    log: list[Any] = []
    broker, captures = node(StreamConfig("events", ("orders.>",), account="acme"))
    broker.keyspaces.journal = Journal(log)
    broker.subscribe(broker.account("acme"), Subscription("_INBOX.1", owner=Recorder(log)))
    publish(broker, b"orders.1", reply=b"_INBOX.1", account="acme")
    publish(broker, b"orders.2", account="acme")  # no reply: no acknowledgement
    assert log == [
        ("append", "acme", 0, b"XADD", b"events"),
        ("append", "acme", 0, b"XADD", b"events"),
    ]
    captures.flush()
    first = stream(broker, account="acme").first_id
    ack = json.dumps({"stream": "events", "id": format_id(first).decode()}, separators=(",", ":"))
    assert log[2:] == [("commit",), ("delivered", b"_INBOX.1", ack.encode())]
    assert captures.streams[0].captured == 2


def test_maxlen_trims_a_block_at_a_time() -> None:
    broker, _ = node(StreamConfig("events", ("a",), maxlen=100))
    for _ in range(250):
        publish(broker, b"a")
    captured = stream(broker)
    assert 100 <= captured.length < 200
    assert captured.entries_added == 250


def test_max_age_drops_blocks_older_than_it() -> None:
    broker, _ = node(StreamConfig("events", ("a",), max_age=60))
    old = Stream()
    long_ago = time.time_ns() // 1_000_000 - 120_000
    for i in range(150):  # a full block of old entries, then half a block
        old.add((long_ago, i), [b"k", b"v"])
    broker.keyspaces.database("$G", 0).put(b"events", old)
    publish(broker, b"a")
    assert stream(broker).length == 51  # the old block went; the mixed one stays whole


def test_blocked_readers_are_woken_by_the_flush() -> None:
    woken: list[str] = []

    class Waiter:
        def wake(self) -> None:
            woken.append("woken")

    broker, captures = node(StreamConfig("events", ("a",)))
    broker.keyspaces.database("$G", 0).block(b"events", Waiter())
    publish(broker, b"a")
    assert woken == []  # (served after the write, not inside it)
    captures.flush()
    assert woken == ["woken"]


def test_configuration() -> None:
    config = from_mapping(
        {
            "accounts": {"acme": {}},
            "streams": [
                {"name": "events", "subjects": ["orders.>", "$R.>"]},
                {"name": "audit", "subjects": "log.*", "account": "acme", "maxlen": 10, "max_age": "2h"},
                {"name": "sized", "subjects": ["x"], "max_bytes": "64MB"},
                {"name": "bytes", "subjects": ["y"], "max_bytes": 1000},
            ],
        }
    )
    assert config.streams == (
        StreamConfig("events", ("orders.>", "$R.>")),
        StreamConfig("audit", ("log.*",), "acme", 10, 7200.0),
        StreamConfig("sized", ("x",), max_bytes=64 * 1024**2),
        StreamConfig("bytes", ("y",), max_bytes=1000),
    )


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        ({"subjects": ["a"]}, "each stream needs a name"),
        ({"name": "s"}, "'s': subjects must be a non-empty list"),
        ({"name": "s", "subjects": []}, "'s': subjects must be a non-empty list"),
        ({"name": "s", "subjects": ["a..b"]}, "'s': invalid subject 'a..b'"),
        ({"name": "s", "subjects": ["a.*", "a.>"]}, "'s': subjects 'a.*' and 'a.>' overlap"),
        ({"name": "s", "subjects": ["a"], "account": "nope"}, "'s': unknown account 'nope'"),
        ({"name": "s", "subjects": ["a"], "maxlen": -1}, "must be 0 (no limit) or positive"),
        ({"name": "s", "subjects": ["a"], "maxlen": "10"}, "maxlen: expected int"),
        ({"name": "s", "subjects": ["a"], "max_age": "soon"}, "max_age: expected a duration"),
        ({"name": "s", "subjects": ["a"], "max_age": "xh"}, "max_age: expected a duration"),
        ({"name": "s", "subjects": ["a"], "max_age": float("nan")}, "must be 0 (no limit)"),
        ({"name": "s", "subjects": ["a"], "maxlength": 5}, "unknown option 'maxlength'"),
        ({"name": "s", "subjects": ["a"], "max_bytes": -1}, "must be 0 (no limit) or positive"),
        ({"name": "s", "subjects": ["a"], "max_bytes": "big"}, "max_bytes: expected a size"),
    ],
)
def test_configuration_errors_say_where(stream: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match="config: streams") as caught:
        from_mapping({"streams": [stream]})
    assert error in str(caught.value)


def test_a_stream_name_is_defined_once_per_account() -> None:
    twice = [{"name": "s", "subjects": ["a"]}, {"name": "s", "subjects": ["b"]}]
    with pytest.raises(ConfigError, match="already defined"):
        from_mapping({"streams": twice})
    with pytest.raises(ConfigError, match="array of tables"):
        from_mapping({"streams": {"name": "s"}})


class FailingJournal(Journal):
    """A journal whose disk is full: a commit fails (its changes taken back), and from then on it
    refuses writes."""

    def commit(self) -> None:
        self.discards += 1
        self.refusal = "-MISCONF Errors writing to the AOF file: No space left on device"
        raise CommitFailed(self.refusal)


async def test_a_failed_commit_is_answered_with_the_error_and_later_messages_are_refused(
    nursery: trio.Nursery,
) -> None:
    log: list[Any] = []
    broker, captures = node(StreamConfig("events", ("a",)))
    broker.subscribe(broker.account("$G"), Subscription("inbox", owner=Recorder(log)))
    await nursery.start(captures.run)
    journal = broker.keyspaces.journal = FailingJournal(log)
    publish(broker, b"a", reply=b"inbox")
    await trio.testing.wait_all_tasks_blocked()
    publish(broker, b"a", reply=b"inbox")  # (refused at once: the journal cannot be written)
    await trio.testing.wait_all_tasks_blocked()
    answers = [json.loads(entry[2]) for entry in log if entry[0] == "delivered"]
    error = "MISCONF Errors writing to the AOF file: No space left on device"
    assert answers == [{"stream": "events", "error": error}] * 2
    assert captures.streams[0].refused == 1
    journal.refusal = None  # (writable again)
    broker.keyspaces.journal = Journal(log)
    publish(broker, b"a", reply=b"inbox")
    await trio.testing.wait_all_tasks_blocked()
    ack = [entry for entry in log if entry[0] == "delivered"][-1]
    assert json.loads(ack[2])["id"] == format_id(stream(broker).last_id).decode()


def test_max_bytes_keeps_the_entries_under_it_a_block_at_a_time() -> None:
    broker, _ = node(StreamConfig("events", ("a",), max_bytes=20_000))
    for _ in range(2000):
        publish(broker, b"a", b"x" * 100)
    captured = stream(broker)
    assert captured.entries_memory() <= 20_000
    assert 100 < captured.length < 200  # (some 160 entries fit; a block holds 100 at most)
    assert captured.entries_added == 2000
    assert broker.keyspaces.dataset_bytes == sys.getsizeof(b"events") + captured.memory_usage()


def test_max_bytes_smaller_than_a_block_keeps_the_newest_block() -> None:
    broker, _ = node(StreamConfig("events", ("a",), max_bytes=1))
    for _ in range(250):
        publish(broker, b"a")
    assert 0 < stream(broker).length <= 100
    assert stream(broker).node_count == 1


async def test_past_maxmemory_messages_are_refused_with_the_oom_error(nursery: trio.Nursery) -> None:
    log: list[Any] = []
    broker, captures = node(StreamConfig("events", ("a",)))
    broker.subscribe(broker.account("$G"), Subscription("inbox", owner=Recorder(log)))
    await nursery.start(captures.run)
    broker.keyspaces.maxmemory = 10_000
    for _ in range(200):
        publish(broker, b"a", b"x" * 100, reply=b"inbox")
        await trio.testing.wait_all_tasks_blocked()
    answers = [json.loads(entry[2]) for entry in log if entry[0] == "delivered"]
    refused = [answer for answer in answers if "error" in answer]
    oom = {"stream": "events", "error": "OOM command not allowed when used memory > 'maxmemory'."}
    assert refused
    assert all(answer == oom for answer in refused)
    assert answers.index(oom) == len(answers) - len(refused)  # (refused from the first one on)
    assert captures.streams[0].refused == len(refused)
    used = broker.keyspaces.used_memory
    assert 10_000 < used < 10_000 + 1000  # (one entry past the limit at most)
    assert stream(broker).length == captures.streams[0].captured
    broker.keyspaces.database("$G", 0).delete(b"events")  # (as DEL would)
    assert broker.keyspaces.used_memory == broker.keyspaces.overhead
    publish(broker, b"a", reply=b"inbox")
    await trio.testing.wait_all_tasks_blocked()
    assert "id" in json.loads(log[-1][2])
