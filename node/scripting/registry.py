"""The node's scripting state: one ``Engine`` per account (created when the account first runs or
loads a script), the settings scripts run under, and the script running now.

A script runs on the node's only thread, so nothing else is served while it runs. Past
``busy_reply_threshold_ms`` the running script's ticks call ``while_busy``, which the I/O side
installs: it reads the other clients' sockets without waiting and answers them as redis-server
answers clients while a script is busy (BUSY, or SCRIPT KILL and FUNCTION KILL acted on)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from node.scripting.engine import MAX_MEMORY, Engine

__all__ = ["BUSY_REPLY_THRESHOLD_MS", "Running", "Scripts"]

BUSY_REPLY_THRESHOLD_MS: Final = 5000
"""redis-server's default ``busy-reply-threshold`` (``lua-time-limit``)."""


class Running(Protocol):
    """The script running now, as SCRIPT KILL and the busy replies see it."""

    @property
    def caller(self) -> object:
        """The connection that ran it."""
        ...

    @property
    def eval_mode(self) -> bool:
        """An EVAL script (else a function run by FCALL)."""
        ...

    @property
    def dirty(self) -> bool:
        """It has written (it can no longer be killed)."""
        ...

    killed: bool
    """SCRIPT KILL or FUNCTION KILL asked it to stop."""


def _nobody_else() -> None:
    """``while_busy`` until the I/O side installs its own: no other client to serve."""


class Scripts:
    """Every account's scripting runtime on this node."""

    def __init__(self) -> None:
        self._engines: dict[str, Engine] = {}
        self.busy_reply_threshold_ms = BUSY_REPLY_THRESHOLD_MS
        """How long a script runs before other clients are answered BUSY (``lua-time-limit``)."""
        self.max_memory = MAX_MEMORY
        """The most memory a runtime made from now on may hold."""
        self.running: Running | None = None
        self.clients: dict[str, object] = {}
        """What each account's scripts run their commands through, kept from one script to the
        next (the commands' layer makes it)."""
        self.while_busy: Callable[[], None] = _nobody_else
        """Serve the other clients once without waiting (called while a script is busy)."""

    def made(self, account: str) -> Engine | None:
        """The account's runtime, if one has been made."""
        return self._engines.get(account)

    def engine(self, account: str, version: str, double_text: Callable[[float], bytes]) -> Engine:
        """The account's runtime (made on first use, reporting ``version`` as REDIS_VERSION and
        writing a number a script hands to a command with ``double_text``)."""
        engine = self._engines.get(account)
        if engine is None:
            engine = Engine(version=version, double_text=double_text, max_memory=self.max_memory)
            self._engines[account] = engine
        return engine
