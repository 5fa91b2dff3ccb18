"""The SparkSession the demo and the benchmarks start (``spark-submit`` makes its own)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SHUFFLE_PARTITIONS", "spark_session"]

SHUFFLE_PARTITIONS = 4
"""Small data, few cores: Spark's default of 200 would spend most of a micro-batch on empty tasks
(and a streaming query keeps that many state stores)."""


def spark_session(master: str, name: str) -> SparkSession:
    """A session on ``master`` with the ``pubmesh`` format registered; on a local master everything
    stays on 127.0.0.1."""
    from pyspark.sql import SparkSession

    from pipeline.spark import PubmeshDataSource

    builder = (
        SparkSession.builder.master(master)
        .appName(name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.session.timeZone", "UTC")
    )
    # Python workers (the driver's, which plans the data source, and the executors') run this
    # interpreter unless told otherwise: it has the pipeline package.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PubmeshDataSource)
    return spark
