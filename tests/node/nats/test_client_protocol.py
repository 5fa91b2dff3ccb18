"""What a client sees, byte for byte: connections on one broker, no I/O, checked against nats-server.

Each test drives ``ClientConnection``s with the bytes a client would send and asserts exactly what
goes back and whether (and why) the connection ends. Deliveries between connections go through the
broker, so publishers and subscribers here talk to each other as they would over sockets.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from node.broker import Broker
from node.config.options import AccountConfig, Config, Permissions, SubjectRule, UserConfig
from node.connection import Reason
from node.nats.client import ClientConnection
from node.nats.protocol import writer as w

QUIET = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
HEADERS = b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n'
OK = b"+OK\r\n"


def err(text: str) -> bytes:
    return b"-ERR '" + text.encode() + b"'\r\n"


AUTH_VIOLATION = err("Authorization Violation")


def make_broker(config: Config | None = None) -> Broker:
    return Broker(config or Config(), rng=random.Random(7))


def connect(broker: Broker, data: bytes = b"") -> ClientConnection:
    """A connection as the server makes one (registered, greeted), fed ``data``; output cleared."""
    conn = ClientConnection(broker, broker.next_cid(), host="127.0.0.1", port=50000)
    broker.add_client(conn)
    conn.greeting()
    out(conn)
    if data:
        conn.receive_data(data)
    return conn


def out(conn: ClientConnection) -> bytes:
    """What the connection sent since last asked (as the writer would, confirmed written)."""
    data = conn.take_output()
    conn.output_sent(data, len(data))
    return bytes(data)


def pub(subject: bytes, payload: bytes = b"hi", reply: bytes | None = None) -> bytes:
    return w.pub(subject, payload, reply)


def user(name: str, account: str = "$G", permissions: Permissions | None = None) -> UserConfig:
    return UserConfig(user=name, password=f"{name}-pw", account=account, permissions=permissions)


def login(name: str, **options: Any) -> bytes:
    return w.connect({"user": name, "pass": f"{name}-pw", "verbose": False, **options})


def one_by_one(data: bytes) -> list[bytes]:
    """MSGs one by one, sorted (the order across one connection's subscriptions is the trie's)."""
    return sorted(b"MSG " + part for part in data.split(b"MSG ")[1:])


def info_of(conn: ClientConnection) -> dict[str, Any]:
    conn.greeting()
    line = out(conn)
    assert line.startswith(b"INFO {")
    assert line.endswith(b"} \r\n")
    fields: dict[str, Any] = json.loads(line[5:-3])
    return fields


# -- before CONNECT, and CONNECT -------------------------------------------------------------------


def test_info_describes_the_node_and_the_connection() -> None:
    broker = make_broker(Config(max_payload=1000, server_name="n1", port=4333))
    conn = connect(broker)
    fields = info_of(conn)
    assert {k: fields[k] for k in ("server_name", "proto", "headers", "max_payload", "port")} == {
        "server_name": "n1",
        "proto": 1,
        "headers": True,
        "max_payload": 1000,
        "port": 4333,
    }
    assert (fields["client_id"], fields["client_ip"]) == (conn.cid, "127.0.0.1")
    assert "auth_required" not in fields
    assert fields["server_id"] == broker.server_id
    assert len(broker.server_id) == 56


def test_defaults_before_connect_are_verbose_pedantic_and_echo() -> None:
    conn = connect(make_broker(), b"SUB foo 1\r\nPUB foo 2\r\nhi\r\n")
    assert out(conn) == b"+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n"
    conn.receive_data(b"SUB foo.* 2\r\nPUB foo.* 1\r\nx\r\n")  # pedantic: still delivered
    assert out(conn) == OK + err("Invalid Publish Subject") + OK + b"MSG foo.* 2 1\r\nx\r\n"
    conn.receive_data(b"PING\r\nPONG\r\n")  # no +OK for these
    assert out(conn) == b"PONG\r\n"
    assert conn.closing is None


def test_headers_are_off_before_connect() -> None:
    conn = connect(make_broker(), b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n")
    assert out(conn) == b""
    assert conn.closing == Reason.PROTOCOL_VIOLATION


def test_connect_overlays_the_options_in_force() -> None:
    broker = make_broker()
    conn = connect(broker, b"CONNECT {}\r\n")
    assert out(conn) == OK  # fields left out keep their defaults: verbose
    conn.receive_data(b'CONNECT {"verbose":false}\r\nPUB foo.* 1\r\nx\r\n')
    assert out(conn) == err("Invalid Publish Subject")  # pedantic is still on
    conn.receive_data(b'CONNECT {"pedantic":false}\r\nPUB foo.* 1\r\nx\r\n')
    assert out(conn) == b""  # and verbose is still off
    conn.receive_data(b'CONNECT {"verbose":true}\r\n')
    assert out(conn) == OK
    assert (conn.verbose, conn.pedantic, conn.echo, conn.headers) == (True, False, True, False)


def test_client_may_send_info_and_ok_but_not_err() -> None:
    conn = connect(make_broker(), QUIET + b'INFO {"x":1}\r\n+OK\r\nPING\r\n')
    assert (out(conn), conn.closing) == (b"PONG\r\n", None)
    conn.receive_data(b"-ERR 'bye'\r\nPING\r\n")
    assert (out(conn), conn.closing) == (b"", Reason.PARSE_ERROR)


@pytest.mark.parametrize("protocol", [2, -1])
def test_invalid_client_protocol(protocol: object) -> None:
    conn = connect(make_broker(), w.connect({"protocol": protocol}))
    assert (out(conn), conn.closing) == (err("invalid client protocol"), Reason.BAD_CLIENT_PROTOCOL)


@pytest.mark.parametrize("protocol", [0, 1])
def test_valid_client_protocols(protocol: int) -> None:
    conn = connect(make_broker(), w.connect({"protocol": protocol}))
    assert (out(conn), conn.closing) == (OK, None)


@pytest.mark.parametrize(
    "options",
    [{"verbose": "yes"}, {"user": 5}, {"echo": 1}, {"protocol": "1"}, {"headers": []}, {"name": {}}],
)
def test_a_connect_field_of_the_wrong_type_closes_without_an_error(options: dict[str, Any]) -> None:
    conn = connect(make_broker(), w.connect(options) + b"PING\r\n")
    assert (out(conn), conn.closing) == (b"", Reason.PROTOCOL_VIOLATION)


def test_null_in_connect_leaves_an_option_as_it_was() -> None:
    conn = connect(make_broker(), b'CONNECT {"verbose":null,"pedantic":false}\r\nSUB a 1\r\n')
    assert (out(conn), conn.verbose, conn.pedantic) == (OK + OK, True, False)


def test_informational_connect_strings_are_made_valid_unicode() -> None:
    conn = connect(make_broker(), b'CONNECT {"verbose":false,"name":"a\\ud800","lang":"\xffpy"}\r\n')
    assert (conn.closing, conn.name, conn.options["lang"]) == (None, "a\ufffd", "\ufffdpy")


def test_no_responders_requires_headers() -> None:
    conn = connect(make_broker(), b'CONNECT {"no_responders":true}\r\nPING\r\n')
    assert out(conn) == err("no responders requires headers support")
    assert conn.closing == Reason.NO_RESPONDERS_REQUIRES_HEADERS
    conn = connect(make_broker(), b'CONNECT {"no_responders":true,"headers":true}\r\n')
    assert (out(conn), conn.closing) == (OK, None)


# -- errors that close the connection --------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "sent", "reason"),
    [
        (b"ZZZ\r\n", err("Unknown Protocol Operation"), Reason.PROTOCOL_VIOLATION),
        (b"\r\n", err("Unknown Protocol Operation"), Reason.PROTOCOL_VIOLATION),
        (b"MSG foo 1 2\r\nhi\r\n", err("Unknown Protocol Operation"), Reason.PROTOCOL_VIOLATION),
        (b"PUB foo 2\r\nhiX\r\n", err("Unknown Protocol Operation"), Reason.PROTOCOL_VIOLATION),
        (b"PUB foo\r\n", b"", Reason.PROTOCOL_VIOLATION),
        (b"PUB foo 0000000002\r\nhi\r\n", b"", Reason.PROTOCOL_VIOLATION),
        (b"SUB foo\r\n", b"", Reason.PROTOCOL_VIOLATION),
        (b"UNSUB 1 2 3\r\n", b"", Reason.PROTOCOL_VIOLATION),
        (b"CONNECT {bad\r\n", b"", Reason.PROTOCOL_VIOLATION),
        (
            b"SUB " + b"x" * 4095 + b" 1\r\n",
            err("maximum control line exceeded"),
            Reason.MAX_CONTROL_LINE,
        ),
        (b"SUB " + b"x" * 4097, err("maximum control line exceeded"), Reason.MAX_CONTROL_LINE),
        (b"PUB foo 1048577\r\n", err("Maximum Payload Violation"), Reason.MAX_PAYLOAD),
    ],
)
def test_errors_that_close(data: bytes, sent: bytes, reason: str) -> None:
    conn = connect(make_broker(), QUIET + data)
    assert (out(conn), conn.closing) == (sent, reason)
    conn.receive_data(b"PING\r\n")  # nothing more is read
    assert out(conn) == b""


def test_operations_before_an_error_take_effect() -> None:
    conn = connect(make_broker(), b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nZZZ\r\nPING\r\n")
    assert out(conn) == b"+OK\r\n+OK\r\nMSG foo 1 2\r\nhi\r\n" + err("Unknown Protocol Operation")


def test_max_payload() -> None:
    broker = make_broker(Config(max_payload=16))
    sub = connect(broker, QUIET + b"SUB foo 1\r\n")
    conn = connect(broker, QUIET + pub(b"foo", b"x" * 16))
    assert out(sub) == b"MSG foo 1 16\r\n" + b"x" * 16 + b"\r\n"
    conn.receive_data(b"PUB foo 17\r\n")  # refused before the payload is sent
    assert (out(conn), conn.closing) == (err("Maximum Payload Violation"), Reason.MAX_PAYLOAD)
    conn = connect(broker, HEADERS + b"HPUB foo 12 17\r\n")
    assert (out(conn), conn.closing) == (err("Maximum Payload Violation"), Reason.MAX_PAYLOAD)


# -- authentication --------------------------------------------------------------------------------

ALICE = user("alice")


def auth_broker(**changes: Any) -> Broker:
    return make_broker(Config(users=(ALICE,), **changes))


def test_info_says_when_auth_is_required() -> None:
    assert info_of(connect(auth_broker()))["auth_required"] is True
    assert "auth_required" not in info_of(connect(auth_broker(no_auth_user="alice")))


@pytest.mark.parametrize(
    "data",
    [
        b"PING\r\n",
        b"SUB foo 1\r\n",
        b"PUB foo 2\r\nhi\r\n",
        b"HPUB foo 0 0\r\n\r\n",
        b"UNSUB 1\r\n",
        b"+OK\r\n",
        b'INFO {"a":1}\r\n',
        b"ZZZ\r\n",
        b"\r\n",
        b"PUB foo",  # decided on the first byte, not at the line end
        b"P",
        b"PUB foo 9999999999\r\n",
    ],
)
def test_anything_but_connect_first_is_an_authorization_violation(data: bytes) -> None:
    conn = connect(auth_broker(), data)
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"user": "alice"},
        {"user": "alice", "pass": "wrong"},
        {"user": "bob", "pass": "alice-pw"},
        {"user": "alice", "pass": "alice-pw", "account": "A"},
        {"user": "alice", "pass": "alice-pw", "new_account": True},
        {"auth_token": "alice-pw"},
    ],
)
def test_wrong_credentials(options: dict[str, Any]) -> None:
    conn = connect(auth_broker(), w.connect(options) + b"PING\r\n")
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


def test_right_credentials() -> None:
    conn = connect(auth_broker(), w.connect({"user": "alice", "pass": "alice-pw"}) + b"PING\r\n")
    assert (out(conn), conn.closing) == (b"+OK\r\nPONG\r\n", None)
    conn = connect(auth_broker(), b"C")  # a CONNECT may arrive in pieces
    conn.receive_data(login("alice")[1:] + b"PING\r\n")
    assert (out(conn), conn.closing) == (b"PONG\r\n", None)


def test_a_repeated_connect_authenticates_again() -> None:
    conn = connect(auth_broker(), login("alice") + b'CONNECT {"verbose":true}\r\n')
    assert out(conn) == OK  # the credentials sent before still count
    conn.receive_data(b'CONNECT {"pass":"wrong"}\r\nPING\r\n')
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


@pytest.mark.parametrize(
    "connect_line",
    [
        b'CONNECT {"user":"alice","pass":"\\ud800"}\r\n',  # a lone surrogate
        b'CONNECT {"user":"alice","pass":"alice-pw\\udc00"}\r\n',
        b'CONNECT {"user":"alice","pass":"alice-pw\xff"}\r\n',  # a byte that is not UTF-8
        b'CONNECT {"user":"\\ud800alice","pass":"alice-pw"}\r\n',
        b'CONNECT {"auth_token":"\\ud800"}\r\n',
    ],
)
def test_credentials_that_are_not_valid_unicode_fail_authentication(connect_line: bytes) -> None:
    conn = connect(auth_broker(), connect_line + b"PING\r\n")
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)
    conn = connect(make_broker(Config(users=(UserConfig(token="s3cr3t"),))), connect_line)
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


def test_token_auth() -> None:
    broker = make_broker(Config(users=(UserConfig(token="s3cr3t"),)))
    conn = connect(broker, b'CONNECT {"auth_token":"s3cr3t"}\r\nPING\r\n')
    assert (out(conn), conn.closing) == (b"+OK\r\nPONG\r\n", None)
    conn = connect(broker, b'CONNECT {"auth_token":"s3cr3"}\r\n')
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


def test_no_auth_user_signs_in_clients_that_skip_connect() -> None:
    broker = make_broker(
        Config(
            users=(ALICE, user("bob", permissions=Permissions(publish=SubjectRule(deny=("foo",))))),
            no_auth_user="bob",
        )
    )
    conn = connect(broker, b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nPUB bar 2\r\nhi\r\n")
    assert out(conn) == OK + err('Permissions Violation for Publish to "foo"') + OK
    assert conn.closing is None
    conn = connect(broker, b'CONNECT {"verbose":false}\r\nPUB foo 2\r\nhi\r\n')  # no credentials
    assert out(conn) == err('Permissions Violation for Publish to "foo"')
    conn = connect(broker, login("alice") + b"PUB foo 2\r\nhi\r\nPING\r\n")
    assert out(conn) == b"PONG\r\n"
    conn = connect(broker, w.connect({"user": "alice", "pass": "bob-pw"}))
    assert (out(conn), conn.closing) == (AUTH_VIOLATION, Reason.AUTH_VIOLATION)


def test_auth_timeout() -> None:
    conn = connect(auth_broker())
    conn.auth_expired()
    assert (out(conn), conn.closing) == (err("Authentication Timeout"), Reason.AUTH_TIMEOUT)
    conn = connect(auth_broker(), login("alice")[:10])  # a CONNECT still on its way
    conn.auth_expired()
    assert (out(conn), conn.closing) == (err("Authentication Timeout"), Reason.AUTH_TIMEOUT)


def test_auth_timer_is_disarmed_by_connect() -> None:
    conn = connect(auth_broker(), login("alice"))
    conn.auth_expired()
    assert (out(conn), conn.closing) == (b"", None)


def test_no_auth_timer_without_users() -> None:
    conn = connect(make_broker())
    assert conn.awaiting_connect is False
    conn.auth_expired()
    assert (out(conn), conn.closing) == (b"", None)


def test_no_auth_user_must_still_say_something_in_time() -> None:
    """Credentials are required (the timer runs) until the client's first operation."""
    conn = connect(auth_broker(no_auth_user="alice"))
    assert conn.awaiting_connect is True
    conn.auth_expired()
    assert (out(conn), conn.closing) == (err("Authentication Timeout"), Reason.AUTH_TIMEOUT)
    conn = connect(auth_broker(no_auth_user="alice"), b"PING\r\n")
    conn.auth_expired()
    assert (out(conn), conn.closing) == (b"PONG\r\n", None)


