"""Where a node's log goes, in nats-server's line format, and how it follows logrotate.

Lines go to stderr, or to a file (``-l``/``log_file``), appended to. Log rotation renames the
file and sends SIGUSR1: ``LogOutput.reopen`` then opens the path afresh, so new lines land in a new
file while the renamed one keeps what was written before.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TextIO

__all__ = ["LogOutput", "ServerLogFormat", "log"]

log = logging.getLogger("pubmesh")

_LEVELS = {"DEBUG": "DBG", "INFO": "INF", "WARNING": "WRN", "ERROR": "ERR", "CRITICAL": "FTL"}


class ServerLogFormat(logging.Formatter):
    """``[pid] 2026/11/22 07:05:00.123456 [INF] text``, the shape of nats-server's log lines."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int(record.msecs * 1000)
        level = _LEVELS.get(record.levelname, record.levelname[:3])
        return f"[{os.getpid()}] {stamp}.{micros:06d} [{level}] {record.getMessage()}"


class LogOutput:
    """The ``pubmesh`` logger's one handler: stderr, or a file that can be reopened or changed."""

    def __init__(self) -> None:
        self._handler: logging.StreamHandler[TextIO] = logging.StreamHandler(sys.stderr)
        self._handler.setFormatter(ServerLogFormat())
        self.path: str | None = None
        log.handlers[:] = [self._handler]
        log.propagate = False
        log.setLevel(logging.INFO)

    def set_debug(self, debug: bool) -> None:
        log.setLevel(logging.DEBUG if debug else logging.INFO)

    def use(self, path: str | None) -> None:
        """Log to ``path`` from now on (None: stderr).

        Raises:
            OSError: the file cannot be opened for appending (the output stays as it was).
        """
        stream = open(path, "a", encoding="utf-8", buffering=1) if path else sys.stderr  # noqa: SIM115
        old = self._handler.setStream(stream)
        self.path = path
        if old is not None and old is not sys.stderr and old is not stream:
            old.close()

    def reopen(self) -> None:
        """Open the log file's path again (after logrotate renamed it); stderr needs nothing.

        Raises:
            OSError: the path cannot be opened; the old file stays in use.
        """
        if self.path is not None:
            self.use(self.path)

    def close(self) -> None:
        self.use(None)
