"""The changelog: one Delta row per mod, ingested incrementally from landing files, exactly once.

Identity of a row is (server_transaction_id, record_sequence, mod_index). Ingest reads only files
not ingested before and MERGEs on identity, inserting only unseen changes, so re-ingesting a file, a
replayed read or a duplicate landed by a crash changes nothing. Ingested files are listed in a
second Delta table (``<path>_files``), appended after the MERGE commits: a crash in between only
means the files are read again next time, and their rows are then all duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

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
    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        self.path = path

    def exists(self) -> bool:
        return DeltaTable.isDeltaTable(self.spark, self.path)

    def table(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.path)

    @property
    def files_path(self) -> str:
        return f"{self.path}_files"

    def ingested_files(self) -> set[str]:
        if not DeltaTable.isDeltaTable(self.spark, self.files_path):
            return set()
        return {r.path for r in self.spark.read.format("delta").load(self.files_path).collect()}

    def ingest(self, files: list[str]) -> IngestResult:
        """Add the changes of ``files`` not already present."""
        done = self.ingested_files()
        new = sorted(f for f in files if f not in done)
        if not new:
            return IngestResult(0, 0, 0)
        landed = self.spark.read.parquet(*new)
        read = landed.count()  # from the Parquet footers
        rows = landed.withColumn("source_file", F.input_file_name()).withColumn("ingested_at", F.current_timestamp())
        if self.exists():
            condition = " AND ".join(f"t.{c} = s.{c}" for c in IDENTITY)
            table = DeltaTable.forPath(self.spark, self.path)
            table.alias("t").merge(rows.dropDuplicates(list(IDENTITY)).alias("s"), condition).whenNotMatchedInsertAll().execute()
            added = int(table.history(1).select("operationMetrics").first()[0]["numTargetRowsInserted"])
        else:
            rows.dropDuplicates(list(IDENTITY)).write.format("delta").save(self.path)
            added = self.table().count()
        self.spark.createDataFrame([(f,) for f in new], "path string").write.format("delta").mode("append").save(self.files_path)
        return IngestResult(len(new), read, added)