# -- subscriptions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("subject", [b"foo..bar", b".foo", b"foo.", b"foo.>.bar", b">.foo"])
def test_invalid_subject_keeps_the_connection(subject: bytes) -> None:
    broker = make_broker()
    conn = connect(broker, w.sub(subject, b"1") + b"SUB foo 2\r\n")
    assert (out(conn), conn.closing) == (err("Invalid Subject") + OK, None)
    assert list(conn.subs) == [b"2"]
    connect(broker, QUIET + pub(b"foo"))
    assert out(conn) == b"MSG foo 2 2\r\nhi\r\n"


@pytest.mark.parametrize(
    "sub", [b"SUB a.\xff 1\r\n", b"SUB \xc3 1\r\n", b"SUB a \xed\xa0\x80 1\r\n", b"SUB a q\x80 1\r\n"]
)
def test_a_subject_or_queue_that_is_not_utf8_is_invalid(sub: bytes) -> None:
    """Subscriptions become text (tries, links, monitoring): strictly decoded, or refused."""
    broker = make_broker()
    conn = connect(broker, sub + b"PING\r\n")
    assert (out(conn), conn.closing, conn.subs) == (err("Invalid Subject") + b"PONG\r\n", None, {})
    assert list(broker.subscriptions()) == []


def test_valid_utf8_subjects_are_text() -> None:
    conn = connect(make_broker(), "SUB héllo.wörld q.€ 1\r\n".encode())
    assert (out(conn), conn.subs[b"1"].subject, conn.subs[b"1"].queue) == (OK, "héllo.wörld", "q.€")


