"""The memory this process holds, as the operating system counts it (what /varz's ``mem`` and
INFO memory's ``used_memory_rss`` report)."""

from __future__ import annotations

import os
import resource

__all__ = ["resident_bytes"]


def resident_bytes() -> int:
    """Resident set size now; where /proc is missing, the peak the kernel reports instead."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
