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

import pyarrow as pa
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
from pipeline.streams import Slice, StagedWrite, check_stream, field_pairs, plan, read_pages


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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One Arrow batch per XRANGE page: Spark takes columns several times faster than rows."""
        assert isinstance(partition, SlicePartition)
        part = partition.part
        if part is None:
            return
        schema = _arrow_schema(self.options.binary)
        with self.options.endpoint.connect() as client:
            for page in read_pages(client, part, self.options.page):
                ids = [entry_id.decode() for entry_id, _ in page]
                offsets = [0]
                for _, pairs in page:
                    offsets.append(offsets[-1] + len(pairs))
                names = _text([k for _, pairs in page for k, _ in pairs])
                raw = [v for _, pairs in page for _, v in pairs]
                values = pa.array(raw, pa.binary()) if self.options.binary else _text(raw)
                columns = [
                    pa.array([part.stream] * len(page), pa.string()),
                    pa.array(ids, pa.string()),
                    pa.array([StreamId.parse(i).ms * 1000 for i in ids], schema.field("timestamp").type),
                    pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names, values),
                ]
                yield pa.RecordBatch.from_arrays(columns, schema=schema)


def _text(items: list[bytes]) -> pa.Array:
    """UTF-8 strings as Spark strings; anything else decoded with replacement characters."""
    try:
        return pa.array(items, pa.binary()).cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([item.decode(errors="replace") for item in items], pa.string())


def _arrow_schema(binary: bool) -> pa.Schema:
    value = pa.binary() if binary else pa.string()
    return pa.schema(
        [
            pa.field("stream", pa.string(), nullable=False),
            pa.field("id", pa.string(), nullable=False),
            pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field(
                "fields", pa.map_(pa.string(), pa.field("value", value, nullable=False)), nullable=False
            ),
        ]
    )


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
