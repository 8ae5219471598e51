"""Consistent cuts (the RisingWave idea): a transaction is visible in the mirrors entirely or not
at all, across partitions and tables.

A cut at T applies every transaction with previous cut < commit_timestamp <= T. T must be a low
watermark (every partition has landed everything <= T) and the changelog must have ingested the
landing files after T was read. Every transaction in the range is then complete; one that is not
(records seen != number_of_records_in_transaction) means lost data, so the cut stops with
:class:`IncompleteTransactionsError` and applies nothing. After every mirror of the cut has
committed, one append to the manifest records the cut and each mirror's Delta version: readers open
all mirrors at one cut by time travel (:func:`mirrors_at_cut`). A cut at or before the last one
is a no-op; a crash before the manifest append is repaired by re-running (mirrors apply final
effects, see ``mirrors``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.changelog import Changelog
from cs_platform.lake.mirrors import apply_changes, version


class IncompleteTransactionsError(RuntimeError):
    """Transactions under the cut lack records: data was lost upstream; nothing was applied."""

    def __init__(self, message: str, missing: list[tuple[str, int, int]]) -> None:
        super().__init__(message)
        self.missing = missing  # (transaction id, records seen, records expected)


@dataclass(frozen=True)
class CutResult:
    cut: datetime
    previous: datetime | None
    applied: bool
    transactions: int = 0
    mods: int = 0
    versions: dict[str, int] = field(default_factory=dict)


class Lake:
    """The Delta tables under one root: changelog, mirrors/<table>, and the manifest."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        # `ALTER TABLE delta.`<path>`` needs an absolute path; a relative local root would fail there.
        self.root = root.rstrip("/") if "://" in root else os.path.abspath(root)
        self.changelog = Changelog(spark, f"{self.root}/changelog")

    @property
    def manifest_path(self) -> str:
        return f"{self.root}/manifest"

    def mirror_path(self, table: str) -> str:
        return f"{self.root}/mirrors/{table}"

    def last_cut(self) -> datetime | None:
        if not DeltaTable.isDeltaTable(self.spark, self.manifest_path):
            return None
        last = self.spark.read.format("delta").load(self.manifest_path).agg(F.max("cut_timestamp")).first()[0]
        return _utc(last)

    def changes(self, after: datetime | None, upto: datetime) -> DataFrame:
        rows = self.changelog.table().where(F.col("commit_timestamp") <= F.lit(upto))
        return rows if after is None else rows.where(F.col("commit_timestamp") > F.lit(after))

    def incomplete_transactions(self, upto: datetime, after: datetime | None = None) -> list[tuple[str, int, int]]:
        """(transaction id, records seen, records expected) of transactions missing records."""
        per_transaction = self.changes(after, upto).groupBy("server_transaction_id").agg(
            F.countDistinct("record_sequence").alias("seen"), F.max("number_of_records_in_transaction").alias("expected")
        )
        return [tuple(r) for r in per_transaction.where("seen != expected").collect()]

    def apply_cut(self, cut: datetime) -> CutResult:
        cut = _plain(cut)
        previous = self.last_cut()
        if previous is not None and cut <= previous:
            return CutResult(cut, previous, applied=False)
        missing = self.incomplete_transactions(cut, previous)
        if missing:
            sample = ", ".join(f"{t} ({seen}/{expected} records)" for t, seen, expected in missing[:5])
            raise IncompleteTransactionsError(
                f"{len(missing)} transactions committed in ({previous}, {cut}] are incomplete in the changelog: "
                f"{sample}. The cut was not applied. Either the cut is above the low watermark, or landing "
                "files were not ingested: ingest them and retry; if it persists, re-read the partitions "
                "(re-materialize them) from before these commits.",
                missing,
            )
        changes = self.changes(previous, cut).cache()
        try:
            tables = sorted(r.table_name for r in changes.select("table_name").distinct().collect())
            versions = {
                table: apply_changes(self.spark, self.mirror_path(table), changes.where(F.col("table_name") == table))
                for table in tables
            }
            counts = changes.agg(F.countDistinct("server_transaction_id"), F.count("*")).first()
        finally:
            changes.unpersist()
        untouched = {r.table_name for r in self._manifest_rows(previous)} - set(tables) if previous is not None else set()
        versions.update({table: version(self.spark, self.mirror_path(table)) for table in untouched})
        versions = dict(sorted(versions.items()))
        rows = [(cut, previous, table, v, counts[0], counts[1]) for table, v in versions.items()]
        schema = "cut_timestamp timestamp, previous_cut timestamp, table_name string, mirror_version long, transactions long, mods long"
        self.spark.createDataFrame(rows, schema).withColumn("committed_at", F.current_timestamp()).write.format(
            "delta"
        ).mode("append").save(self.manifest_path)
        return CutResult(cut, previous, True, counts[0], counts[1], versions)

    def mirrors_at_cut(self, cut: datetime | None = None) -> dict[str, DataFrame]:
        """Every mirror as of one cut (the latest if None): a transaction-consistent snapshot."""
        return {
            r.table_name: self.spark.read.format("delta").option("versionAsOf", r.mirror_version).load(self.mirror_path(r.table_name))
            for r in self._manifest_rows(cut)
        }

    def _manifest_rows(self, cut: datetime | None) -> list:
        """(table_name, mirror_version) of each mirror at one cut (the latest if None)."""
        manifest = self.spark.read.format("delta").load(self.manifest_path)
        cut = cut or _utc(manifest.agg(F.max("cut_timestamp")).first()[0])
        rows = manifest.where(F.col("cut_timestamp") == F.lit(cut)).select("table_name", "mirror_version").collect()
        if not rows:
            raise KeyError(f"no cut at {cut} in {self.manifest_path}")
        return rows


def _plain(value: datetime) -> datetime:
    """A plain datetime (Spark rejects subclasses such as Spanner's DatetimeWithNanoseconds)."""
    return datetime.combine(value.date(), value.timetz())


def _utc(value: datetime | None) -> datetime | None:
    """Spark returns TIMESTAMP as naive datetimes in the session time zone, which is UTC here."""
    return value.replace(tzinfo=timezone.utc) if value is not None and value.tzinfo is None else value
