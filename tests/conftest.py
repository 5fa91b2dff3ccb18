"""Suite-wide settings: Hypothesis profiles sized for a 2-core machine, no per-example deadlines.

Every test runs under pytest-timeout's wall-clock bound (``timeout`` in pyproject.toml); tests that
need a tighter one say so with ``@pytest.mark.timeout``. Tests that start processes or run long are
marked ``slow``, so that ``pytest -m "not slow"`` (``make unit-fast``) is the quick run.
"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from transport.wake_order import keep_wake_order

# Tests run trio as a node does, woken tasks in wake order, from the start (pytest-trio would shuffle
# each batch instead, and the first node a test starts would switch the rest of the run over).
keep_wake_order()

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


PACKAGES = ("routing", "transport", "node", "cluster", "pipeline")
"""The packages whose modules may be compiled (setup.py's ``HOT_PATH`` names modules in them)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test stale compiled modules: an extension older than its source would run old code.

    The publish path is compiled with mypyc (see setup.py); ``make`` rebuilds it when a source
    changes, but a bare ``pytest`` after an edit would silently test the previous build.
    """
    root = Path(__file__).resolve().parent.parent
    for source in (path for package in PACKAGES for path in (root / package).rglob("*.py")):
        for built in source.parent.glob(source.stem + ".*.so"):
            if built.stat().st_mtime < source.stat().st_mtime:
                pytest.exit(f"{built.name} is older than {source.name}: rebuild with `make`", 2)