@pytest.mark.parametrize("subject", [b"foo*", b"a>", b"*.>", b"foo.*.bar"])
def test_valid_subjects(subject: bytes) -> None:
    conn = connect(make_broker(), w.sub(subject, b"1"))
    assert (out(conn), list(conn.subs)) == (OK, [b"1"])


def test_maximum_subscriptions_keeps_the_connection() -> None:
    conn = connect(make_broker(Config(max_subscriptions=2)), b"SUB a 1\r\nSUB b 2\r\nSUB c 3\r\n")
    assert out(conn) == OK + OK + err("maximum subscriptions exceeded")
    conn.receive_data(b"SUB a 1\r\n")  # the limit is checked before the duplicate sid
    assert out(conn) == err("maximum subscriptions exceeded")
    conn.receive_data(b"UNSUB 1\r\nSUB c 3\r\n")
    assert (out(conn), sorted(conn.subs), conn.closing) == (OK + OK, [b"2", b"3"], None)


def test_duplicate_sid_is_ignored() -> None:
    broker = make_broker()
    conn = connect(broker, b"SUB foo 1\r\nSUB bar 1\r\n")
    assert out(conn) == OK + OK
    connect(broker, QUIET + pub(b"bar") + pub(b"foo"))
    assert out(conn) == b"MSG foo 1 2\r\nhi\r\n"


