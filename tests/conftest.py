"""Suite-wide settings: Hypothesis profiles sized for a 2-core machine, no per-example deadlines.

Every test runs under pytest-timeout's wall-clock bound (``timeout`` in pyproject.toml); tests that
need a tighter one say so with ``@pytest.mark.timeout``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
