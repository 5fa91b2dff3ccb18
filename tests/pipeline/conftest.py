"""One local SparkSession for the whole suite (a JVM start costs seconds on a small machine), and a
live node with a Redis port for the data source to read and write.

The Spark tests are skipped, saying why, only when PySpark (the ``spark`` extra) or Java is missing;
``make test`` installs the extra and CI installs Java.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.live import LiveNode, live_node

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MISSING = (
    "pyspark is not installed (pip install -e '.[spark]')"
    if importlib.util.find_spec("pyspark") is None
    else "java is not installed (apt-get install openjdk-17-jre-headless)"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME")
    else None
)
needs_spark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def local_session(name: str) -> SparkSession:
    """A local SparkSession on loopback with the pubmesh source registered (the test process's and
    the streaming job's that tests kill)."""
    from pyspark.sql import SparkSession

    from pipeline.spark import PubmeshDataSource

    # Executors run this interpreter, so they import the same pipeline package.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the JVM binds and advertises loopback only
    session = (
        SparkSession.builder.master("local[2,2]")  # two threads; a failed task is retried once
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(PubmeshDataSource)
    return session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if MISSING is not None:
        pytest.skip(MISSING)
    session = local_session("pubmesh-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node() -> Iterator[LiveNode]:
    with live_node(redis=True) as running:
        yield running
