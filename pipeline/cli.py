"""``pubmesh pipeline demo`` and ``pubmesh pipeline bench``: loaded only when asked (they need the
``spark`` extra)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

USAGE = "usage: pubmesh pipeline {demo,bench} [options]  (--help after either for its options)"


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in ("demo", "bench"):
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] == "demo":
        from pipeline.demo import main as demo_main

        return demo_main(argv[1:])
    from pipeline.bench import main as bench_main

    return bench_main(argv[1:])