def test_queue_group_sys_is_reserved() -> None:
    conn = connect(make_broker(), b"SUB foo _sys_ 1\r\n")
    expected = err('Permissions Violation for Subscription to "foo" using queue "_sys_"')
    assert (out(conn), conn.subs, conn.closing) == (expected, {}, None)


def publish_n(broker: Broker, subject: bytes, n: int) -> None:
    connect(broker, QUIET + b"".join(pub(subject, b"%d" % i) for i in range(n)))


def msgs(sid: bytes, numbers: range, subject: bytes = b"foo") -> bytes:
    """What ``publish_n`` delivers to one subscription."""
    return b"".join(w.msg(subject, sid, None, b"%d" % i) for i in numbers)


def test_unsub_with_max_unsubscribes_after_exactly_that_many() -> None:
    broker = make_broker()
    conn = connect(broker, QUIET + b"SUB foo 1\r\nUNSUB 1 2\r\n")
    publish_n(broker, b"foo", 5)
    assert out(conn) == msgs(b"1", range(2))
    assert conn.subs == {}
    assert not broker.account("$G").match(b"foo")[0].plain


@pytest.mark.parametrize(
    ("unsub", "more"), [(b"UNSUB 1 3\r\n", 1), (b"UNSUB 1 2\r\n", 0), (b"UNSUB 1 1\r\n", 0)]
)
def test_unsub_with_max_counts_what_was_delivered(unsub: bytes, more: int) -> None:
    """A max not above the messages delivered so far unsubscribes at once."""
    broker = make_broker()
    conn = connect(broker, QUIET + b"SUB foo 1\r\n")
    publish_n(broker, b"foo", 2)
    assert out(conn) == msgs(b"1", range(2))
    conn.receive_data(unsub)
    publish_n(broker, b"foo", 3)
    assert out(conn) == msgs(b"1", range(more))
    assert conn.subs == {}


@pytest.mark.parametrize("unsub", [b"UNSUB 1\r\n", b"UNSUB 1 0\r\n", b"UNSUB 1 x\r\n", b"UNSUB 1 \r\n"])
def test_unsub_now(unsub: bytes) -> None:
    broker = make_broker()
    conn = connect(broker, b"SUB foo 1\r\n" + unsub)
    assert out(conn) == OK + OK
    publish_n(broker, b"foo", 1)
    assert (out(conn), conn.subs) == (b"", {})


def test_unsub_of_an_unknown_sid_is_ignored() -> None:
    conn = connect(make_broker(), b"UNSUB 99\r\nUNSUB 99 5\r\n")
    assert (out(conn), conn.closing) == (OK + OK, None)
    conn.receive_data(b'CONNECT {"verbose":false}\r\nUNSUB 99\r\nPING\r\n')
    assert out(conn) == b"PONG\r\n"


def test_a_repeated_connect_drops_subscriptions() -> None:
    broker = make_broker()
    conn = connect(broker, b"SUB early 1\r\n" + QUIET + b"SUB foo 2\r\n")
    publish_n(broker, b"early", 1)
    assert out(conn) == OK + msgs(b"1", range(1), b"early")  # kept by the first CONNECT
    conn.receive_data(QUIET)
    publish_n(broker, b"foo", 1)
    publish_n(broker, b"early", 1)
    assert (out(conn), conn.subs) == (b"", {})
    conn.receive_data(b"UNSUB 2\r\nSUB foo 2\r\n")
    publish_n(broker, b"foo", 1)
    assert out(conn) == msgs(b"2", range(1))


