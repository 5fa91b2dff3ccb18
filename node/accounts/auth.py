"""Who a connecting client is: credentials checked against the configured users.

A configured password or token may be a bcrypt hash (``$2a$``, ``$2b$`` or ``$2y$``, as nats-server
takes them: ``nats server passwd`` makes them). Checking one costs tens to hundreds of milliseconds
by design, far too long for the event loop, so ``authenticate`` hands such a check back as a
``Verification`` for the server to run in a worker thread.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import attrs
import bcrypt

from node.config.options import Config, UserConfig

__all__ = [
    "ANONYMOUS",
    "BCRYPT_PREFIXES",
    "VERDICTS_KEPT",
    "Authenticator",
    "Verification",
    "Verifying",
    "is_bcrypt",
]

ANONYMOUS = UserConfig()
"""Everyone, when no users are configured: the global account, no restrictions."""

BCRYPT_PREFIXES = ("$2a$", "$2b$", "$2y$")
VERDICTS_KEPT = 4096
"""bcrypt checks remembered (by a digest of secret and hash), so a client reconnecting with the same
credentials costs no second check."""

T = TypeVar("T")


def is_bcrypt(secret: str | None) -> bool:
    """Whether a configured password or token is a bcrypt hash rather than the secret itself."""
    return secret is not None and secret.startswith(BCRYPT_PREFIXES)


def _encoded(given: Any) -> bytes | None:
    """A credential as sent, or None if it is not valid Unicode (CONNECT passes lone surrogates and
    bytes that are not UTF-8 on as sent): such a credential matches nothing."""
    if not isinstance(given, str):
        return None
    try:
        return given.encode()
    except UnicodeEncodeError:
        return None


def _same(given: Any, expected: str | None) -> bool:
    """Constant-time comparison, so response times do not leak how much of a secret matched."""
    sent = _encoded(given)
    if sent is None or expected is None:
        return False
    return hmac.compare_digest(sent, expected.encode())


@attrs.frozen
class Verification:
    """A secret to check against bcrypt hashes: the first user whose hash it matches is the one."""

    secret: bytes
    candidates: tuple[tuple[UserConfig, bytes], ...]

    @property
    def key(self) -> bytes:
        """What the verdict is remembered by (a digest: no secret is kept)."""
        return hashlib.sha256(b"\0".join([self.secret, *(h for _, h in self.candidates)])).digest()

    def verify(self) -> UserConfig | None:
        """Run the (slow) check: meant for a worker thread."""
        for user, hashed in self.candidates:
            try:
                if bcrypt.checkpw(self.secret, hashed):
                    return user
            except ValueError:  # not a hash bcrypt can read: it matches nothing
                continue
        return None


class Verifying(Generic[T]):
    """A sign-in waiting for its bcrypt check: the server runs ``check`` in a worker thread,
    remembers the verdict (``Authenticator.remember``) and sets ``done``; the connection then does
    ``then`` again (a CONNECT's options, an AUTH command), which now finds the verdict at once."""

    __slots__ = ("check", "done", "then")

    def __init__(self, check: Verification, then: T) -> None:
        self.check = check
        self.then = then
        self.done = False


class Authenticator:
    """Maps a CONNECT's credentials to a configured user (and so to an account and permissions)."""

    def __init__(self, config: Config) -> None:
        self._users = {u.user: u for u in config.users if u.user is not None}
        tokens = [u for u in config.users if u.token is not None]
        self._tokens = [u for u in tokens if not is_bcrypt(u.token)]
        self._hashed_tokens = tuple((u, (u.token or "").encode()) for u in tokens if is_bcrypt(u.token))
        self._no_auth_user = self._users.get(config.no_auth_user) if config.no_auth_user else None
        self.required = bool(config.users)
        self._by_certificate = config.tls is not None and config.tls.verify_and_map
        self._verdicts: collections.OrderedDict[bytes, UserConfig | None] = collections.OrderedDict()

    def knows(self, name: Any) -> bool:
        """Whether ``name`` is a configured user (whatever password goes with it)."""
        return isinstance(name, str) and name in self._users

    def unchanged(self, user: UserConfig | None) -> UserConfig | None:
        """The configured user with exactly ``user``'s credentials (name and password, or token),
        if any: a reload keeps a bcrypt sign-in whose hash did not change without checking it
        again, which would hold up the event loop for every such client at once."""
        if user is None:
            return None
        if user.user is not None:
            found = self._users.get(user.user)
            return found if found is not None and found.password == user.password else None
        return next((u for u, hashed in self._hashed_tokens if u.token == user.token), None)

    def remember(self, check: Verification, user: UserConfig | None) -> None:
        """Keep the verdict of a bcrypt check (the oldest of ``VERDICTS_KEPT`` go)."""
        self._verdicts[check.key] = user
        if len(self._verdicts) > VERDICTS_KEPT:
            self._verdicts.popitem(last=False)

    def without_credentials(self) -> UserConfig | None:
        """Who a client is before (or without) a CONNECT: anyone where nobody must authenticate,
        else the ``no_auth_user`` if there is one."""
        if not self.required:
            return ANONYMOUS
        return None if self._by_certificate else self._no_auth_user

    def authenticate(
        self, options: dict[str, Any], certified: Sequence[str] = ()
    ) -> UserConfig | Verification | None:
        """The user these CONNECT options (or, with ``verify_and_map``, the names ``certified`` by
        the client's TLS certificate) prove to be, None for an ``Authorization Violation``, or the
        bcrypt check that decides it."""
        if not self.required:
            return ANONYMOUS
        if self._by_certificate:
            return next((self._users[n] for n in certified if n in self._users), None)
        name = options.get("user")
        if name:
            user = self._users.get(name) if isinstance(name, str) else None
            if user is None:
                return None
            if is_bcrypt(user.password):
                return self._verification(options.get("pass"), ((user, (user.password or "").encode()),))
            return user if _same(options.get("pass"), user.password) else None
        token = options.get("auth_token")
        if token:
            for user in self._tokens:
                if _same(token, user.token):
                    return user
            return self._verification(token, self._hashed_tokens)
        return self._no_auth_user

    def check_now(self, options: dict[str, Any]) -> UserConfig | None:
        """``authenticate``, running any bcrypt check at once (a test's shortcut: a connection
        leaves the check to a worker thread)."""
        user = self.authenticate(options)
        if isinstance(user, Verification):
            check, user = user, user.verify()
            self.remember(check, user)
        return user

    def _verification(
        self, given: Any, candidates: tuple[tuple[UserConfig, bytes], ...]
    ) -> UserConfig | Verification | None:
        """The check to run, or its verdict if it has been run before."""
        sent = _encoded(given)
        if sent is None or not candidates:
            return None
        check = Verification(sent, candidates)
        key = check.key
        if key not in self._verdicts:
            return check
        self._verdicts.move_to_end(key)
        return self._verdicts[key]
