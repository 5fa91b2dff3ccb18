"""The system account against a real node, driven by the official nats-py client.

A user of ``$SYS`` sends nats-server's monitoring requests and gets nats-server's envelopes back;
clients of other accounts (and every client of a node without users) cannot reach it; connect and
disconnect advisories carry nats-server's event shapes. The decoding of request bodies is checked
directly too (it is sans-I/O).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from node.broker import NATS_VERSION
from node.config.load import from_mapping, load
from node.config.options import AccountConfig, Config, ConfigError, UserConfig
from node.monitoring.request_options import RequestError, decode_options
from node.monitoring.system import ENDPOINTS, REQUESTS_QUEUED
from node.run.launch import NodeHandle
from tests.support import connect, in_asyncio, start_node

pytestmark = pytest.mark.timeout(30)

W = 5.0
GO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")
USERS = (
    UserConfig(user="sys", password="pw", account="$SYS"),
    UserConfig(user="app", password="pw", account="A"),
)
WITH_USERS = Config(server_name="n1", users=USERS, accounts=(AccountConfig("A"),))


async def ask(client: Client, subject: str, body: bytes = b"") -> dict[str, Any]:
    reply = await client.request(subject, body, timeout=W)
    doc: dict[str, Any] = json.loads(reply.data)
    return doc


def check_server(info: dict[str, Any], node: NodeHandle, *, cluster: str | None = None) -> None:
    """nats-server's ``ServerInfo``, field by field and in its order."""
    keys = ["name", "host", "id", *(["cluster"] if cluster else []), "ver", "jetstream", "flags"]
    assert list(info) == [*keys, "seq", "time"]
    assert (info["name"], info["id"]) == (node.server.broker.server_name, node.server.broker.server_id)
    assert info.get("cluster") == cluster
    assert (info["ver"], info["jetstream"], info["flags"]) == (NATS_VERSION, False, 0)
    assert info["seq"] >= 1
    assert GO_TIME.fullmatch(info["time"])


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_node(nursery, WITH_USERS)


async def test_a_system_user_asks_every_endpoint(node: NodeHandle) -> None:
    server_id = node.server.broker.server_id

    async def scenario() -> dict[str, dict[str, Any]]:
        sys = await connect(node, "sys", name="probe")
        answers = {ep: await ask(sys, f"$SYS.REQ.SERVER.PING.{ep}") for ep in ENDPOINTS}
        answers["PING"] = await ask(sys, "$SYS.REQ.SERVER.PING")
        answers["direct"] = await ask(sys, f"$SYS.REQ.SERVER.{server_id}.CONNZ", b'{"auth":true}')
        await sys.close()
        return answers

    answers = await in_asyncio(scenario)
    for endpoint in (
        "VARZ",
        "CONNZ",
        "SUBSZ",
        "ROUTEZ",
        "GATEWAYZ",
        "HEALTHZ",
        "ACCOUNTZ",
        "ACCSTATZ",
        "STREAMZ",
        "RAFTZ",
    ):
        assert list(answers[endpoint]) == ["server", "data"], endpoint
        check_server(answers[endpoint]["server"], node)
    data = {endpoint: answers[endpoint]["data"] for endpoint in answers if "data" in answers[endpoint]}
    assert data["VARZ"]["server_id"] == server_id
    assert (data["VARZ"]["version"], data["VARZ"]["system_account"]) == (NATS_VERSION, "$SYS")
    assert [c["name"] for c in data["CONNZ"]["connections"]] == ["probe"]
    own = 2 * len(ENDPOINTS) + 1  # (PING, and PING.<EP> and <id>.<EP> per endpoint)
    assert data["SUBSZ"]["num_subscriptions"] == own + 1  # (the node's own, and the inbox)
    assert data["ROUTEZ"]["routes"] == []
    assert data["HEALTHZ"] == {"status": "ok", "status_code": 200}
    assert data["ACCOUNTZ"]["accounts"] == ["$G", "$SYS", "A"]
    assert [a["acc"] for a in data["ACCSTATZ"]["account_statz"]] == ["$SYS"]  # (with connections)
    assert (data["STREAMZ"]["server_id"], data["STREAMZ"]["streams"]) == (server_id, [])
    assert (data["RAFTZ"]["server_id"], data["RAFTZ"]["groups"]) == (server_id, [])
    [conn] = data["direct"]["connections"]
    assert (conn["authorized_user"], conn["account"]) == ("sys", "$SYS")
    # nats-server's ServerStatsMsg; the requests the client had published are counted (the STATSZ
    # request was its eighth, the PING its thirteenth)
    for statsz, published in ((answers["STATSZ"], 8), (answers["PING"], 13)):
        assert list(statsz) == ["server", "statsz"]
        check_server(statsz["server"], node)
        assert statsz["statsz"]["connections"] == 1
        assert statsz["statsz"]["received"] == {"msgs": published, "bytes": 0}
        assert statsz["statsz"]["subscriptions"] == data["SUBSZ"]["num_subscriptions"]
    assert answers["IDZ"] == {"name": "n1", "host": "127.0.0.1", "id": server_id}
    assert answers["PING"]["server"]["seq"] > answers["STATSZ"]["server"]["seq"]


