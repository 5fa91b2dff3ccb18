"""``transport.tls``: a dialed connection whose handshake does not finish is closed, whatever
stopped it (the peer, the timeout, the node stopping)."""

from __future__ import annotations

import socket
import ssl

import pytest
import trio
import trio.testing

from transport.tls import TlsConfig, TlsError, secure_dialed

pytestmark = pytest.mark.timeout(30)


def dialed() -> tuple[trio.SocketStream, socket.socket]:
    ours, theirs = socket.socketpair()
    return trio.SocketStream(trio.socket.from_stdlib_socket(ours)), theirs


async def test_a_handshake_cancelled_midway_closes_the_dialed_stream() -> None:
    """(A route dialing a peer while its node stops: the socket was left to the garbage
    collector, and its ResourceWarning failed whichever test was running then.)"""
    stream, theirs = dialed()
    config = TlsConfig(timeout=10.0)
    with theirs, trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def dial() -> None:
                await secure_dialed(stream, ssl.create_default_context(), "localhost", config)

            nursery.start_soon(dial)
            await trio.testing.wait_all_tasks_blocked()
            assert theirs.recv(5)[:1] == b"\x16"  # (the ClientHello, never answered)
            scope.cancel()
    assert stream.socket.fileno() == -1


async def test_a_peer_that_does_not_speak_tls_is_an_error_and_the_stream_closed() -> None:
    stream, theirs = dialed()
    with theirs:
        theirs.sendall(b"INFO {}\r\n")
        with pytest.raises(TlsError):
            await secure_dialed(stream, ssl.create_default_context(), "localhost", TlsConfig())
    assert stream.socket.fileno() == -1
