"""The README's examples work as written, so the front page cannot drift from the code."""

import re
import tomllib
from pathlib import Path

import pytest

from node.config import from_mapping

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
CONFIGS = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_example_runs(code: str) -> None:
    exec(compile(code, str(README), "exec"), {})


@pytest.mark.parametrize("text", CONFIGS)
def test_readme_configuration_loads(text: str) -> None:
    config = from_mapping(tomllib.loads(text))
    assert config.server_name
