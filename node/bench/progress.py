"""A one-line progress bar on stderr, so a long run shows it is alive.

Only on a terminal: redirected output (``make bench > results.md``, CI logs) stays free of carriage
returns. Short runs never draw it at all, since it only appears after ``DELAY`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]

DELAY = 0.5
WIDTH = 30


class ProgressBar:
    """Called with (done, total) as a run goes; erases its line when the ``with`` block ends.

    Without a stream it draws nothing, so callers need not care whether there is a terminal.
    """

    def __init__(self, label: str, stream: TextIO | None) -> None:
        self.label = label
        self.stream = stream
        self._since = time.monotonic()
        self._drawn = False

    @classmethod
    def on_terminal(cls, label: str) -> ProgressBar:
        """A bar on stderr if stderr is a terminal, else one that draws nothing."""
        return cls(label, sys.stderr if sys.stderr.isatty() else None)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._drawn and self.stream is not None:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if self.stream is None or time.monotonic() - self._since < DELAY:
            return
        share = min(1.0, done / total) if total else 1.0
        filled = round(share * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {share:4.0%} {done:,}/{total:,}\x1b[K")
        self.stream.flush()
        self._drawn = True
