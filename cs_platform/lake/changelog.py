"""The changelog: one Delta row per mod, ingested incrementally from landing files, exactly once.

Identity of a row is (server_transaction_id, record_sequence, mod_index). Ingest reads only files
not ingested before and MERGEs on identity, inserting only unseen changes, so re-ingesting a file, a
replayed read or a duplicate landed by a crash changes nothing. A duplicate change always carries
the same commit timestamp, so the MERGE matches only changelog rows inside the batch's commit
range: Delta skips every file outside it, and the rows read follow the batch, not the history.
Ingested files are listed in a second Delta table (``<path>_files``), appended after the MERGE
commits: a crash in between only means the files are read again next time, and their rows are then
all duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.delta import DeltaPath, quoted
from cs_platform.lake.types import sql_timestamp
from cs_platform.landing.rows import IDENTITY


@dataclass(frozen=True)
class IngestResult:
    files: int  # landing files ingested now
    rows_read: int  # rows in those files
    rows_added: int  # rows new to the changelog; the rest repeated a change by its identity

    @property
    def duplicates(self) -> int:
        return self.rows_read - self.rows_added


class Changelog:
    def __init__(self, spark: SparkSession, table: DeltaPath) -> None:
        self.spark = spark
        self.delta = table
        self.files = DeltaPath(table.location, f"{table.path}_files")

    def exists(self) -> bool:
        return self.delta.exists()

    def table(self) -> DataFrame:
        return self.delta.read(self.spark)

    def ingested_files(self) -> set[str]:
        if not self.files.exists():
            return set()
        return {r.path for r in self.files.read(self.spark).collect()}

    def ingest(self, files: list[str]) -> IngestResult:
        """Add the changes of ``files`` not already present."""
        done = self.ingested_files()
        new = sorted(f for f in files if f not in done)
        if not new:
            return IngestResult(0, 0, 0)
        landed = self.spark.read.parquet(*new)
        read, first, last = landed.agg(F.count("*"), F.min("commit_timestamp"), F.max("commit_timestamp")).first()
        added = self._insert_unseen(landed, first, last) if read else 0
        self.spark.createDataFrame([(f,) for f in new], "path string").write.format("delta").mode("append").save(self.files.uri)
        return IngestResult(len(new), read, added)

    def _insert_unseen(self, landed: DataFrame, first: datetime, last: datetime) -> int:
        """MERGE ``landed`` (commits in [first, last]) on identity; returns the rows inserted."""
        rows = landed.withColumn("source_file", F.input_file_name()).withColumn("ingested_at", F.current_timestamp())
        if not self.exists():
            rows.limit(0).write.format("delta").save(self.delta.uri)  # the schema; the MERGE fills it
        within = f"t.{quoted('commit_timestamp')} BETWEEN {sql_timestamp(first)} AND {sql_timestamp(last)}"
        identity = " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in IDENTITY)
        statement = f"ON {within} AND {identity} WHEN NOT MATCHED THEN INSERT *"
        return int(self.delta.merge(self.spark, rows.dropDuplicates(list(IDENTITY)), statement).num_inserted_rows)
