"""Accounts sharing subjects through exports and imports: the configuration, and one live node driven
by nats-py (routes and gateways: test_exports_imports_links.py)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import nats
import pytest
import trio
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from node.accounts.imports import MAX_RESPONSES, Responses, install_imports
from node.config import load as cfg
from node.config.options import (
    AccountConfig,
    Config,
    ConfigError,
    ExportConfig,
    ImportConfig,
    UserConfig,
)
from node.run.launch import NodeHandle
from routing import Message, Subscription
from routing.subjectmap import SubjectMap, is_subset
from tests.support import W, connect, eventually, in_asyncio, settled, start_node, until

pytestmark = pytest.mark.timeout(60)

SHARING = """
accounts {
  A {
    users: [{user: a, password: pw}]
    exports: [
      {stream: "public.>"}
      {stream: "private.>", accounts: [B]}
      {service: "time.now"}
      {service: "echo.*", accounts: [B]}
    ]
  }
  B {
    users: [{user: b, password: pw}]
    imports: [
      {stream: {account: A, subject: "public.>"}, prefix: "from_a"}
      {stream: {account: A, subject: "private.>"}}
      {service: {account: A, subject: "time.now"}, to: "clock"}
      {service: {account: A, subject: "echo.*"}, to: "b.echo.*"}
    ]
  }
  C {
    users: [{user: c, password: pw}]
    imports: [{stream: {account: A, subject: "public.x"}, to: "news"}]
  }
}
"""


def load(tmp_path: Path, text: str, name: str = "node.conf") -> Config:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return cfg.load(path)


def test_exports_and_imports_are_read_from_nats_server_configuration(tmp_path: Path) -> None:
    config = load(tmp_path, SHARING)
    a, b, c = config.accounts
    assert a.exports == (
        ExportConfig("public.>"),
        ExportConfig("private.>", accounts=("B",)),
        ExportConfig("time.now", service=True),
        ExportConfig("echo.*", service=True, accounts=("B",)),
    )
    assert b.imports == (
        ImportConfig("A", "public.>", "from_a.public.>"),
        ImportConfig("A", "private.>", "private.>"),
        ImportConfig("A", "time.now", "clock", service=True),
        ImportConfig("A", "echo.*", "b.echo.*", service=True),
    )
    assert c.imports == (ImportConfig("A", "public.x", "news"),)


def test_the_same_from_toml(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        [accounts.A]
        exports = [{stream = "s.>"}, {service = "q", accounts = ["B"]}]
        [accounts.B]
        imports = [{stream = {account = "A", subject = "s.>"}, prefix = "p"},
                   {service = {account = "A", subject = "q"}}]
        """,
        "node.toml",
    )
    assert config.accounts[1].imports == (
        ImportConfig("A", "s.>", "p.s.>"),
        ImportConfig("A", "q", "q", service=True),
    )


@pytest.mark.parametrize(
    ("imports", "error"),
    [
        ('{stream: {account: A, subject: "private.>"}}', "stream import not authorized"),
        ('{stream: {account: A, subject: "other"}}', "stream import not authorized"),
        ('{service: {account: A, subject: "public.x"}}', "service import not authorized"),
        ('{stream: {account: A, subject: "time.now"}}', "stream import not authorized"),
        ('{stream: {account: Z, subject: "public.x"}}', "no such account"),
        ('{stream: {account: C, subject: "public.x"}}', "cannot import from itself"),
        ('{stream: {account: A, subject: "public.>"}, prefix: "p.*"}', "must not contain wildcards"),
        ('{stream: {account: A, subject: "public.*"}, to: "x.>"}', "must have the wildcards"),
        ('{service: {account: A, subject: "time.now"}, prefix: "p"}', "prefix is for stream"),
        ("{stream: {account: A}}", "invalid subject"),
        ('{stream: "public.x"}', "expected a table"),
        ('{queue: {account: A, subject: "public.x"}}', "unknown option 'queue'"),
    ],
)
def test_bad_imports_are_configuration_errors(tmp_path: Path, imports: str, error: str) -> None:
    text = f"""
    accounts {{
      A {{ exports: [{{stream: "public.>"}}, {{stream: "private.>", accounts: [B]}}
                    {{service: "time.now"}}] }}
      C {{ imports: [{imports}] }}
    }}
    """
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert error in str(caught.value)