async def test_a_statsz_request_without_a_reply_is_broadcast(node: NodeHandle) -> None:
    server_id = node.server.broker.server_id

    async def scenario() -> tuple[str, dict[str, Any]]:
        sys = await connect(node, "sys")
        sub = await sys.subscribe("$SYS.SERVER.*.STATSZ")
        await sys.publish("$SYS.REQ.SERVER.PING", b"")  # (no reply subject)
        msg = await sub.next_msg(timeout=W)
        await sys.close()
        return msg.subject, json.loads(msg.data)

    subject, statsz = await in_asyncio(scenario)
    assert subject == f"$SYS.SERVER.{server_id}.STATSZ"
    assert list(statsz) == ["server", "statsz"]


async def test_options_in_the_body_shape_the_answer(node: NodeHandle) -> None:
    async def scenario() -> list[dict[str, Any]]:
        clients = [await connect(node, "app") for _ in range(3)]
        sys = await connect(node, "sys")
        found = [
            await ask(sys, "$SYS.REQ.SERVER.PING.CONNZ", b'{"limit": 2, "sort": "cid"}'),
            await ask(sys, "$SYS.REQ.SERVER.PING.CONNZ", b'{"acc": "$SYS", "LIMIT": 5}'),
            await ask(sys, "$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account": "A"}'),
            await ask(sys, "$SYS.REQ.SERVER.PING.SUBSZ", b'{"subscriptions": true, "test": "x"}'),
            await ask(sys, "$SYS.REQ.SERVER.PING.CONNZ", b"null"),
        ]
        for client in (*clients, sys):
            await client.close()
        return found

    limited, by_account, account, subs, plain = [a["data"] for a in await in_asyncio(scenario)]
    assert (limited["limit"], limited["total"], len(limited["connections"])) == (2, 4, 2)
    assert (by_account["limit"], by_account["total"]) == (5, 1)  # (names match regardless of case)
    detail = account["account_detail"]
    assert (detail["account_name"], detail["client_connections"]) == ("A", 3)
    assert "is_system" not in detail
    assert subs["total"] == 0
    assert plain["total"] == 4


