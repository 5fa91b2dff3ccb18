"""``PubmeshDataSource``: pubmesh (and Redis) streams as a Spark data source, format ``"pubmesh"``.

Register it with ``spark.dataSource.register(PubmeshDataSource)``. Reads split each stream's ID range
into ``partitions`` slices that executors read in parallel with paged XRANGE calls; writes turn each
row into one entry.

Batch writes are all or nothing as far as Spark's failures go: each task attempt stages its rows in a
stream of its own, and only the driver's commit appends the successful attempts' staging streams to the
target (in partition order) and drops every staging stream, so a retried or speculative task never
doubles a row and a failed job adds nothing. What is not covered: a server failure or a driver crash
during that commit leaves a prefix of the partitions appended (the job then fails, and its remaining
staging streams, ``{<stream>}:pubmesh-write:<job>:*``, stay for inspection).

``url`` may name several nodes of one cluster, comma-separated: the driver uses the first that
answers, and partition ``n`` reads from node ``n`` (modulo their number), on that node's own replica
of the stream where keys are replicated (``pipeline.replicas``: ``READONLY``, once the replica holds
the whole slice).

Streaming reads (``spark.readStream.format("pubmesh")``) plan each micro-batch as the same ``Slice``
ranges, between offsets that hold the last ID read per stream (see ``pipeline.offsets``); they need
PySpark 4.2 or later, whose Python sources get admission control (``maxRecordsPerTrigger``) and
Trigger.AvailableNow. Streaming writes are exactly once per micro-batch (``BatchCommits``): the
batch and its commit marker land in one transaction, and a batch Spark replays adds nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.offsets import Json, Offsets, advance, from_json, initial, latest, losses, slices, to_json
from pipeline.options import (
    Endpoints,
    OptionError,
    ReadOptions,
    StreamId,
    StreamReadOptions,
    binary,
    read_options,
    stream_read_options,
    stream_write_options,
    write_options,
)
from pipeline.replicas import partition_client
from pipeline.resp import RespClient
from pipeline.streams import (
    BatchCommits,
    Slice,
    StagedWrite,
    check_stream,
    field_pairs,
    plan,
    read_pages,
)

log = logging.getLogger(__name__)


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
    """The ``pubmesh`` format: options ``url``, ``stream``; batch reads also ``start``, ``end``,
    ``partitions``, ``binary``, ``pageSize``; streaming reads ``partitions``, ``binary``,
    ``pageSize``, ``startingOffsets``, ``maxRecordsPerTrigger``, ``failOnDataLoss``; streaming
    writes ``commitKey`` (``pipeline.options.MODES``)."""

    @classmethod
    def name(cls) -> str:
        return "pubmesh"

    def schema(self) -> StructType:
        return _schema(binary(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return PubmeshReader(read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PubmeshStreamReader(stream_read_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode", "overwrite is not supported: a stream is appended to")
        options = write_options(self.options)
        with options.nodes.connect() as client:
            _check_target(client, options.stream)
        return PubmeshWriter(StagedWrite(options.nodes, options.stream, uuid.uuid4().hex))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Called on the driver when the query starts and again for every commit."""
        if overwrite:
            raise OptionError("outputMode", "complete is not supported: a stream is appended to")
        options = stream_write_options(self.options)
        with options.nodes.connect() as client:
            _check_target(client, options.stream)
        return PubmeshStreamWriter(BatchCommits(options.nodes, options.stream, options.commit_key))


def _check_target(client: RespClient, stream: str) -> None:
    kind = client.call("TYPE", stream)
    if kind not in (b"none", b"stream"):
        raise OptionError("stream", f"{stream!r} holds a {kind!r}, not a stream")


class SlicePartition(InputPartition):
    """A slice to read, and the partition's number (which node of ``url`` it reads from)."""

    def __init__(self, part: Slice | None, number: int = 0) -> None:
        super().__init__(part)
        self.part = part
        self.number = number


def _partitions(parts: list[Slice]) -> list[InputPartition]:
    return [SlicePartition(part, number) for number, part in enumerate(parts)]