def test_no_auth_user_must_be_a_configured_user(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no_auth_user: 'ghost' is not a user"):
        load(tmp_path, "no_auth_user: ghost\naccounts { A { users: [{user: a, password: p}] } }\n")


def test_subject_maps() -> None:
    prefixed = SubjectMap("public.>", "from_a.public.>")
    assert prefixed.forward(b"public.x.y") == b"from_a.public.x.y"
    assert prefixed.backward("from_a.public.*.y") == "public.*.y"
    assert prefixed.backward("from_a.public.>") == "public.>"
    renamed = SubjectMap("echo.*.v1", "b.*.echo")
    assert renamed.forward(b"echo.hi.v1") == b"b.hi.echo"
    assert renamed.backward("b.*.echo") == "echo.*.v1"
    assert SubjectMap("a", "b").forward(b"a") == b"b"
    with pytest.raises(ValueError, match="wildcards"):
        SubjectMap("a.*", "b.>")
    assert all(map(is_subset, ["a.b", "a.*.c", "a.>"], ["a.*", "a.>", "a.>"]))
    assert not any(map(is_subset, ["a.>", "a.*", "a"], ["a.*", "a.b", "a.>"]))


def test_response_mappings_are_bounded_and_expire() -> None:
    config = Config(
        accounts=(
            AccountConfig("A", exports=(ExportConfig("q", service=True),)),
            AccountConfig("B", imports=(ImportConfig("A", "q", "q", service=True),)),
        )
    )
    from node.broker import Broker

    now = [0.0]
    broker = Broker(config)
    install_imports(broker)
    responses = Responses(broker, "t", clock=lambda: now[0])
    a, b = broker.account("A"), broker.account("B")
    responses.listen(a)
    taken: list[Message] = []

    class Taker:
        def deliver(self, sub: Subscription, msg: Message) -> bool:
            taken.append(msg)
            return True

    broker.subscribe(a, Subscription("q", owner=Taker()))
    for i in range(MAX_RESPONSES + 10):
        assert responses.request(b, a, Message(b"q", b"_INBOX.%d" % i, None, b""))
    assert len(responses) == MAX_RESPONSES  # the oldest were dropped
    now[0] += 1000.0
    responses.request(b, a, Message(b"q", b"_INBOX.late", None, b""))
    assert len(responses) == 1  # the expired went with the next request
    # A response to a forgotten request goes nowhere; to a remembered one, once.
    broker.subscribe(b, Subscription("_INBOX.>", owner=Taker()))
    first_reply = taken[0].reply
    assert first_reply is not None
    assert not broker.publish(a, Message(first_reply, None, None, b"stale"))
    last_reply = taken[-1].reply
    assert last_reply is not None
    assert broker.publish(a, Message(last_reply, None, None, b"answer"))
    assert not broker.publish(a, Message(last_reply, None, None, b"again"))
    assert taken[-1] == Message(b"_INBOX.late", None, None, b"answer")
    assert len(responses) == 0


class Seen(list[str]):
    """What a subscription callback got: subject and payload."""

    async def take(self, msg: Msg) -> None:
        self.append(f"{msg.subject} {msg.data.decode()}")


async def sharing_node(nursery: trio.Nursery, tmp_path: Path) -> NodeHandle:
    return await start_node(nursery, load(tmp_path, SHARING))


async def test_stream_imports_public_restricted_and_prefixed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    node = await sharing_node(nursery, tmp_path)

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        pub = await connect(node, user="a", password="pw")
        b = await connect(node, user="b", password="pw")
        c = await connect(node, user="c", password="pw")
        got_b, got_c, got_wide = Seen(), Seen(), Seen()
        await b.subscribe("from_a.public.>", cb=got_b.take)
        await b.subscribe("private.*", cb=got_b.take)
        await b.subscribe("public.>", cb=got_b.take)  # not imported unprefixed
        await b.subscribe(">", cb=got_wide.take)  # straddles both imports
        await c.subscribe("news", cb=got_c.take)
        await c.subscribe("private.>", cb=got_c.take)  # C may not import it
        for client in (b, c):
            await client.flush()
        for subject in ("public.x", "public.y.z", "private.k", "time.now", "other"):
            await pub.publish(subject, subject.encode())
        await pub.flush()
        await settled(lambda: len(got_b) >= 3 and len(got_c) >= 1 and len(got_wide) >= 3)
        await b.publish("public.x", b"in B")  # B's own subject space is still its own
        await b.flush()
        await settled(lambda: len(got_b) >= 4)
        for client in (pub, b, c):
            await client.flush()
            await client.close()
        return sorted(got_b), got_c, sorted(got_wide)

    got_b, got_c, got_wide = await in_asyncio(scenario)
    assert got_b == [
        "from_a.public.x public.x",
        "from_a.public.y.z public.y.z",
        "private.k private.k",
        "public.x in B",
    ]
    assert got_c == ["news public.x"]
    assert got_wide == [
        "from_a.public.x public.x",
        "from_a.public.y.z public.y.z",
        "private.k private.k",
        "public.x in B",
    ]
    # Every shadow subscription went with the connections that caused them (what stays in A is the
    # node's listener for responses to service imports).
    a = node.server.broker.account("A")
    await until(lambda: a.sublist.stats().num_subscriptions == 1)
    assert [sub.subject for sub in a.sublist] == [f"_R_.{node.server.broker.server_id[1:13]}.>"]


async def test_service_imports_answer_across_accounts(nursery: trio.Nursery, tmp_path: Path) -> None:
    node = await sharing_node(nursery, tmp_path)

    async def scenario() -> tuple[list[bytes], list[str], bool]:
        responder = await connect(node, user="a", password="pw")
        requester = await connect(node, user="b", password="pw")
        seen: list[str] = []

        async def answer(msg: Msg) -> None:
            seen.append(f"{msg.subject} {msg.reply[:4]}")
            await msg.respond(b"A answers " + msg.data)

        await responder.subscribe("time.now", cb=answer)
        await responder.subscribe("echo.*", cb=answer)
        await responder.flush()
        replies = [(await requester.request("clock", b"%d" % i, timeout=W)).data for i in range(20)]
        replies.append((await requester.request("b.echo.hi", b"echo", timeout=W)).data)
        # A service nobody answers: the requester hears so at once.
        await responder.close()
        a = node.server.broker.account("A")
        await eventually(lambda: not a.match(b"time.now")[0].plain)
        try:
            await requester.request("clock", b"anyone?", timeout=W)
            no_responders = False
        except NoRespondersError:
            no_responders = True
        await requester.close()
        return replies, seen, no_responders

    replies, seen, no_responders = await in_asyncio(scenario)
    assert replies == [b"A answers %d" % i for i in range(20)] + [b"A answers echo"]
    assert (seen[0], seen[-1]) == ("time.now _R_.", "echo.hi _R_.")
    assert no_responders


async def test_requesting_a_service_in_the_exporting_account_needs_no_import(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """An account that imports nothing publishes as before: nothing of B's import reaches A's own
    requests, and a B client cannot subscribe its way into A's replies."""
    node = await sharing_node(nursery, tmp_path)

    async def scenario() -> tuple[bytes, list[bytes]]:
        a = await nats.connect(node.url, user="a", password="pw", allow_reconnect=False)
        b = await nats.connect(node.url, user="b", password="pw", allow_reconnect=False)
        spied: list[bytes] = []

        async def spy(msg: Msg) -> None:
            spied.append(msg.data)

        async def answer(msg: Msg) -> None:
            await msg.respond(b"tick")

        await b.subscribe("_R_.>", cb=spy)
        await b.flush()
        await a.subscribe("time.now", cb=answer)
        got = await asyncio.wait_for(a.request("time.now", b"", timeout=W), W)
        await b.request("clock", b"", timeout=W)
        await b.flush()
        for client in (a, b):
            await client.close()
        return got.data, spied

    data, spied = await in_asyncio(scenario)
    assert data == b"tick"
    assert spied == []


def test_users_of_accounts_stay_valid_with_sharing(tmp_path: Path) -> None:
    config = load(tmp_path, SHARING)
    assert {u.user: u.account for u in config.users} == {"a": "A", "b": "B", "c": "C"}
    assert UserConfig(user="a", password="pw", account="A") in config.users


async def test_queue_groups_of_the_importer_share_imported_messages(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    node = await sharing_node(nursery, tmp_path)

    async def scenario() -> tuple[list[str], list[str]]:
        pub = await connect(node, user="a", password="pw")
        b = await connect(node, user="b", password="pw")
        first, second = Seen(), Seen()
        await b.subscribe("from_a.public.*", queue="workers", cb=first.take)
        await b.subscribe("from_a.public.*", queue="workers", cb=second.take)
        await b.flush()
        for i in range(100):
            await pub.publish("public.job", b"%d" % i)
        await pub.flush()
        await settled(lambda: len(first) + len(second) >= 100)
        await b.flush()  # anything more (a duplicate) would have arrived before the PONG
        for client in (pub, b):
            await client.close()
        return first, second

    first, second = await in_asyncio(scenario)
    assert sorted(first + second, key=lambda s: int(s.split()[1])) == [
        f"from_a.public.job {i}" for i in range(100)
    ]
    assert len(first) > 0 < len(second)  # (random picks: both got some of 100)


def test_service_imports_chain_and_loops_end() -> None:
    """C's request passes B's import from A (an import of an import); two accounts importing the
    same service from each other pass a request back and forth a bounded number of times."""
    from node.broker import Broker

    def service(account: str, to: str = "q") -> ImportConfig:
        return ImportConfig(account, "q", to, service=True)

    exports = (ExportConfig("q", service=True),)
    config = Config(
        accounts=(
            AccountConfig("A", exports=exports, imports=(service("B"),)),
            AccountConfig("B", exports=exports, imports=(service("A"),)),
            AccountConfig("C", imports=(service("B", to="ask"),)),
        )
    )
    broker = Broker(config)
    install_imports(broker)
    seen: list[tuple[str, Message]] = []

    class Responder:
        def __init__(self, name: str) -> None:
            self.name = name

        def deliver(self, sub: Subscription, msg: Message) -> bool:
            seen.append((self.name, msg))
            return True

    a = broker.account("A")
    broker.subscribe(a, Subscription("q", owner=Responder("A")))
    assert broker.publish(broker.account("C"), Message(b"ask", b"_INBOX.c", None, b"?"))
    assert [name for name, _ in seen] == ["A", "A"]  # through B to A, and round the loop once more
    first_reply = seen[0][1].reply
    assert first_reply is not None
    inbox: list[Message] = []

    class Requester:
        def deliver(self, sub: Subscription, msg: Message) -> bool:
            inbox.append(msg)
            return True

    broker.subscribe(broker.account("C"), Subscription("_INBOX.c", owner=Requester()))
    assert broker.publish(a, Message(first_reply, None, None, b"!"))
    assert inbox == [Message(b"_INBOX.c", None, None, b"!")]
