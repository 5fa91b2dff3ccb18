"""The node's scripting state: one ``Engine`` per account (created when the account first runs or
loads a script), and the settings scripts run under."""

from __future__ import annotations

from typing import Final

from node.scripting.engine import Engine

__all__ = ["BUSY_REPLY_THRESHOLD_MS", "Scripts"]

BUSY_REPLY_THRESHOLD_MS: Final = 5000
"""redis-server's default ``busy-reply-threshold`` (``lua-time-limit``)."""


class Scripts:
    """Every account's scripting runtime on this node."""

    def __init__(self) -> None:
        self._engines: dict[str, Engine] = {}
        self.busy_reply_threshold_ms = BUSY_REPLY_THRESHOLD_MS
        """How long a script runs before other clients are answered BUSY (``lua-time-limit``)."""

    def engine(self, account: str, version: str) -> Engine:
        """The account's runtime (made on first use, reporting ``version`` as REDIS_VERSION)."""
        engine = self._engines.get(account)
        if engine is None:
            engine = self._engines[account] = Engine(version=version)
        return engine
