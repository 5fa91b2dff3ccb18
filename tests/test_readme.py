"""The README's Python examples run as written, so the front page cannot drift from the code."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS)
def test_readme_example_runs(code: str) -> None:
    exec(compile(code, str(README), "exec"), {})