def test_a_connect_after_signing_in_as_no_auth_user_starts_afresh() -> None:
    broker = make_broker(
        Config(
            users=(user("alice", "A"), user("bob", "B")),
            accounts=(AccountConfig("A"), AccountConfig("B")),
            no_auth_user="alice",
        )
    )
    conn = connect(broker, b"SUB foo 1\r\n")  # as alice, in account A
    assert out(conn) == OK
    conn.receive_data(login("bob") + b"UNSUB 1\r\nSUB foo 2\r\n")
    assert (out(conn), list(conn.subs), conn.closing) == (b"", [b"2"], None)
    connect(broker, login("alice") + pub(b"foo", b"A"))
    connect(broker, login("bob") + pub(b"foo", b"B"))
    assert out(conn) == b"MSG foo 2 1\r\nB\r\n"
    assert not broker.account("A").match(b"foo")[0].plain


# -- delivery --------------------------------------------------------------------------------------


def test_deliveries_are_formatted_as_the_writer_formats_them() -> None:
    broker = make_broker()
    with_headers = connect(broker, HEADERS + b"SUB foo 1\r\n")
    without = connect(broker, QUIET + b"SUB foo 2\r\n")
    headers = b"NATS/1.0\r\nA: b\r\n\r\n"
    cases = [(None, b"hi", None), (b"_INBOX.r", b"", None), (None, b"x", headers), (b"r", b"", headers)]
    for reply, payload, block in cases:
        data = w.pub(b"foo", payload, reply) if block is None else w.hpub(b"foo", block, payload, reply)
        connect(broker, HEADERS + data)
        assert out(with_headers) == w.msg(b"foo", b"1", reply, payload, block)
        # A client that did not ask for headers gets the payload alone.
        assert out(without) == w.msg(b"foo", b"2", reply, payload)


def test_hpub_with_an_empty_header_block_is_delivered_as_msg() -> None:
    broker = make_broker()
    conn = connect(broker, HEADERS + b"SUB foo 1\r\nHPUB foo r 0 2\r\nhi\r\n")
    assert out(conn) == b"MSG foo 1 r 2\r\nhi\r\n"


