"""Who a connecting client is: credentials checked against the configured users."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from node.config import Config, UserConfig

__all__ = ["ANONYMOUS", "Authenticator"]

ANONYMOUS = UserConfig()
"""Everyone, when no users are configured: the global account, no restrictions."""


def _same(given: Any, expected: str | None) -> bool:
    """Constant-time comparison, so response times do not leak how much of a secret matched.

    A credential that is not valid Unicode (CONNECT passes lone surrogates and bytes that are not
    UTF-8 on as sent) matches nothing: it fails authentication like any wrong one.
    """
    if not isinstance(given, str) or expected is None:
        return False
    try:
        sent = given.encode()
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(sent, expected.encode())


class Authenticator:
    """Maps a CONNECT's credentials to a configured user (and so to an account and permissions)."""

    def __init__(self, config: Config) -> None:
        self._users = {u.user: u for u in config.users if u.user is not None}
        self._tokens = [u for u in config.users if u.token is not None]
        self._no_auth_user = self._users.get(config.no_auth_user) if config.no_auth_user else None
        self.required = bool(config.users)
        self._by_certificate = config.tls is not None and config.tls.verify_and_map

    def knows(self, name: Any) -> bool:
        """Whether ``name`` is a configured user (whatever password goes with it)."""
        return isinstance(name, str) and name in self._users

    def authenticate(self, options: dict[str, Any], certified: Sequence[str] = ()) -> UserConfig | None:
        """The user these CONNECT options (or, with ``verify_and_map``, the names ``certified`` by
        the client's TLS certificate) prove to be, or None for an ``Authorization Violation``."""
        if not self.required:
            return ANONYMOUS
        if self._by_certificate:
            return next((self._users[n] for n in certified if n in self._users), None)
        name = options.get("user")
        if name:
            user = self._users.get(name) if isinstance(name, str) else None
            if user is not None and _same(options.get("pass"), user.password):
                return user
            return None
        token = options.get("auth_token")
        if token:
            for user in self._tokens:
                if _same(token, user.token):
                    return user
            return None
        return self._no_auth_user
