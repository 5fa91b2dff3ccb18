"""The README's pipeline examples (its ``py`` blocks under *Data pipeline*) run as written, on the
suite's SparkSession: their ``getOrCreate()`` finds it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text()
SECTION = TEXT[TEXT.index("## Data pipeline (Spark)") : TEXT.index("## Security model")]
BLOCKS = re.findall(r"```py\n(.*?)```", SECTION, re.S)


def test_the_section_has_examples() -> None:
    assert BLOCKS


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("code", BLOCKS)
def test_readme_pipeline_example_runs(spark: SparkSession, code: str) -> None:
    exec(compile(code, str(README), "exec"), {})