@pytest.mark.parametrize(
    "hpub", [b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", b"HPUB foo 0 2\r\nhi\r\n"]
)
def test_hpub_without_headers_closes_silently(hpub: bytes) -> None:
    broker = make_broker()
    sub = connect(broker, QUIET + b"SUB foo 1\r\n")
    conn = connect(broker, QUIET + pub(b"foo") + hpub + pub(b"foo"))
    assert (out(conn), conn.closing) == (b"", Reason.PROTOCOL_VIOLATION)
    assert out(sub) == b"MSG foo 1 2\r\nhi\r\n"  # what came before it went out


def test_echo_off() -> None:
    broker = make_broker()
    other = connect(broker, QUIET + b"SUB foo 1\r\n")
    conn = connect(broker, b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo 5\r\n' + pub(b"foo"))
    assert out(conn) == b""
    assert out(other) == b"MSG foo 1 2\r\nhi\r\n"


def test_echo_off_in_a_queue_group_serves_another_member() -> None:
    broker = make_broker()
    conn = connect(broker, b'CONNECT {"verbose":false,"echo":false}\r\nSUB foo q 5\r\nSUB foo 6\r\n')
    conn.receive_data(b"".join(pub(b"foo", b"%d" % i) for i in range(20)))
    assert out(conn) == b""  # nobody else in the group yet: nobody gets them
    other = connect(broker, QUIET + b"SUB foo q 1\r\n")
    conn.receive_data(b"".join(pub(b"foo", b"%d" % i) for i in range(20)))
    assert out(conn) == b""
    assert out(other) == msgs(b"1", range(20))


def test_queue_groups_deliver_each_message_to_one_member() -> None:
    broker = make_broker()
    members = [connect(broker, QUIET + b"SUB foo q %d\r\n" % i) for i in range(3)]
    others = [connect(broker, QUIET + b"SUB foo r 1\r\n"), connect(broker, QUIET + b"SUB foo r 2\r\n")]
    plain = connect(broker, QUIET + b"SUB foo 9\r\n")
    publish_n(broker, b"foo", 60)
    assert out(plain) == msgs(b"9", range(60))
    for group in (members, others):
        received = [out(member) for member in group]
        counts = [data.count(b"MSG ") for data in received]
        assert sum(counts) == 60, counts  # each message once
        assert all(counts), counts  # to a member picked at random
        numbers = sorted(int(line) for data in received for line in data.split(b"\r\n")[1::2])
        assert numbers == list(range(60))


def test_accounts_are_isolated() -> None:
    broker = make_broker(
        Config(
            users=(user("a1", "A"), user("a2", "A"), user("b1", "B")),
            accounts=(AccountConfig("A"), AccountConfig("B")),
        )
    )
    a1 = connect(broker, login("a1") + b"SUB foo 1\r\n")
    b1 = connect(broker, login("b1") + b"SUB foo 1\r\n")
    connect(broker, login("a2") + pub(b"foo", b"A"))
    connect(broker, login("b1") + pub(b"foo", b"B"))
    assert out(a1) == b"MSG foo 1 1\r\nA\r\n"
    assert out(b1) == b"MSG foo 1 1\r\nB\r\n"


# -- permissions -----------------------------------------------------------------------------------


def restricted(*, publish: SubjectRule | None = None, subscribe: SubjectRule | None = None) -> Broker:
    """A node where user "u" has these permissions and user "free" has none."""
    perms = Permissions(publish=publish or SubjectRule(), subscribe=subscribe or SubjectRule())
    return make_broker(Config(users=(user("u", permissions=perms), user("free"))))


def test_publish_permissions_keep_the_connection() -> None:
    broker = restricted(publish=SubjectRule(allow=("foo.>",), deny=("foo.secret",)))
    sub = connect(broker, login("free") + b"SUB > 1\r\n")
    conn = connect(broker, login("u", verbose=True))
    assert out(conn) == OK
    conn.receive_data(pub(b"foo.a") + pub(b"foo.secret") + pub(b"bar") + pub(b"foo.b"))
    assert out(conn) == (
        OK
        + err('Permissions Violation for Publish to "foo.secret"')
        + err('Permissions Violation for Publish to "bar"')
        + OK
    )
    assert conn.closing is None
    assert out(sub) == b"MSG foo.a 1 2\r\nhi\r\nMSG foo.b 1 2\r\nhi\r\n"


def test_publish_permissions_do_not_apply_to_the_reply() -> None:
    broker = restricted(publish=SubjectRule(allow=("foo",)))
    conn = connect(broker, login("u") + b"SUB foo 1\r\n" + pub(b"foo", reply=b"bar"))
    assert out(conn) == b"MSG foo 1 bar 2\r\nhi\r\n"


def test_subscribe_permissions() -> None:
    broker = restricted(
        subscribe=SubjectRule(
            allow=("foo.*", "jobs workers", "jobs bad"), deny=("foo.secret", "jobs bad")
        )
    )
    conn = connect(broker, login("u", verbose=True))
    assert out(conn) == OK

    def sub(line: bytes) -> bytes:
        conn.receive_data(line + b"\r\n")
        return out(conn)

    def refused(subject: str, queue: str | None = None) -> bytes:
        text = f'Permissions Violation for Subscription to "{subject}"'
        return err(text + (f' using queue "{queue}"' if queue else ""))

    assert sub(b"SUB foo.a 1") == OK
    assert sub(b"SUB foo.* 2") == OK  # a wildcard overlapping a narrower deny is accepted
    assert sub(b"SUB foo.> 3") == OK  # (the literal token ">" matches the allowed "*")
    assert sub(b"SUB foo.secret 4") == refused("foo.secret")
    assert sub(b"SUB foo.a.b 5") == refused("foo.a.b")
    assert sub(b"SUB bar 6") == refused("bar")
    assert sub(b"SUB jobs workers 7") == OK
    assert sub(b"SUB jobs other 8") == refused("jobs", "other")
    assert sub(b"SUB jobs 9") == refused("jobs")  # a queue entry permits queue subscriptions only
    assert sub(b"SUB jobs bad 10") == refused("jobs", "bad")  # allowed, and then denied
    assert sub(b"SUB foo.a _sys_ 11") == refused("foo.a", "_sys_")
    assert sorted(conn.subs) == [b"1", b"2", b"3", b"7"]
    assert conn.closing is None


@pytest.mark.parametrize("deny", ["foo.*", "foo.>", ">"])
def test_a_deny_covering_a_wildcard_subscription_refuses_it(deny: str) -> None:
    conn = connect(restricted(subscribe=SubjectRule(deny=(deny,))), login("u") + b"SUB foo.* 1\r\n")
    assert out(conn) == err('Permissions Violation for Subscription to "foo.*"')


def test_denied_subjects_are_filtered_at_delivery() -> None:
    broker = restricted(subscribe=SubjectRule(deny=("foo.secret", "bar.x.y")))
    conn = connect(broker, login("u") + b"SUB foo.* 1\r\nSUB bar.> 2\r\nSUB foo.* q 3\r\n")
    assert out(conn) == b""
    publisher = connect(broker, login("free"))
    for subject in (b"foo.a", b"foo.secret", b"bar.x.y", b"bar.x.z"):
        publisher.receive_data(pub(subject))
    assert out(conn) == (b"MSG foo.a 1 2\r\nhi\r\nMSG foo.a 3 2\r\nhi\r\nMSG bar.x.z 2 2\r\nhi\r\n")


# -- reserved subjects, pedantic -------------------------------------------------------------------


def test_reserved_subject_and_replies_keep_the_connection() -> None:
    broker = make_broker()
    spy = connect(broker, QUIET + b"SUB > 1\r\nSUB _GR_.> 2\r\n")
    conn = connect(broker, b'CONNECT {"verbose":true}\r\n')
    assert out(conn) == OK
    conn.receive_data(
        pub(b"_GR_.x")
        + pub(b"foo", reply=b"_R_.x")
        + pub(b"foo", reply=b"_R_.")
        + pub(b"foo", reply=b"$JS.ACK.x")
        + pub(b"foo", reply=b"_GR_.x")
    )
    assert out(conn) == (
        err('Permissions Violation for Publish to "_GR_.x"')
        + err('Permissions Violation for Publish with Reply of "_R_.x"')
        + err('Permissions Violation for Publish with Reply of "_R_."')
        + err('Permissions Violation for Publish with Reply of "$JS.ACK.x"')
        + err('Permissions Violation for Publish with Reply of "_GR_.x"')
    )
    assert (out(spy), conn.closing) == (b"", None)
    # The bare prefixes themselves, and _INBOX, are not reserved.
    conn.receive_data(pub(b"foo", reply=b"$JS.ACK.") + pub(b"foo", reply=b"_GR_.") + pub(b"_INBOX.x"))
    assert out(conn) == OK + OK + OK
    assert out(spy) == (
        b"MSG foo 1 $JS.ACK. 2\r\nhi\r\nMSG foo 1 _GR_. 2\r\nhi\r\nMSG _INBOX.x 1 2\r\nhi\r\n"
    )


def test_published_bytes_that_are_not_utf8_stay_bytes() -> None:
    """Published subjects are never decoded: delivered as sent, quoted as sent in an -ERR."""
    broker = make_broker()
    spy = connect(broker, QUIET + b"SUB > 1\r\n")
    conn = connect(broker, QUIET + pub(b"a.\xff") + pub(b"_GR_.\xff") + pub(b"b", reply=b"_R_.\xfe"))
    assert out(conn) == (
        b"-ERR 'Permissions Violation for Publish to \"_GR_.\xff\"'\r\n"
        b"-ERR 'Permissions Violation for Publish with Reply of \"_R_.\xfe\"'\r\n"
    )
    assert (out(spy), conn.closing) == (b"MSG a.\xff 1 2\r\nhi\r\n", None)


def test_publish_permissions_are_checked_before_reserved_replies() -> None:
    broker = restricted(publish=SubjectRule(deny=("foo",)))
    conn = connect(broker, login("u") + pub(b"foo", reply=b"_R_.x") + pub(b"bar", reply=b"_R_.x"))
    assert out(conn) == (
        err('Permissions Violation for Publish to "foo"')
        + err('Permissions Violation for Publish with Reply of "_R_.x"')
    )


@pytest.mark.parametrize("subject", [b"foo.*", b"foo.>", b"*", b"foo..bar", b"foo."])
def test_pedantic_invalid_publish_subject_is_still_delivered(subject: bytes) -> None:
    broker = make_broker()
    spy = connect(broker, QUIET + w.sub(subject, b"1"))  # (some of these cannot be subscribed to)
    out(spy)
    conn = connect(broker, b'CONNECT {"verbose":true}\r\n' + pub(subject))
    assert (out(conn), conn.closing) == (OK + err("Invalid Publish Subject") + OK, None)
    delivered = b"MSG %b 1 2\r\nhi\r\n" % subject if spy.subs else b""
    assert out(spy) == delivered


def test_without_pedantic_a_wildcard_subject_is_matched_literally() -> None:
    broker = make_broker()
    subs = connect(broker, QUIET + b"SUB foo.* 1\r\nSUB foo.> 2\r\nSUB *.* 3\r\nSUB foo.a 4\r\n")
    conn = connect(broker, b'CONNECT {"pedantic":false}\r\n' + pub(b"foo.*") + pub(b"foo..bar"))
    assert out(conn) == OK + OK + OK
    assert one_by_one(out(subs)) == [b"MSG foo.* %b 2\r\nhi\r\n" % sid for sid in (b"1", b"2", b"3")]


# -- no responders ---------------------------------------------------------------------------------

REQUESTER = b'CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\n'


def no_responders(reply: bytes, sid: bytes, subject: bytes) -> bytes:
    block = b"NATS/1.0 503\r\nNats-Subject: " + subject + b"\r\n\r\n"
    assert len(block) == 32 + len(subject)
    return b"HMSG %b %b %d %d\r\n%b\r\n" % (reply, sid, len(block), len(block), block)


def test_no_responders_status_goes_to_the_requesters_reply_subscription() -> None:
    conn = connect(make_broker(), REQUESTER + b"SUB _INBOX.abc.* 7\r\n")
    conn.receive_data(pub(b"service", reply=b"_INBOX.abc.1"))
    assert out(conn) == (
        b"HMSG _INBOX.abc.1 7 39 39\r\nNATS/1.0 503\r\nNats-Subject: service\r\n\r\n\r\n"
    )
    assert out(conn) == b""
    conn.receive_data(pub(b"other.thing", reply=b"_INBOX.abc.2"))
    assert out(conn) == no_responders(b"_INBOX.abc.2", b"7", b"other.thing")


@pytest.mark.parametrize(
    ("options", "subs"),
    [
        (REQUESTER, b"SUB _INBOX.> q 7\r\n"),  # a queue subscription does not count
        (REQUESTER, b""),  # nor a reply subscription of someone else's (below)
        (HEADERS, b"SUB _INBOX.> 7\r\n"),  # not asked for
    ],
)
def test_no_responders_status_needs_the_requesters_own_plain_subscription(
    options: bytes, subs: bytes
) -> None:
    broker = make_broker()
    other = connect(broker, QUIET + b"SUB _INBOX.> 1\r\n")
    conn = connect(broker, options + subs + pub(b"service", reply=b"_INBOX.1"))
    assert out(conn) == b""
    assert out(other) == b""


def test_no_responders_when_the_only_subscriber_is_the_requester_with_echo_off() -> None:
    conn = connect(
        make_broker(),
        b'CONNECT {"verbose":false,"headers":true,"no_responders":true,"echo":false}\r\n'
        + b"SUB _INBOX.> 7\r\nSUB service 8\r\n"
        + pub(b"service", reply=b"_INBOX.1"),
    )
    assert out(conn) == no_responders(b"_INBOX.1", b"7", b"service")


def test_no_responders_status_does_not_count_towards_unsub_max() -> None:
    broker = make_broker()
    conn = connect(
        broker, REQUESTER + b"SUB _INBOX.> 7\r\nUNSUB 7 1\r\n" + pub(b"svc", reply=b"_INBOX.1")
    )
    assert out(conn) == no_responders(b"_INBOX.1", b"7", b"svc")
    connect(broker, QUIET + pub(b"_INBOX.1", b"answer") + pub(b"_INBOX.1", b"again"))
    assert out(conn) == b"MSG _INBOX.1 7 6\r\nanswer\r\n"


def test_a_responder_means_no_status() -> None:
    broker = make_broker()
    connect(broker, QUIET + b"SUB service 1\r\n")
    conn = connect(broker, REQUESTER + b"SUB _INBOX.> 7\r\n" + pub(b"service", reply=b"_INBOX.1"))
    assert out(conn) == b""


# -- slow consumers, pings -------------------------------------------------------------------------


def test_a_slow_consumer_is_cut_off_without_hurting_others() -> None:
    line = len(b"MSG foo 1 100\r\n") + 100 + 2
    broker = make_broker(Config(max_pending=2 * line))
    slow = connect(broker, QUIET + b"SUB foo 1\r\n")
    fast = connect(broker, QUIET + b"SUB foo 1\r\n")
    publisher = connect(broker, QUIET)
    payload = b"p" * 100
    received = []
    for i in range(50):
        publisher.receive_data(pub(b"foo", payload))
        received.append(out(fast))
        if i == 1:
            assert slow.closing is None  # exactly at the limit: still there
    assert received == [b"MSG foo 1 100\r\n" + payload + b"\r\n"] * 50
    assert slow.closing == Reason.SLOW_PENDING
    assert out(slow) == b""  # no -ERR, and what was pending is dropped
    assert (publisher.closing, fast.closing, broker.slow_consumers) == (None, None, 1)
    assert not any(sub.owner is slow for sub in broker.account("$G").match(b"foo")[0].plain)


def test_stale_connection() -> None:
    conn = connect(make_broker(Config(ping_max=2)), QUIET)
    conn.ping_due()
    conn.ping_due()
    assert (out(conn), conn.closing) == (b"PING\r\nPING\r\n", None)
    conn.ping_due()
    assert (out(conn), conn.closing) == (err("Stale Connection"), Reason.STALE)


def test_pong_resets_the_pings_outstanding() -> None:
    conn = connect(make_broker(Config(ping_max=2)), QUIET)
    for _ in range(5):
        conn.ping_due()
        conn.ping_due()
        assert out(conn) == b"PING\r\nPING\r\n"
        conn.receive_data(b"PONG\r\n")
    assert conn.closing is None
    assert conn.rtt_ns > 0


def test_no_ping_for_a_client_heard_from_lately() -> None:
    """Once there is a round-trip time, a client that keeps talking is left alone, even one that
    never answers a PING; it goes stale only once it falls silent."""
    broker = make_broker(Config(ping_max=2))
    conn = connect(broker, QUIET)
    conn.ping_due()
    assert out(conn) == b"PING\r\n"  # the first one measures the round trip
    for data, answer in [
        (pub(b"foo"), b""),
        (b"SUB foo 1\r\n", b""),
        (b"UNSUB 1\r\n", b""),
        (b"PING\r\n", b"PONG\r\n"),
        (b"SUB a..b 2\r\n", err("Invalid Subject")),  # even a refused SUB
    ]:
        conn.receive_data(data)
        conn.ping_due()
        assert out(conn) == answer
    conn.receive_data(b"PONG\r\n")  # a PONG is not activity
    conn.ping_due()
    conn.ping_due()
    conn.ping_due()
    assert (out(conn), conn.closing) == (b"PING\r\nPING\r\n" + err("Stale Connection"), Reason.STALE)


def test_before_connect_a_busy_client_is_pinged_anyway() -> None:
    """Without a CONNECT or a PONG there is no round-trip time, so every firing pings."""
    conn = connect(make_broker(Config(ping_max=2)))
    for _ in range(2):
        conn.ping_due()
        conn.receive_data(b"PING\r\n")
    conn.ping_due()
    assert (out(conn), conn.closing) == (
        b"PING\r\nPONG\r\nPING\r\nPONG\r\n" + err("Stale Connection"),
        Reason.STALE,
    )


def test_a_closed_connection_ignores_timers_and_input() -> None:
    conn = connect(make_broker(), b"ZZZ\r\n")
    assert out(conn) == err("Unknown Protocol Operation")
    conn.ping_due()
    conn.auth_expired()
    conn.receive_data(b"PING\r\n")
    assert (out(conn), conn.closing) == (b"", Reason.PROTOCOL_VIOLATION)


def test_a_retired_connection_keeps_only_what_monitoring_shows() -> None:
    broker = restricted(publish=SubjectRule(allow=("foo",)))
    fields = {"name": "app", "lang": "py", "version": "1", "protocol": 1, "echo": False}
    conn = connect(broker, w.connect({"user": "u", "pass": "u-pw", "verbose": False, **fields}))
    conn.receive_data(b"SUB foo 1\r\nPUB foo 100000\r\n" + b"x" * 50_000)
    assert conn.parser.buffered > 50_000
    conn.close(Reason.CLIENT_CLOSED)  # (the client left half-way through)
    assert conn.parser.buffered == 0
    conn.retire()
    assert (conn.closing, conn.subs, conn.perms, conn.pending_bytes) == (
        Reason.CLIENT_CLOSED,
        {},
        None,
        0,
    )
    assert conn.options == {"name": "app", "lang": "py", "version": "1"}
    assert conn.user is not None
    assert conn.user.user == "u"
    assert list(broker.closed) == [conn]


def test_queue_permission_entries_may_use_wildcards() -> None:
    broker = restricted(subscribe=SubjectRule(allow=("jobs.> v1.*", "all >")))
    conn = connect(broker, login("u", verbose=True))
    assert out(conn) == OK
    for line, allowed in (
        (b"SUB jobs.a v1.blue 1", True),
        (b"SUB jobs.a v2 2", False),
        (b"SUB jobs.a 3", False),  # a queue entry permits queue subscriptions only
        (b"SUB all anything 4", True),
    ):
        conn.receive_data(line + b"\r\n")
        assert (out(conn) == OK) is allowed, line


def test_a_queue_member_that_cannot_take_a_message_leaves_it_to_another() -> None:
    # "u" may not receive foo.secret: deliveries to its wildcard member are filtered, and each of
    # those messages must still reach the group's other member instead of being lost.
    broker = restricted(subscribe=SubjectRule(deny=("foo.secret",)))
    filtered = connect(broker, login("u") + b"SUB foo.* q 1\r\n")
    member = connect(broker, login("free") + b"SUB foo.* q 2\r\n")
    connect(broker, login("free") + b"".join(pub(b"foo.secret", b"%d" % i) for i in range(40)))
    assert out(filtered) == b""
    assert out(member) == msgs(b"2", range(40), subject=b"foo.secret")