@pytest.mark.parametrize(
    ("body", "code", "description"),
    [
        (b"{", 400, "invalid JSON"),
        (b"[1, 2]", 400, "json: cannot unmarshal array into Go value of type server.ConnzEventOptions"),
        (
            b'{"limit": "5"}',
            400,
            "json: cannot unmarshal string into Go struct field ConnzEventOptions.limit of type int",
        ),
        (b'{"offset": 1.5}', 400, "cannot unmarshal number into Go struct field"),
        (b'{"sort": "nonsense"}', 500, "invalid sorting option: nonsense"),
        (b'{"state": 7}', 500, "invalid connection state: 7"),
        (b"\xff\xfe\x00", 400, "invalid JSON"),
        (b"[" * 100_000, 400, "request body larger than"),
        (b"[" * 10_000, 400, "invalid JSON"),
    ],
)
async def test_a_malformed_body_gets_an_error_envelope(
    node: NodeHandle, body: bytes, code: int, description: str
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        sys = await connect(node, "sys")
        bad = await ask(sys, "$SYS.REQ.SERVER.PING.CONNZ", body)
        after = await ask(sys, "$SYS.REQ.SERVER.PING.HEALTHZ")
        await sys.close()
        return bad, after

    bad, after = await in_asyncio(scenario)
    assert list(bad) == ["server", "error"]
    check_server(bad["server"], node)
    assert bad["error"]["code"] == code
    assert description in bad["error"]["description"]
    assert after["data"]["status"] == "ok"  # (and the service goes on)


async def test_a_burst_of_requests_loses_requests_never_memory(node: NodeHandle) -> None:
    system = node.node.system
    assert system is not None
    burst = 4 * REQUESTS_QUEUED
    stream = await trio.open_tcp_stream("127.0.0.1", node.port)
    try:
        await stream.send_all(
            b'CONNECT {"user":"sys","pass":"pw","verbose":false,"pedantic":false}\r\n'
            + b"PUB $SYS.REQ.SERVER.PING.VARZ nobody.listens 0\r\n\r\n" * burst
        )
        with trio.fail_after(W):
            while system.dropped + system.seq < burst:  # noqa: ASYNC110 (nothing announces either)
                await trio.sleep(0.01)
    finally:
        await trio.aclose_forcefully(stream)
    # Every request was either answered (one message each) or dropped, and some were dropped: the
    # queue is bounded, whatever arrives in one read.
    assert system.dropped + system.seq == burst
    assert system.dropped > 0

    async def scenario() -> dict[str, Any]:  # and the service goes on
        sys = await connect(node, "sys")
        answer = await ask(sys, "$SYS.REQ.SERVER.PING.HEALTHZ")
        await sys.close()
        return answer

    assert (await in_asyncio(scenario))["data"]["status"] == "ok"


async def test_filters_in_the_body_select_the_nodes_that_answer(node: NodeHandle) -> None:
    async def scenario() -> tuple[list[str], list[bytes]]:
        sys = await connect(node, "sys")
        selected = []
        for body in (b'{"server_name": "n"}', b'{"server_name": "n1", "exact_match": true}'):
            selected.append((await ask(sys, "$SYS.REQ.SERVER.PING.VARZ", body))["data"]["server_name"])
        silent = []
        for body in (
            b'{"server_name": "n", "exact_match": true}',
            b'{"cluster": "elsewhere"}',
            b'{"tags": ["gpu"]}',
            b'{"domain": "hub"}',
        ):
            try:
                await sys.request("$SYS.REQ.SERVER.PING.STATSZ", body, timeout=0.3)
            except NatsTimeout:
                silent.append(body)
        await sys.close()
        return selected, silent

    selected, silent = await in_asyncio(scenario)
    assert selected == ["n1", "n1"]
    assert len(silent) == 4


async def test_other_accounts_never_reach_the_system_account(nursery: trio.Nursery) -> None:
    with_users = await start_node(nursery, WITH_USERS)
    without_users = await start_node(nursery)

    async def scenario() -> list[str]:
        outcomes = []
        for client in (await connect(with_users, "app"), await connect(without_users)):
            try:
                await client.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=W)
                outcomes.append("answered")
            except NoRespondersError:
                outcomes.append("no responders")
            await client.close()
        return outcomes

    assert await in_asyncio(scenario) == ["no responders", "no responders"]


async def test_no_system_account_runs_none(nursery: trio.Nursery) -> None:
    config = WITH_USERS.evolve(users=(UserConfig(user="app", password="pw", account="A"),))
    node = await start_node(nursery, config.evolve(no_system_account=True))
    assert node.node.system is None
    assert "$SYS" not in node.server.broker.accounts


