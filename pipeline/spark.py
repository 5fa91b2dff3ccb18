"""``PubmeshDataSource``: pubmesh (and Redis) streams as a Spark data source, format ``"pubmesh"``.

Register it with ``spark.dataSource.register(PubmeshDataSource)``. Reads split each stream's ID range
into ``partitions`` slices that executors read in parallel with paged XRANGE calls; writes turn each
row into one entry.

Batch writes are all or nothing as far as Spark's failures go: each task attempt stages its rows in a
stream of its own, and only the driver's commit appends the successful attempts' staging streams to the
target (in partition order) and drops every staging stream, so a retried or speculative task never
doubles a row and a failed job adds nothing. What is not covered: a server failure or a driver crash
during that commit leaves a prefix of the partitions appended (the job then fails, and its remaining
staging streams, ``<stream>:pubmesh-write:<job>:*``, stay for inspection).

Streaming reads will keep offsets as the last-read ID per stream, so ``Slice`` ranges serve them too.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.options import OptionError, ReadOptions, StreamId, read_options, write_options
from pipeline.streams import Slice, StagedWrite, check_stream, field_pairs, plan, read_slice


def _schema(binary: bool) -> StructType:
    value = BinaryType() if binary else StringType()
    return StructType(
        [
            StructField("stream", StringType(), nullable=False),
            StructField("id", StringType(), nullable=False),
            StructField("timestamp", TimestampType(), nullable=False),
            StructField("fields", MapType(StringType(), value, valueContainsNull=False), nullable=False),
        ]
    )


class PubmeshDataSource(DataSource):
    """The ``pubmesh`` format: options ``url``, ``stream``; reads also ``start``, ``end``,
    ``partitions``, ``binary``, ``pageSize``."""

    @classmethod
    def name(cls) -> str:
        return "pubmesh"

    def schema(self) -> StructType:
        return _schema(read_options(self.options).binary)

    def reader(self, schema: StructType) -> DataSourceReader:
        return PubmeshReader(read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode", "overwrite is not supported: a stream is appended to")
        options = write_options(self.options)
        with options.endpoint.connect() as client:
            kind = client.call("TYPE", options.stream)
        if kind not in (b"none", b"stream"):
            raise OptionError("stream", f"{options.stream!r} holds a {kind!r}, not a stream")
        return PubmeshWriter(StagedWrite(options.endpoint, options.stream, uuid.uuid4().hex))


class SlicePartition(InputPartition):
    def __init__(self, part: Slice | None) -> None:
        super().__init__(part)
        self.part = part


class PubmeshReader(DataSourceReader):
    """Plans on the driver (every stream must exist), reads on the executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        with options.endpoint.connect() as client:
            for stream in options.streams:
                check_stream(client, stream)

    def partitions(self) -> list[InputPartition]:
        o = self.options
        with o.endpoint.connect() as client:
            parts = [
                s for stream in o.streams for s in plan(client, stream, o.start, o.end, o.partitions)
            ]
        # Spark wants at least one partition, even for a range with nothing in it.
        return [SlicePartition(part) for part in parts] or [SlicePartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        assert isinstance(partition, SlicePartition)
        part = partition.part
        if part is None:
            return
        binary = self.options.binary
        with self.options.endpoint.connect() as client:
            for entry_id, pairs in read_slice(client, part, self.options.page):
                text = entry_id.decode()
                ms = StreamId.parse(text).ms
                when = datetime.fromtimestamp(ms / 1000, tz=UTC)
                fields = {
                    k.decode(errors="replace"): v if binary else v.decode(errors="replace")
                    for k, v in pairs
                }
                yield part.stream, text, when, fields


@dataclasses.dataclass
class Staged(WriterCommitMessage):
    partition: int
    key: str
    rows: int


class PubmeshWriter(DataSourceWriter):
    def __init__(self, staged: StagedWrite) -> None:
        self.staged = staged

    def write(self, iterator: Iterator[Row]) -> Staged:
        context = TaskContext.get()
        partition, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
        rows = (field_pairs(row.asDict()) for row in iterator)
        key, count = self.staged.stage(partition, attempt, rows)
        return Staged(partition, key, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        staged = sorted((m for m in messages if isinstance(m, Staged)), key=lambda m: m.partition)
        self.staged.commit(m.key for m in staged)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staged.abort()
