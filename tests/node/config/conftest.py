"""The configuration tests' certificates: a CA and one for ``node``, made once per module."""

from __future__ import annotations

import pytest

from tests.certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"), "node")
