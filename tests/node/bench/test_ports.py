"""``node.bench.ports.free_port``: ports for servers about to start, out of the way of the ends of
outgoing connections."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

import node.bench.ports as picker
from node.bench.ports import free_port

pytestmark = pytest.mark.timeout(30)


def test_ports_are_below_the_ephemeral_range_and_never_given_twice() -> None:
    """(A CI run lost a three-node test module when a node's pre-picked port, from the ephemeral
    range, was taken by a route connection's end before the node bound it.)"""
    first = int(picker.EPHEMERAL.read_text().split()[0])
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(picker.LOWEST_PORT <= port < first for port in ports)


def test_a_port_something_holds_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held, socket.socket() as probe:
        held.bind(("127.0.0.1", 0))
        probe.bind(("127.0.0.1", 0))
        taken, free = held.getsockname()[1], probe.getsockname()[1]
        probe.close()
        choices: Iterator[int] = iter([taken, free])
        monkeypatch.setattr(picker._pick, "randrange", lambda low, high: next(choices))
        assert free_port() == free
