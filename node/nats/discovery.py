"""Where clients may connect: the URLs a node advertises in its INFO's ``connect_urls``.

A node advertises its own client URLs and those of every node its routes connect it to, so a
client given one address learns the whole cluster, and reconnects elsewhere when its node goes.
Its own URLs are ``client_advertise`` when configured, else the address it listens on; listening
on every interface (``0.0.0.0`` or ``::``), they are the interfaces' addresses other machines can
reach (loopback and link-local ones left out), as nats-server advertises them.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable

from node.config.load import parse_advertise

__all__ = ["MAX_CONNECT_URLS", "connect_urls", "interface_addresses", "own_urls"]

MAX_CONNECT_URLS = 1024
"""The most URLs one INFO carries, however many peers advertise how many."""
_SIOCGIFADDR = 0x8915
_IF_INET6 = "/proc/net/if_inet6"


def own_urls(host: str, port: int, advertise: str | None) -> tuple[str, ...]:
    """This node's client URLs, ``host:port`` each: ``advertise``, else the listening address,
    else (listening everywhere) each reachable interface address."""
    if advertise:
        return (_join(*parse_advertise(advertise, port)),)
    if host in ("0.0.0.0", "::", ""):
        return tuple(_join(address, port) for address in interface_addresses(ipv6=host != "0.0.0.0"))
    return (_join(host, port),)


def connect_urls(own: Iterable[str], peers: Iterable[str]) -> list[str]:
    """The INFO's ``connect_urls``: this node's first, then its peers', each once, at most
    ``MAX_CONNECT_URLS``."""
    return list(dict.fromkeys([*own, *peers]))[:MAX_CONNECT_URLS]


def interface_addresses(*, ipv6: bool) -> list[str]:
    """The machine's unicast addresses other hosts may reach: IPv4 ones, and IPv6 ones if asked."""
    found: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:
                continue  # (no IPv4 address)
            found.append(socket.inet_ntoa(answer[20:24]))
    if ipv6:
        try:
            with open(_IF_INET6) as table:
                found += [str(ipaddress.IPv6Address(bytes.fromhex(line[:32]))) for line in table]
        except OSError:
            pass
    return [a for a in dict.fromkeys(found) if _reachable(ipaddress.ip_address(a))]


def _reachable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (
        address.is_loopback or address.is_link_local or address.is_multicast or address.is_unspecified
    )


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
