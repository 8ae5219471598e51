"""The changelog: one Delta row per mod, ingested incrementally from landing files, exactly once.

Identity of a row is (server_transaction_id, record_sequence, mod_index). Ingest reads only files
not ingested before and MERGEs on identity, inserting only unseen changes, so re-ingesting a file, a
replayed read or a duplicate landed by a crash changes nothing. A duplicate change always carries
the same commit timestamp, so the MERGE matches only changelog rows inside the batch's commit
range (the new files' names bound it, and count their rows, without a Spark job): Delta skips
every file outside it (the table is clustered by commit timestamp), and the rows read follow the
batch, not the history.

Which landing files are ingested is recorded by the MERGE commit itself, in its ``userMetadata``:
per landing directory (one per partition), the last file name ingested. A partition's files are
named ``<query start>_<watermark>`` (pieces of a huge transaction by how far they reach into it:
``landing.store``), so its later reads sort after its earlier ones; a file that
sorts at or below the mark is a replay of a range already ingested (same query start, or a stale
run landing late), whose records the stream returns again identically. Ingest therefore reads only
the files above their directory's mark, and looks up the marks in the log, not in a table that
grows with every file. A MERGE that inserts nothing commits nothing: its files are read again next
time, all duplicates, until a MERGE with new rows records them. (A changelog from before the marks
has none: its next ingest reads every landing file once, and inserts only what is new.)

The same commit records a bound of the commit timestamps ingested so far (``latest_commit``: the
latest watermark the ingested files' names record): a cut above it has nothing to apply, which a lake run
cutting every few seconds over an idle stream then learns from the log, not from a scan.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.delta import DeltaPath
from cs_platform.lake.fence import Fence
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.published import MARKS
from cs_platform.lake.types import sql_timestamp
from cs_platform.landing.rows import IDENTITY, LANDING_COLUMNS, TIMESTAMP_PATTERN
from cs_platform.landing.store import PARQUET_SUFFIX, landed_range

# The landing files' columns as Spark reads them, given rather than inferred (inferring is a Spark job per ingest).
LANDED_COLUMNS = ", ".join(f"{quoted(name)} {kind}" for name, kind in LANDING_COLUMNS)

LATEST = "latest_commit"  # userMetadata key: no row ingested so far committed after this (ISO 8601)
CLUSTER_COLUMN = "commit_timestamp"  # what every ingest MERGE and every cut filters on


def _split(file: str) -> tuple[str, str]:
    directory, _, name = file.rpartition("/")
    return directory, name


def read_landed(spark: SparkSession, files: list[str]) -> DataFrame:
    """The rows of landing ``files``: JSON lines, and Parquet files of earlier versions beside them.
    A line that does not fit the landing columns fails the read (FAILFAST): never a row of nulls."""
    lines = [f for f in files if not f.endswith(PARQUET_SUFFIX)]
    parquet = [f for f in files if f.endswith(PARQUET_SUFFIX)]
    json_reader = spark.read.schema(LANDED_COLUMNS).option("mode", "FAILFAST").option("timestampFormat", TIMESTAMP_PATTERN)
    frames = [json_reader.json(lines)] if lines else []
    frames += [spark.read.schema(LANDED_COLUMNS).parquet(*parquet)] if parquet else []
    return functools.reduce(DataFrame.unionByName, frames)


def _latest_commit(recorded: dict) -> datetime | None:
    return datetime.fromisoformat(recorded[LATEST]) if LATEST in recorded else None


@dataclass(frozen=True)
class IngestResult:
    files: int  # landing files ingested now
    rows_read: int  # rows in those files
    rows_added: int  # rows new to the changelog; the rest repeated a change by its identity

    @property
    def duplicates(self) -> int:
        return self.rows_read - self.rows_added


class Changelog:
    def __init__(self, spark: SparkSession, table: DeltaPath, fence: Fence) -> None:
        self.spark = spark
        self.delta = table
        self.fence = fence  # every ingest is a fenced write (``lake.fence``)

    def exists(self) -> bool:
        return self.delta.exists()

    def table(self) -> DataFrame:
        return self.delta.read(self.spark)

    def latest_commit(self) -> datetime | None:
        """No row of the changelog was committed after this (from the log: no Spark job); None if
        nothing recorded it (no changelog yet, or one from before it was recorded)."""
        return _latest_commit(self.delta.last_commit_metadata() or {})

    def ingest(self, files: list[str]) -> IngestResult:
        """Add the changes of ``files`` (a stream's landing files) not already present."""
        recorded = self.delta.last_commit_metadata() or {}
        marks = recorded.get(MARKS, {})
        new = sorted(f for f in files if _split(f)[1] > marks.get(_split(f)[0], ""))
        if not new:
            return IngestResult(0, 0, 0)
        listed = {_split(f)[0] for f in files}
        upto = {d: name for d, name in marks.items() if d in listed}  # directories gone from landing are forgotten
        for directory, name in map(_split, new):
            upto[directory] = max(name, upto.get(directory, ""))
        named = landed_range(new)
        rows = named.rows + (read_landed(self.spark, list(named.uncounted)).count() if named.uncounted else 0)
        if not rows:
            return IngestResult(len(new), 0, 0)
        latest = max(filter(None, (named.last, _latest_commit(recorded))))
        metadata = {MARKS: dict(sorted(upto.items())), LATEST: latest.isoformat()}
        added = self._insert_unseen(read_landed(self.spark, new), named.first, named.last, metadata)
        return IngestResult(len(new), rows, added)

    def _insert_unseen(self, landed: DataFrame, first: datetime, last: datetime, metadata: dict) -> int:
        """MERGE ``landed`` (commits in [first, last]) on identity, its commit recording
        ``metadata``; returns the rows inserted."""
        rows = landed.withColumn("source_file", F.input_file_name()).withColumn("ingested_at", F.current_timestamp())
        if not self.exists():
            with self.fence.writing():
                rows.limit(0).write.format("delta").clusterBy(CLUSTER_COLUMN).save(self.delta.uri)  # the MERGE fills it
        within = f"t.{quoted('commit_timestamp')} BETWEEN {sql_timestamp(first)} AND {sql_timestamp(last)}"
        identity = " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in IDENTITY)
        statement = f"ON {within} AND {identity} WHEN NOT MATCHED THEN INSERT *"
        with self.fence.writing():
            merged = self.delta.merge(self.spark, rows.dropDuplicates(list(IDENTITY)), statement, json.dumps(metadata))
        if merged is None:  # Delta skipped it: a newer writer took the lake
            self.fence.check("ingesting landing files")
        return int(merged.num_inserted_rows)
