"""The monitoring endpoints watching Redis streams: a real node with a Redis port, a monitoring port
and a stream that captures subjects; real redis-py clients and a NATS client; /streamz, /varz's
``streams`` and /metrics read over HTTP after each step."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
import trio

from node.config.options import Config, StreamConfig
from node.run.launch import NodeHandle
from tests.node.monitoring.test_monitor_redis import W, client, get_json, metrics, start_monitored_node

pytestmark = pytest.mark.timeout(60)


class Journal:
    """A journal that keeps nothing but reports a size and a lag, as the node's journal does."""

    size_bytes = 4096
    fsync_lag_seconds = 0.25
    buffered = 0
    refusal: str | None = None
    discards = 0

    def append(self, account: str, db: int, args: list[bytes]) -> None:
        pass

    def expire(self, account: str, db: int, key: bytes) -> None:
        pass

    def commit(self) -> None:
        pass


def nats_request(node: NodeHandle, subject: str, payload: bytes) -> bytes:
    """Publish with a reply subject over a raw NATS connection; the payload of the answer."""
    with socket.create_connection(("127.0.0.1", node.port), timeout=W) as sock:
        sock.sendall(
            b"CONNECT {}\r\nSUB ack 1\r\nPUB %b ack %d\r\n%b\r\n"
            % (subject.encode(), len(payload), payload)
        )
        seen = b""
        while b"\r\n" not in seen.partition(b"MSG ack 1 ")[2]:
            data = sock.recv(4096)
            assert data, "the node closed the connection"
            seen += data
        length = int(seen.partition(b"MSG ack 1 ")[2].split(b"\r\n")[0])
        while len(body := seen.partition(b"MSG ack 1 ")[2].partition(b"\r\n")[2]) < length:
            seen += sock.recv(4096)
        return body[:length]


