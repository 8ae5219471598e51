"""The changelog: one Delta row per mod, ingested incrementally from landing files, exactly once.

Identity of a row is (server_transaction_id, record_sequence, mod_index). Ingest reads only files
not ingested before and MERGEs on identity, inserting only unseen changes, so re-ingesting a file, a
replayed read or a duplicate landed by a crash changes nothing. Ingested files are listed in a
second Delta table (``<path>_files``), appended after the MERGE commits: a crash in between only
means the files are read again next time, and their rows are then all duplicates.
"""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.landing.rows import IDENTITY


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

    def ingest(self, files: list[str]) -> int:
        """Add the changes of ``files`` not already present; returns how many files were new."""
        done = self.ingested_files()
        new = sorted(f for f in files if f not in done)
        if not new:
            return 0
        rows = (
            self.spark.read.parquet(*new)
            .withColumn("source_file", F.input_file_name())
            .withColumn("ingested_at", F.current_timestamp())
            .dropDuplicates(list(IDENTITY))
        )
        if self.exists():
            condition = " AND ".join(f"t.{c} = s.{c}" for c in IDENTITY)
            table = DeltaTable.forPath(self.spark, self.path).alias("t")
            table.merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()
        else:
            rows.write.format("delta").save(self.path)
        self.spark.createDataFrame([(f,) for f in new], "path string").write.format("delta").mode("append").save(self.files_path)
        return len(new)
