"""TLS for every front door and link: contexts from a ``TlsConfig``, handshakes with a deadline.

The standard library's ``ssl`` does the cryptography and ``trio.SSLStream`` carries it, so a
secured connection is just another ``trio.abc.Stream`` to a ``Session``. (Such a stream has no file
descriptor to write to directly, so its output always goes through the session's writer task.)

A handshake is always bounded by ``TlsConfig.timeout``: a peer that opens a connection and never
finishes (or never starts) its handshake costs one task for that long, then is dropped. Handshakes
run in the task of the connection they belong to, never where connections are accepted, so a slow
one holds up nobody else.

Two ways to start, as in nats-server: client connections get the server's INFO in the clear and
then the client starts TLS (``start_after``), unless configured for ``handshake_first``; routes and
gateways speak TLS from the first byte (``handshake``).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import attrs
import trio

__all__ = [
    "TlsConfig",
    "TlsError",
    "client_context",
    "handshake",
    "peer_names",
    "secure_dialed",
    "server_context",
    "start_after",
    "subject_dn",
]

DEFAULT_TIMEOUT = 2.0
"""Seconds a handshake may take (nats-server's default TLS timeout)."""


@attrs.frozen
class TlsConfig:
    """One listener's (or one kind of link's) TLS settings.

    Attributes:
        cert_file, key_file: this side's certificate chain and private key (PEM).
        ca_file: the authorities that peers' certificates must chain to (PEM); without it, the
            system's trusted authorities.
        verify: whether accepted connections must present a certificate (links always must).
        timeout: seconds a handshake may take.
        verify_and_map: (client listeners) sign a client in as the configured user its certificate
            names, without a password; implies ``verify``.
        handshake_first: (client listeners) expect the TLS handshake at once and send the INFO
            over TLS, for clients configured so (nats-py's ``tls_handshake_first``).
    """

    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    verify: bool = False
    timeout: float = DEFAULT_TIMEOUT
    verify_and_map: bool = False
    handshake_first: bool = False

    def evolve(self, **changes: Any) -> TlsConfig:
        return attrs.evolve(self, **changes)


class TlsError(Exception):
    """A handshake failed or took too long; the message says which, for the log."""


def server_context(config: TlsConfig, *, require_certificates: bool = False) -> ssl.SSLContext:
    """The context for accepting connections: this side's certificate, and (with ``verify``,
    ``verify_and_map`` or ``require_certificates``) peers' certificates checked against ``ca_file``.

    Raises:
        OSError, ssl.SSLError, ValueError: a missing or unusable certificate, key or CA file.
    """
    if not (config.cert_file and config.key_file):
        raise ValueError("TLS needs a certificate and a key (cert_file, key_file)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=config.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.cert_file, config.key_file)
    if require_certificates or config.verify or config.verify_and_map:
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def client_context(config: TlsConfig) -> ssl.SSLContext:
    """The context for dialing: the peer's certificate checked against ``ca_file`` and the name
    dialed; this side's certificate presented if it has one.

    Raises:
        OSError, ssl.SSLError, ValueError: a missing or unusable certificate, key or CA file.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.cert_file:
        context.load_cert_chain(config.cert_file, config.key_file)
    return context


async def handshake(stream: trio.SSLStream[Any], config: TlsConfig) -> None:
    """Complete ``stream``'s handshake within ``config.timeout`` seconds.

    Raises:
        TlsError: the peer is not speaking TLS, its certificate was refused, or it was too slow.
    """
    try:
        with trio.fail_after(config.timeout):
            await stream.do_handshake()
    except trio.TooSlowError:
        raise TlsError("TLS handshake timeout") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise TlsError(f"TLS handshake error: {exc.__cause__ or exc}") from exc


async def secure_dialed(
    stream: trio.abc.Stream, context: ssl.SSLContext, host: str, config: TlsConfig
) -> trio.SSLStream[trio.abc.Stream]:
    """``stream``, just dialed to ``host``, secured with its handshake done (as ``handshake``).
    Whatever stops the handshake (an error, the timeout, a cancellation as the node stops) closes
    ``stream``: nothing else holds it yet.

    Raises:
        TlsError: as ``handshake``.
    """
    secure = trio.SSLStream(stream, context, server_hostname=host)
    try:
        await handshake(secure, config)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return secure


async def start_after(stream: trio.SSLStream[Any], greeting: bytes, config: TlsConfig) -> None:
    """Send ``greeting`` in the clear, then expect the peer to start TLS (each step within
    ``config.timeout``).

    Raises:
        TlsError: as ``handshake``, or the greeting could not be sent.
    """
    try:
        with trio.fail_after(config.timeout):
            await stream.transport_stream.send_all(greeting)
    except trio.TooSlowError:
        raise TlsError("TLS handshake timeout") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        raise TlsError(f"TLS handshake error: {exc}") from exc
    await handshake(stream, config)


# The attribute names OpenSSL writes in RFC 2253 subjects (``-nameopt RFC2253``), by the long
# names ``getpeercert`` reports.
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "domainComponent": "DC",
    "localityName": "L",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "stateOrProvinceName": "ST",
    "streetAddress": "street",
    "userId": "UID",
}


def _escape(value: str) -> str:
    """An attribute value escaped as RFC 2253 requires."""
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and len(out) > 1:
        out = out[:-1] + "\\ "
    return out


def subject_dn(subject: Iterable[Iterable[tuple[str, str]]]) -> str:
    """A certificate subject (as ``getpeercert`` gives it) as an RFC 2253 string: last RDN first,
    the form ``openssl x509 -noout -subject -nameopt RFC2253`` prints (``CN=alice,O=acme``)."""
    rdns = [
        "+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn)
        for rdn in subject
    ]
    return ",".join(reversed(rdns))


def peer_names(stream: trio.SSLStream[Any]) -> tuple[str, ...]:
    """The names a verified peer certificate vouches for: its subject (RFC 2253), then its
    e-mail addresses and DNS names. Empty when the peer presented no verified certificate."""
    cert = stream.getpeercert()
    if not cert:
        return ()
    names = [subject_dn(cert.get("subject", ()))]
    alternatives = cert.get("subjectAltName", ())
    names += [value for kind, value in alternatives if kind == "email"]
    names += [value for kind, value in alternatives if kind == "DNS"]
    return tuple(names)