def status(node: NodeHandle, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}{path}", timeout=W) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_streamz_varz_and_metrics_follow_streams(nursery: trio.Nursery) -> None:
    capture = StreamConfig("events", ("orders.>",), maxlen=1000)
    node = await start_monitored_node(nursery, Config(streams=(capture,)))

    def scenario() -> None:
        empty = get_json(node, "/varz")["streams"]
        assert empty == {
            "streams": 0,
            "entries": 0,
            "bytes": 0,
            "groups": 0,
            "captures": 1,
            "captured": 0,
            "refused": 0,
            "journal": False,
            "log_size": 0,
            "fsync_lag": 0.0,
            "log_writable": True,
            "log_error": "",
            "log_discards": 0,
        }
        r = client(node)
        r.xadd("jobs", {"n": "1"}, id="1-1")
        r.xadd("jobs", {"n": "2"}, id="2-1")
        r.xadd("jobs", {"n": "3"}, id="3-1")
        r.xgroup_create("jobs", "workers", id="0")
        r.xgroup_create("jobs", "audit", id="$")
        read: Any = r.xreadgroup("workers", "w1", {"jobs": ">"}, count=2)
        assert len(read[0][1]) == 2
        other = client(node, db=3)
        other.xadd("jobs", {"n": "x"}, id="5-0")
        ack = nats_request(node, "orders.eu", b"hello")
        assert ack.startswith(b'{"stream":"events","id":"')

        doc = get_json(node, "/streamz")
        assert (doc["total"], doc["num_streams"], doc["offset"], doc["limit"]) == (3, 3, 0, 1024)
        assert (doc["journal"], doc["log_size"], doc["fsync_lag"]) == (False, 0, 0.0)
        listed = [(s["account"], s["db"], s["name"], s["length"]) for s in doc["streams"]]
        assert listed == [("$G", 0, "events", 1), ("$G", 0, "jobs", 3), ("$G", 3, "jobs", 1)]
        jobs = doc["streams"][1]
        assert (jobs["first_id"], jobs["last_id"], jobs["entries_added"]) == ("1-1", "3-1", 3)
        assert jobs["bytes"] > 0
        assert jobs["groups"] == [
            {
                "name": "audit",
                "consumers": 0,
                "pending": 0,
                "last_delivered_id": "3-1",
                "entries_read": None,  # (as XINFO GROUPS says after XGROUP CREATE ... $)
                "lag": 0,
            },
            {
                "name": "workers",
                "consumers": 1,
                "pending": 2,
                "last_delivered_id": "2-1",
                "entries_read": 2,
                "lag": 1,
            },
        ]
        assert doc["captures"] == [
            {
                "account": "$G",
                "name": "events",
                "subjects": ["orders.>"],
                "maxlen": 1000,
                "max_age": 0.0,
                "max_bytes": 0,
                "captured": 1,
                "refused": 0,
            }
        ]
        assert doc["streams"][0]["last_id"] in ack.decode()

        page = get_json(node, "/streamz?offset=1&limit=1")
        assert (page["total"], [s["name"] for s in page["streams"]]) == (3, ["jobs"])
        in_db3 = get_json(node, "/streamz?db=3")
        assert [(s["db"], s["length"]) for s in in_db3["streams"]] == [(3, 1)]
        assert in_db3["captures"] == []  # (captured streams live in database 0)
        assert get_json(node, "/streamz?name=events")["total"] == 1
        assert get_json(node, "/streamz?acc=nobody")["total"] == 0
        assert status(node, "/streamz?db=16")[0] == 400
        assert status(node, "/streamz?db=x")[0] == 400

        block = get_json(node, "/varz")["streams"]
        assert (block["streams"], block["entries"], block["groups"]) == (3, 5, 2)
        assert block["bytes"] == sum(s["bytes"] for s in doc["streams"])
        assert (block["captures"], block["captured"]) == (1, 1)
        series = metrics(node)
        assert series["pubmesh_streams_streams"] == 3
        assert series["pubmesh_streams_entries"] == 5
        assert series["pubmesh_streams_groups"] == 2
        assert series["pubmesh_streams_captured"] == 1
        assert series["pubmesh_streams_log_size"] == 0

        r.delete("jobs")
        other.pexpire("jobs", 1)
        time.sleep(0.01)  # (expired, not yet swept or looked at: not counted all the same)
        trio.from_thread.run_sync(set_journal)
        after = get_json(node, "/varz")["streams"]
        assert (after["streams"], after["entries"], after["groups"]) == (1, 1, 0)
        assert (after["journal"], after["log_size"], after["fsync_lag"]) == (True, 4096, 0.25)
        series = metrics(node)
        assert (series["pubmesh_streams_log_size"], series["pubmesh_streams_fsync_lag"]) == (4096, 0.25)
        r.close()
        other.close()

    def set_journal() -> None:
        node.server.broker.keyspaces.journal = Journal()

    await trio.to_thread.run_sync(scenario)


async def test_streamz_without_streams_is_valid_and_empty(nursery: trio.Nursery) -> None:
    node = await start_monitored_node(nursery)

    def scenario() -> None:
        doc = get_json(node, "/streamz")
        assert (doc["total"], doc["streams"], doc["captures"]) == (0, [], [])
        assert get_json(node, "/varz")["streams"]["captures"] == 0
        assert "/streamz" in get_json(node, "/varz")["http_req_stats"]
        series = metrics(node)
        assert (series["pubmesh_streams_streams"], series["pubmesh_streams_captures"]) == (0, 0)

    await trio.to_thread.run_sync(scenario)


async def test_a_step_down_asked_of_a_node_without_replica_groups_is_refused(
    nursery: trio.Nursery,
) -> None:
    node = await start_monitored_node(nursery)

    def scenario() -> None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{node.http_port}/raftz/stepdown", method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=W)
        with refused.value as error:
            assert (error.code, error.read()) == (409, b"this node runs no replica groups\n")
        assert status(node, "/raftz/stepdown")[0] == 405  # (a GET changes nothing)
        assert get_json(node, "/varz")["http_req_stats"]["/raftz/stepdown"] == 2

    await trio.to_thread.run_sync(scenario)
