"""The pipeline's RESP client and option parsing, without Spark."""

from __future__ import annotations

import socket

import pytest

from cluster.placement import hash_slot
from pipeline.local import free_port
from pipeline.options import (
    MAX_SEQ,
    Endpoint,
    Endpoints,
    OptionError,
    StreamId,
    parse_bound,
    read_options,
)
from pipeline.resp import Incomplete, Parser, ProtocolError, RespClient, ServerError, encode
from pipeline.streams import beside, hash_tag
from tests.live import LiveNode


def test_encode_is_an_array_of_bulk_strings() -> None:
    assert encode(["XADD", b"s\r\n", 7]) == b"*3\r\n$4\r\nXADD\r\n$3\r\ns\r\n\r\n$1\r\n7\r\n"


def test_parser_decodes_every_reply_type_fed_one_byte_at_a_time() -> None:
    wire = b"+OK\r\n-ERR no\r\n:42\r\n$3\r\na\r\n\r\n$-1\r\n*-1\r\n*2\r\n$1\r\nx\r\n*1\r\n:1\r\n"
    parser, got = Parser(), []
    for byte in wire:
        parser.feed(bytes([byte]))
        while (reply := parser.next_reply()) is not Incomplete.INCOMPLETE:
            got.append(reply)
    errors = [str(r) for r in got if isinstance(r, ServerError)]
    assert errors == ["ERR no"]
    assert [r for r in got if not isinstance(r, ServerError)] == [
        b"OK",
        42,
        b"a\r\n",
        None,
        None,
        [b"x", [1]],
    ]


@pytest.mark.parametrize("wire", [b"!oops\r\n", b"$x\r\n", b":1.5\r\n"])
def test_parser_refuses_what_is_not_resp2(wire: bytes) -> None:
    parser = Parser()
    parser.feed(wire)
    with pytest.raises(ProtocolError):
        parser.next_reply()


@pytest.mark.slow
def test_a_pipeline_with_an_error_reads_every_reply_and_stays_in_step(node: LiveNode) -> None:
    with RespClient.connect("127.0.0.1", node.redis_port or 0, 10) as client:
        with pytest.raises(ServerError, match="Invalid stream ID"):
            client.pipeline(
                [["XADD", "p", "1-1", "a", "1"], ["XADD", "p", "bad", "a", "2"], ["XLEN", "p"]]
            )
        assert client.call("XLEN", "p") == 1


def test_a_server_that_hangs_up_is_a_connection_error() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = RespClient.connect("127.0.0.1", listener.getsockname()[1], 10)
        listener.accept()[0].close()
        with client, pytest.raises(ConnectionError):
            client.call("PING")


def test_bounds() -> None:
    assert parse_bound("start", "-", upper=False) == StreamId(0, 0)
    assert parse_bound("end", "+", upper=True) == StreamId(MAX_SEQ, MAX_SEQ)
    assert parse_bound("end", "17", upper=True) == StreamId(17, MAX_SEQ)
    assert parse_bound("start", "17-3", upper=False) == StreamId(17, 3)
    for bad in ("", "+", "1-", "-1", "x-1", "99999999999999999999999"):
        with pytest.raises(OptionError, match="pubmesh option 'start': malformed stream ID"):
            parse_bound("start", bad, upper=False)


def test_urls() -> None:
    assert Endpoint.parse("redis://u%40x:p%3A@h:7/3") == Endpoint("h", 7, 3, "u@x", "p:")
    assert Endpoint.parse("redis://:pw@h") == Endpoint("h", 6379, 0, None, "pw")
    with pytest.raises(OptionError, match=r"'url': .* is not a redis:// URL"):
        Endpoint.parse("redis://h:port")
    with pytest.raises(OptionError, match="'url': missing"):
        read_options({"stream": "s"})
    several = read_options({"stream": "s", "url": "redis://a:1, redis://:pw@b:2/3"}).nodes
    assert several == Endpoints((Endpoint("a", 1), Endpoint("b", 2, 3, None, "pw")))
    with pytest.raises(OptionError, match="'url': an empty URL"):
        Endpoints.parse("redis://a:1,")


def test_keys_beside_a_stream_hash_to_its_slot() -> None:
    assert [hash_tag(k) for k in ("a", "{a}b", "x{a}{b}", "{}a", "a{b", "{a}")] == [
        None, "a", "a", None, None, "a",
    ]  # fmt: skip
    for stream in ("orders", "{o}:x", "a{b", "ord{ers", "{}x", "a}b", "é{"):
        key = beside(stream, "pubmesh-write:j")
        assert key.endswith(":pubmesh-write:j")
        if "}" not in stream or hash_tag(stream) is not None:
            assert hash_slot(key.encode()) == hash_slot(stream.encode()), stream


@pytest.mark.slow
def test_unreachable_and_refused_logins_name_the_url(node: LiveNode) -> None:
    with pytest.raises(OptionError, match=r"'url': cannot connect to 127\.0\.0\.1"):
        Endpoint("127.0.0.1", free_port()).connect()
    with pytest.raises(OptionError, match=r"'url': .* refused the login"):
        Endpoint("127.0.0.1", node.redis_port or 0, db=99).connect()
    # Of several nodes, one that is down is passed over; all down names each.
    down, up = f"redis://127.0.0.1:{free_port()}", f"redis://127.0.0.1:{node.redis_port}"
    with Endpoints.parse(f"{down},{up}").connect() as client:
        assert client.call("PING") == b"PONG"
    with pytest.raises(OptionError, match=r"cannot connect to .*; cannot connect to "):
        Endpoints.parse(f"{down},{down}").connect()
