"""How a link opens: each side proves it knows the shared secret before anything else is said.

Both sides start with a CHALLENGE: the link's kind, the protocol version and a fresh random nonce;
that is all a stranger ever learns. The dialer then sends its PROOF, an HMAC-SHA256 keyed by the
secret over the kind, its role and both nonces. The listener checks it (in constant time) and only
then answers with its own PROOF and its HELLO; the dialer checks that proof before sending its own
HELLO. So the listener tells nothing to whoever connects without the secret, and the dialer proves
nothing to a listener that did not first show it a fresh nonce of its own.

A proof names its sender's role, and covers a nonce the receiver just chose, so neither a reflected
proof (sent back on the same link) nor a replayed one (from an earlier link) is accepted. With an
empty secret the same exchange runs over the empty key: one code path, whatever the configuration.
"""

from __future__ import annotations

import hashlib
import hmac

from cluster.frames import NONCE_SIZE, Challenge, LinkError, Proof

__all__ = ["PROTOCOL_VERSION", "AuthenticationFailed", "Handshake"]

PROTOCOL_VERSION = 2
"""Links speak this version; version 1 (a HELLO first, carrying the secret) is no longer spoken."""


class AuthenticationFailed(LinkError):
    """The peer's proof did not check out: it does not know the secret."""


class Handshake:
    """One side's part in opening one link, without I/O.

    Args:
        kind: "route" or "gateway"; a peer expecting the other kind is refused.
        secret: the shared secret (may be empty).
        dialer: whether this side dialed.
        nonce: ``NONCE_SIZE`` fresh random bytes.
    """

    __slots__ = ("_key", "_theirs", "authenticated", "dialer", "kind", "nonce")

    def __init__(self, kind: str, secret: str, *, dialer: bool, nonce: bytes) -> None:
        if len(nonce) != NONCE_SIZE:
            raise ValueError(f"a nonce is {NONCE_SIZE} bytes")
        self.kind = kind
        self.dialer = dialer
        self.nonce = nonce
        self._key = secret.encode()
        self._theirs: bytes | None = None
        self.authenticated = False
        """Whether the peer's proof checked out (only then may this side send its HELLO)."""

    def challenge(self) -> Challenge:
        """The first frame this side sends."""
        return Challenge(self.kind, PROTOCOL_VERSION, self.nonce)

    def on_challenge(self, frame: Challenge) -> Proof | None:
        """The peer's CHALLENGE: the dialer answers with its proof at once.

        Raises:
            LinkError: a second CHALLENGE, another kind of link, or another version.
        """
        if self._theirs is not None:
            raise LinkError("CHALLENGE sent twice")
        if frame.kind != self.kind:
            raise LinkError(f"expected a {self.kind}, got {frame.kind[:32]!r}")
        if frame.version != PROTOCOL_VERSION:
            raise LinkError(f"unsupported protocol version {frame.version}")
        self._theirs = frame.nonce
        return Proof(self._mac(dialer=True)) if self.dialer else None

    def on_proof(self, frame: Proof) -> Proof | None:
        """The peer's PROOF: check it; the listener answers with its own.

        Raises:
            AuthenticationFailed: the proof is wrong.
            LinkError: a PROOF out of turn.
        """
        if self._theirs is None or self.authenticated:
            raise LinkError("PROOF out of turn")
        if not hmac.compare_digest(frame.mac, self._mac(dialer=not self.dialer)):
            raise AuthenticationFailed(f"{self.kind} credential refused")
        self.authenticated = True
        return None if self.dialer else Proof(self._mac(dialer=False))

    def _mac(self, *, dialer: bool) -> bytes:
        """The proof the side in the given role sends on this link."""
        assert self._theirs is not None
        ours, theirs = self.nonce, self._theirs
        dialer_nonce, listener_nonce = (ours, theirs) if self.dialer else (theirs, ours)
        role = b"dialer" if dialer else b"listener"
        text = b"pubmesh %s proof from the %s\0" % (self.kind.encode(), role)
        return hmac.new(self._key, text + dialer_nonce + listener_nonce, hashlib.sha256).digest()
