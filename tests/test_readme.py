"""The README's examples work as written, so the front page cannot drift from the code."""

import re
import tomllib
from pathlib import Path

import pytest

from node.config.load import from_mapping, load
from node.config.options import Config
from tests.certs import make_certs

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
CONFIGS = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
NATS_CONFIGS = re.findall(r"```conf\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_example_runs(code: str) -> None:
    exec(compile(code, str(README), "exec"), {})


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the README's TLS examples name, made for real."""
    certs = make_certs(tmp_path_factory.mktemp("certs"), "server", "node")
    return certs.dir


@pytest.mark.parametrize("text", CONFIGS)
def test_readme_configuration_loads(
    text: str, certificates: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(certificates)
    config = from_mapping(tomllib.loads(text))
    assert config != Config()  # (it said something)


@pytest.mark.parametrize("text", NATS_CONFIGS)
def test_readme_nats_configuration_loads_as_its_toml_twin(text: str, tmp_path: Path) -> None:
    """Each nats-server-format example means what the TOML example before it means."""
    conf = tmp_path / "node.conf"
    conf.write_text(text)
    readme = README.read_text()
    twin = CONFIGS[max(i for i, c in enumerate(CONFIGS) if readme.index(c) < readme.index(text))]
    assert load(conf) == from_mapping(tomllib.loads(twin))
