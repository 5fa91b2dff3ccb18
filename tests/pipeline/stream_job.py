"""A streaming job in a process of its own, for tests that SIGKILL its driver: pubmesh stream
``source`` to pubmesh stream ``sink`` through a checkpoint, run until no entries are left
(Trigger.AvailableNow), small micro-batches so that a kill lands in the middle of the work.

    python -m tests.pipeline.stream_job URL SOURCE SINK CHECKPOINT
"""

from __future__ import annotations

import sys

from tests.pipeline.conftest import local_session

BATCH = 100
"""maxRecordsPerTrigger."""


def main(url: str, source: str, sink: str, checkpoint: str) -> None:
    spark = local_session("pubmesh-stream-job")
    rows = (
        spark.readStream.format("pubmesh")
        .option("url", url)
        .option("stream", source)
        .option("maxRecordsPerTrigger", BATCH)
        .option("partitions", 2)
        .load()
    )
    query = (
        rows.writeStream.format("pubmesh")
        .option("url", url)
        .option("stream", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
