"""Mirrors that start from the source's rows: the snapshot at T0 is cut T0 of every mirror.

The stream starts at T0 (its configured start, or its first tick), and the database already holds
rows then. :func:`load_snapshot` writes each watched table's rows as read at T0 as the whole of its
mirror, then publishes cut T0 in the manifest, recording every mirror's version. Cuts after it apply
(T0, T]: a commit at T0 is in the snapshot and is never applied again (DESIGN invariant 8).

A rebuild is the same at the lake's latest cut, for some tables: their mirrors are replaced by their
rows at that cut and the manifest records their new versions at it; the next cut applies what came
after. A table's history keeps every version it had: those open at the cut are closed at it, and
the rows at the cut open new ones (``history.reseed_history``), in the table's columns at the cut
(the history keeps the columns the table dropped, and casts those it retyped:
``history.evolve_history``). That repairs a drifted mirror, and gives a table added to the stream later
(``ALTER CHANGE STREAM … SET FOR …``) the rows it had before (``lake_steps`` does it at the first cut
that finds the table watched).

The rows are read by Spark tasks, one per partition Spanner split the read into, all inside one
read-only transaction (``changestream.table_snapshot``): the snapshot scales with the executors. A
small table (up to ``DRIVER_ROWS`` rows) is read by the driver, which hands Spark its rows as Arrow:
that costs no Python worker, and starting those took most of a small snapshot's time. The driver
finds out by reading: past ``DRIVER_ROWS`` it drops what it read and leaves the table to the
tasks, so a large table pays for at most that many rows twice. A crash
before the manifest append leaves mirrors but no cut: the next lake run takes the snapshot again
and overwrites them, and no cut is published before it commits.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from cs_platform.changestream.catalog import WatchedTable
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.table_snapshot import SnapshotPartition, SnapshotPlan, read_partition
from cs_platform.lake.delta import USER_METADATA, session_conf
from cs_platform.lake.history import evolve_history, reseed_history
from cs_platform.lake.mirrors import column_types_by_table, replace_mirror, typed_rows
from cs_platform.lake.published import cut_record
from cs_platform.lake.stream_lake import Lake, StaleSnapshotError, plain_datetime
from cs_platform.landing.rows import column_types_json

ARROW_ROWS = 10_000  # rows per Arrow batch a task hands to Spark
PARALLEL_TABLES = 4  # mirrors a snapshot writes at once
DRIVER_ROWS = 20_000  # a table with at most this many rows is read by the driver, not by tasks


@dataclass(frozen=True)
class SnapshotResult:
    cut: datetime
    rows: dict[str, int]  # per table
    versions: dict[str, int]
    partitions: int  # read partitions (Spark tasks)
    seconds: float


def load_snapshot(lake: Lake, target: SpannerTarget, plan: SnapshotPlan, shapes: dict[str, str] | None = None) -> SnapshotResult:
    """Write every table of ``plan`` as its mirror at the plan's timestamp, then record them in the
    manifest at that cut, with ``shapes`` (their digests, ``PublishedCut``): the lake's first cut,
    or its latest one (a rebuild, module docstring)."""
    began = time.monotonic()
    published = lake.last_published()
    if published is not None and published.cut != plain_datetime(plan.read_timestamp):
        raise StaleSnapshotError(
            f"a snapshot of a lake with cuts must be read at its latest cut {published.cut.isoformat()}, not at "
            f"{plan.read_timestamp.isoformat()}: nothing was written"
        )

    def load(table: WatchedTable) -> tuple[int, int]:
        columns = table_columns(table)
        read = read_rows(lake.spark, target, plan, plan.of(table.name))
        version, rows = replace_mirror(lake.spark, lake.mirror(table.name), typed_rows(read, columns), columns)
        if lake.history.keeps(table.name):  # one SNAPSHOT version per row, from the mirror just written; earlier versions kept
            reseed_history(lake.spark, lake.history_table(table.name), lake.mirror(table.name).read(lake.spark, version), columns, cut)
        return version, rows

    # The tables are written side by side: one table's reads, commit and log reads overlap another's.
    # Their commits name the cut they are written at (set once on the session: SQL commits take it from there).
    cut = plain_datetime(plan.read_timestamp)
    record = cut_record(cut, published.previous if published else None)
    workers = min(len(plan.tables), PARALLEL_TABLES) or 1
    # Existing histories first take the tables' columns (a reshape), a write group of their own;
    # then one group (``lake.fence``): a table's mirror and its history are two tables, each written once.
    histories = [t for t in plan.tables if lake.history.keeps(t.name) and lake.history_table(t.name).exists()]
    with session_conf(lake.spark, {USER_METADATA: record}):
        if histories:
            with lake.fence.writing(), ThreadPoolExecutor(min(len(histories), PARALLEL_TABLES), thread_name_prefix="snapshot") as pool:
                list(pool.map(lambda t: evolve_history(lake.spark, lake.history_table(t.name), table_columns(t)), histories))
        with lake.fence.writing(), ThreadPoolExecutor(workers, thread_name_prefix="snapshot") as pool:
            loaded = dict(zip((t.name for t in plan.tables), pool.map(load, plan.tables)))
    versions = {table: version for table, (version, _) in loaded.items()}
    rows = {table: count for table, (_, count) in loaded.items()}
    lake.publish_snapshot(plan.read_timestamp, versions, shapes)
    return SnapshotResult(plan.read_timestamp, rows, versions, len(plan.partitions), round(time.monotonic() - began, 2))


def table_columns(table: WatchedTable) -> dict[str, dict]:
    """``table``'s watched columns as the lake describes them (``mirrors.column_types_by_table``):
    what its rows read at a timestamp are typed by."""
    return column_types_by_table([(table.name, column_types_json(table.columns))])[table.name]


def read_rows(spark: SparkSession, target: SpannerTarget, plan: SnapshotPlan, partitions: list[SnapshotPartition]) -> DataFrame:
    """The rows of ``partitions`` (one table's), a text column per table column: read here in the
    driver if they are few (module docstring), else each partition by one Spark task."""
    names = [c.name for c in partitions[0].table.columns] if partitions else []
    schema = pa.schema([(name, pa.string()) for name in names])
    spark_schema = StructType([StructField(n, StringType()) for n in names])

    def batches(rows: Iterator[tuple]) -> Iterator[pa.RecordBatch]:
        while chunk := list(islice(rows, ARROW_ROWS)):
            yield pa.RecordBatch.from_arrays([pa.array(column, pa.string()) for column in zip(*chunk)], schema=schema)

    def read(numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                yield from batches(read_partition(target, plan, partitions[number]))

    rows = list(islice((row for p in partitions for row in read_partition(target, plan, p)), DRIVER_ROWS + 1))
    if len(rows) <= DRIVER_ROWS:
        return spark.createDataFrame(pa.Table.from_batches(list(batches(iter(rows))), schema=schema), schema=spark_schema)
    return spark.range(0, len(partitions), 1, len(partitions)).mapInArrow(read, spark_schema)