class PubmeshReader(DataSourceReader):
    """Plans on the driver (every stream must exist), reads on the executors."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        with options.nodes.connect() as client:
            for stream in options.streams:
                check_stream(client, stream)

    def partitions(self) -> list[InputPartition]:
        o = self.options
        with o.nodes.connect() as client:
            parts = [
                s for stream in o.streams for s in plan(client, stream, o.start, o.end, o.partitions)
            ]
        # Spark wants at least one partition, even for a range with nothing in it.
        return _partitions(parts) or [SlicePartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        o = self.options
        return _read_slice(partition, o.nodes, o.binary, o.page)


def _read_slice(
    partition: InputPartition, nodes: Endpoints, binary: bool, page: int
) -> Iterator[pa.RecordBatch]:
    """One Arrow batch per XRANGE page: Spark takes columns several times faster than rows."""
    assert isinstance(partition, SlicePartition)
    part = partition.part
    if part is None:
        return
    schema = _arrow_schema(binary)
    with partition_client(nodes, partition.number, part) as client:
        for batch in read_pages(client, part, page):
            ids = [entry_id.decode() for entry_id, _ in batch]
            offsets = [0]
            for _, pairs in batch:
                offsets.append(offsets[-1] + len(pairs))
            names = _text([k for _, pairs in batch for k, _ in pairs])
            raw = [v for _, pairs in batch for _, v in pairs]
            values = pa.array(raw, pa.binary()) if binary else _text(raw)
            columns = [
                pa.array([part.stream] * len(batch), pa.string()),
                pa.array(ids, pa.string()),
                pa.array([StreamId.parse(i).ms * 1000 for i in ids], schema.field("timestamp").type),
                pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names, values),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)


class PubmeshStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of ID ranges per stream. Offsets (``{"stream": "ms-seq"}``) are the last ID read
    or skipped; ``maxRecordsPerTrigger`` caps the entries of one micro-batch, and under
    Trigger.AvailableNow the query ends at the last IDs generated when it started."""

    def __init__(self, options: StreamReadOptions) -> None:
        self.options = options
        self.target: Offsets | None = None
        """Under Trigger.AvailableNow: the end of the last micro-batch."""
        with options.read.nodes.connect() as client:
            for stream in options.read.streams:
                check_stream(client, stream)

    def _connect(self) -> RespClient:
        return self.options.read.nodes.connect()

    def _from_spark(self, offset: dict[str, object]) -> Offsets:
        return from_json(offset, self.options.read.streams)

    def initialOffset(self) -> Json:
        with self._connect() as client:
            return to_json(initial(client, self.options.starting))

    def prepareForTriggerAvailableNow(self) -> None:
        with self._connect() as client:
            self.target = latest(client, self.options.read.streams)

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.options.max_records
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def latestOffset(self, start: dict[str, object], limit: ReadLimit) -> Json:
        begin = self._from_spark(start)
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        with self._connect() as client:
            ceiling = self.target or latest(client, begin)
            return to_json(advance(client, begin, ceiling, budget, self.options.read.page))

    def reportLatestOffset(self) -> Json:
        with self._connect() as client:
            return to_json(latest(client, self.options.read.streams))

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> list[InputPartition]:
        """Checks for data loss first: this also runs when a micro-batch is replayed after a restart."""
        begin, until = self._from_spark(start), self._from_spark(end)
        with self._connect() as client:
            lost = losses(client, {s: begin[s] for s in begin if s in start})
            if lost and self.options.fail_on_data_loss:
                raise DataLossError(
                    "; ".join(lost) + " (set the option failOnDataLoss=false to read on from the "
                    "entries that are left)"
                )
            for problem in lost:
                log.warning("pubmesh data loss, reading on from what is left: %s", problem)
            parts = slices(client, begin, until, self.options.read.partitions)
        return _partitions(parts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        o = self.options.read
        return _read_slice(partition, o.nodes, o.binary, o.page)


class DataLossError(RuntimeError):
    """Entries after a committed offset were deleted before the query read them."""


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
        partition, attempt = _task()
        rows = (field_pairs(row.asDict()) for row in iterator)
        key, count = self.staged.stage(partition, attempt, rows)
        return Staged(partition, key, count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staged.commit(_committed_keys(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.staged.abort()


def _task() -> tuple[int, int]:
    """This task's partition and attempt number."""
    context = TaskContext.get()
    return (context.partitionId(), context.attemptNumber()) if context else (0, 0)


def _committed_keys(messages: list[WriterCommitMessage | None]) -> list[str]:
    staged = sorted((m for m in messages if isinstance(m, Staged)), key=lambda m: m.partition)
    return [m.key for m in staged]


BATCH_ID = "streaming.sql.batchId"
"""The local property in which Spark tells a task its micro-batch."""


class PubmeshStreamWriter(DataSourceStreamWriter):
    """Exactly once per micro-batch: tasks stage, the driver's commit appends and marks the batch
    in one transaction, and a batch Spark replays after a failure is a no-op (``BatchCommits``)."""

    def __init__(self, commits: BatchCommits) -> None:
        self.commits = commits

    def write(self, iterator: Iterator[Row]) -> Staged:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID) if context else None
        if batch is None:
            raise RuntimeError(f"Spark did not tell the task its micro-batch ({BATCH_ID})")
        partition, attempt = _task()
        rows = (field_pairs(row.asDict()) for row in iterator)
        key, count = self.commits.staged(int(batch)).stage(partition, attempt, rows)
        return Staged(partition, key, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self.commits.commit(batchId, _committed_keys(messages)):
            log.warning(
                "pubmesh: micro-batch %d was committed to %s before (%s); its replay adds nothing",
                batchId,
                self.commits.stream,
                self.commits.marker,
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.commits.staged(batchId).abort()