async def test_connect_and_disconnect_advisories(node: NodeHandle) -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        got = asyncio.Event()

        async def take(msg: Any) -> None:
            events.append((msg.subject, json.loads(msg.data)))
            if len(events) == 2:
                got.set()

        sys = await connect(node, "sys")
        await sys.subscribe("$SYS.ACCOUNT.*.*", cb=take)
        await sys.flush()
        app = await connect(node, "app", name="worker")
        await app.publish("jobs", b"12345")
        await app.publish("jobs", b"678")
        await app.flush()
        await app.close()
        await asyncio.wait_for(got.wait(), W)
        await sys.close()
        return events

    (connect_subject, connected), (disconnect_subject, gone) = await in_asyncio(scenario)
    assert (connect_subject, disconnect_subject) == (
        "$SYS.ACCOUNT.A.CONNECT",
        "$SYS.ACCOUNT.A.DISCONNECT",
    )
    assert list(connected) == ["type", "id", "timestamp", "server", "client"]
    assert list(gone) == ["type", "id", "timestamp", "server", "client", "sent", "received", "reason"]
    assert connected["type"] == "io.nats.server.advisory.v1.client_connect"
    assert gone["type"] == "io.nats.server.advisory.v1.client_disconnect"
    assert re.fullmatch(r"[0-9A-Za-z]{22}", connected["id"])
    assert connected["id"] != gone["id"]
    assert GO_TIME.fullmatch(connected["timestamp"])
    check_server(connected["server"], node)
    client = connected["client"]
    assert (client["acc"], client["user"], client["name"], client["lang"]) == (
        "A",
        "app",
        "worker",
        "python3",
    )
    assert (client["kind"], client["client_type"], client["name_tag"]) == ("Client", "nats", "A")
    assert client["id"] == gone["client"]["id"]
    assert "stop" not in client
    assert GO_TIME.fullmatch(gone["client"]["stop"])
    assert gone["sent"] == {"msgs": 2, "bytes": 8}  # (what the client sent)
    assert gone["received"] == {"msgs": 0, "bytes": 0}
    assert gone["reason"] == "Client Closed"


async def test_advisories_cost_nothing_without_interest(node: NodeHandle) -> None:
    system = node.node.system
    assert system is not None

    async def scenario() -> None:
        app = await connect(node, "app")
        await app.close()

    await in_asyncio(scenario)
    await trio.testing.wait_all_tasks_blocked()
    assert system.seq == 0  # (nothing was built or sent)


# -- configuration ---------------------------------------------------------------------------------


def test_system_account_options() -> None:
    config = from_mapping(
        {
            "system_account": "SYS",
            "accounts": {"SYS": {"users": [{"user": "admin", "password": "x"}]}, "A": {}},
        }
    )
    assert config.system_account == "SYS"
    assert from_mapping({}).system_account == "$SYS"
    assert from_mapping({"system": "$SYS"}).system_account == "$SYS"
    assert from_mapping({"no_sys_acc": True}).no_system_account
    with pytest.raises(ConfigError, match="system_account: 'NOPE' is not an account of accounts"):
        from_mapping({"system_account": "NOPE"})
    with pytest.raises(ConfigError, match="the global account cannot be the system account"):
        from_mapping({"system_account": "$G"})


def test_system_account_in_nats_server_format(tmp_path: Path) -> None:
    conf = tmp_path / "node.conf"
    conf.write_text(
        "accounts: {\n"
        "  SYS: { users: [ {user: admin, password: changeit} ] }\n"
        "  APP: { users: [ {user: app, password: pw} ] }\n"
        "}\n"
        'system_account: "SYS"\n'
    )
    config = load(conf)
    assert config.system_account == "SYS"
    assert [(u.user, u.account) for u in config.users] == [("admin", "SYS"), ("app", "APP")]
    conf.write_text('system_account: "$SYS"\n')
    assert load(conf).system_account == "$SYS"


# -- decoding request bodies -----------------------------------------------------------------------


def test_bodies_decode_as_go_decodes_them() -> None:
    assert decode_options("CONNZ", b"") == {}
    assert decode_options("CONNZ", b"null") == {}
    assert decode_options("CONNZ", b'{"limit": 5, "Sort": "rtt", "nope": [1], "acc": null}') == {
        "limit": 5,
        "sort": "rtt",
    }
    assert decode_options("STATSZ", b'{"server_name": "a", "tags": ["x"]}') == {
        "server_name": "a",
        "tags": ["x"],
    }
    for body in (b"NaN", b'{"limit": Infinity}', b'{"cid": -1}', b'{"limit": 9223372036854775808}'):
        with pytest.raises(RequestError) as caught:
            decode_options("CONNZ", body)
        assert caught.value.code == 400


@given(st.sampled_from([e for e in ENDPOINTS if e != "IDZ"]), st.binary(max_size=64))
def test_any_body_decodes_or_is_a_400(endpoint: str, body: bytes) -> None:
    code = 0
    try:
        decode_options(endpoint, body)
    except RequestError as exc:
        code = exc.code
    assert code in (0, 400)
