"""The watched tables read at one timestamp, in partitions, as rows in the change stream's encoding.

Seed 003's full + incremental load, made exact by Spanner: a read at timestamp T0 and a change
stream from T0 on meet with no gap and no overlap (the read holds every commit at or before T0; a
cut after it applies commits after T0). Spanner splits each table's query into partitions
(``BatchSnapshot.generate_query_batches``); a partition is read by whoever holds the plan, in any
process, inside the same read-only transaction (``BatchSnapshot.to_dict``/``from_dict``), so the
lake reads them in parallel Spark tasks.

Each value comes out undecoded, in the wire encoding a read shares with the change stream, as the
text the lake casts (``values.read_text``): a value has one encoding whichever way it arrived, and
the lake types both with the same expressions.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.database import BatchSnapshot, Database

from cs_platform.changestream.catalog import WatchedTable, version_retention
from cs_platform.changestream.connection import SpannerTarget, database_dialect
from cs_platform.changestream.errors import SnapshotTooOldError, WatchedTableMissingError
from cs_platform.changestream.metadata import utc_now
from cs_platform.changestream.query import quote_identifier, quote_table
from cs_platform.changestream.values import read_text


@dataclass(frozen=True)
class SnapshotPartition:
    """One partition of one table's read: what one task reads."""

    table: WatchedTable
    batch: dict[str, Any]  # a query batch of ``BatchSnapshot.generate_query_batches``


@dataclass(frozen=True)
class SnapshotPlan:
    """A read of ``tables`` at ``read_timestamp``, split into partitions, in one transaction."""

    read_timestamp: datetime
    transaction: dict[str, Any]  # ``BatchSnapshot.to_dict()``: every reader joins this transaction
    tables: tuple[WatchedTable, ...]
    partitions: tuple[SnapshotPartition, ...]

    def of(self, table: str) -> list[SnapshotPartition]:
        return [p for p in self.partitions if p.table.name == table]


def check_retention(database: Database, read_timestamp: datetime, what: str) -> None:
    """Raise :class:`SnapshotTooOldError` if Spanner no longer serves reads at ``read_timestamp``."""
    kept = version_retention(database)
    age = utc_now() - read_timestamp
    if age >= kept:
        raise SnapshotTooOldError(
            f"{what} reads the tables at {read_timestamp.isoformat()}, {age.total_seconds():.0f} s ago, but database "
            f"{database.database_id!r} keeps versions for only {kept.total_seconds():.0f} s (version_retention_period): "
            f"nothing was written. Raise it (ALTER DATABASE `{database.database_id}` SET OPTIONS "
            "(version_retention_period = '7d')) before starting a stream with an older start, or start the "
            "stream over with a newer start (or none: the first read's time).",
            fixed_by=("start", "start_over"),
        )


def plan_snapshot(database: Database, tables: list[WatchedTable], read_timestamp: datetime) -> tuple[BatchSnapshot, SnapshotPlan]:
    """Open the read-only transaction at ``read_timestamp`` (within the retention:
    :func:`check_retention`) and split every table's read; close the returned ``BatchSnapshot``
    once every partition has been read."""
    snapshot = database.batch_snapshot(read_timestamp=read_timestamp)
    dialect = database_dialect(database)
    partitions = []
    try:
        for table in tables:
            names = ", ".join(quote_identifier(c.name, "column name", dialect) for c in table.columns)
            sql = f"SELECT {names} FROM {quote_table(table.name, dialect)}"
            with _named_errors(read_timestamp, table.name):
                partitions += [SnapshotPartition(table, batch) for batch in snapshot.generate_query_batches(sql)]
    except BaseException:
        snapshot.close()
        raise
    return snapshot, SnapshotPlan(read_timestamp, snapshot.to_dict(), tuple(tables), tuple(partitions))


def read_partition(target: SpannerTarget, plan: SnapshotPlan, partition: SnapshotPartition) -> Iterator[tuple[str | None, ...]]:
    """The rows of one partition, each value as the text the lake casts (``values.read_text``), in
    the order of the table's columns. Values are not decoded by the client: a read carries them in
    the wire encoding already, and decoding them is most of a read's cost."""
    snapshot = BatchSnapshot.from_dict(target.connect(), plan.transaction)
    with _named_errors(plan.read_timestamp, partition.table.name):
        for row in snapshot.process_query_batch(partition.batch, lazy_decode=True):
            yield tuple(map(read_text, row))


@contextmanager
def _named_errors(read_timestamp: datetime, table: str) -> Iterator[None]:
    """Spanner's refusals of a read at ``read_timestamp`` as named errors that say what to do."""
    try:
        yield
    except gexc.FailedPrecondition as e:
        if "staleness" not in str(e) and "too old" not in str(e).lower():
            raise
        raise SnapshotTooOldError(
            f"Spanner no longer serves reads at {read_timestamp.isoformat()} ({e.message}): raise the database's "
            "version_retention_period or start the stream over with a newer start; nothing was written.",
            fixed_by=("start", "start_over"),
        ) from e
    except (gexc.NotFound, gexc.InvalidArgument) as e:
        if "not found" not in str(e).lower():
            raise
        raise WatchedTableMissingError(
            f"table {table!r}, watched by the change stream, cannot be read at {read_timestamp.isoformat()} "
            f"({e.message}): it was dropped or renamed; change the stream (ALTER CHANGE STREAM … SET FOR …) "
            "and start it anew; nothing was written"
        ) from e
