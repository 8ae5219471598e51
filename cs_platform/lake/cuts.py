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

Before anything is applied, every value of the cut is checked against its column's type. A value
that cannot be typed stops the cut with :class:`UntypedValueError` naming the transaction, table,
column and raw value (policy ``fail``, the default), or, with policy ``quarantine``, its whole
transaction is moved to the quarantine table and the cut applies the rest (atomicity holds: a
transaction is never applied in part).

Timestamps handed back by PySpark are naive datetimes in the *Python process's* local time zone,
whatever the Spark session time zone is; :func:`utc` turns them back into UTC.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.changelog import Changelog
from cs_platform.lake.mirrors import apply_changes, column_types_by_table, version
from cs_platform.lake.types import utc
from cs_platform.landing.location import Location
from cs_platform.landing.source import SourceIdentity, bind
from cs_platform.lake.quarantine import Quarantine, UntypedValue, untyped_values

POLICIES = ("fail", "quarantine")
ROOT_SETTING = "CS_PLATFORM_LAKE_ROOT"


class IncompleteTransactionsError(RuntimeError):
    """Transactions under the cut lack records: data was lost upstream; nothing was applied."""

    def __init__(self, message: str, missing: list[tuple[str, int, int]]) -> None:
        super().__init__(message)
        self.missing = missing  # (transaction id, records seen, records expected)


class UntypedValueError(RuntimeError):
    """A value under the cut has no value of its column's type; nothing was applied."""

    def __init__(self, message: str, values: list[UntypedValue]) -> None:
        super().__init__(message)
        self.values = values


@dataclass(frozen=True)
class CutResult:
    cut: datetime
    previous: datetime | None
    applied: bool
    transactions: int = 0
    mods: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    quarantined: tuple[UntypedValue, ...] = ()  # values whose transactions the cut set aside


class Lake:
    """The Delta tables under one root: changelog, mirrors/<table>, and the manifest."""

    def __init__(self, spark: SparkSession, root: str, untyped_policy: str = "fail") -> None:
        if untyped_policy not in POLICIES:
            raise ValueError(f"untyped value policy {untyped_policy!r} is not one of {', '.join(POLICIES)}")
        self.spark = spark
        # `ALTER TABLE delta.`<path>`` needs an absolute path; a relative local root would fail there.
        self.root = root.rstrip("/") if "://" in root else os.path.abspath(root)
        self.changelog = Changelog(spark, f"{self.root}/changelog")
        self.quarantine = Quarantine(spark, f"{self.root}/quarantine")
        self.untyped_policy = untyped_policy

    def bind(self, source: SourceIdentity) -> None:
        """Record ``source`` as this lake's owner if it has none; refuse another (``landing.source``)."""
        location = Location(self.root, ROOT_SETTING)
        bind(location, location.base, source, "lake")

    @property
    def manifest_path(self) -> str:
        return f"{self.root}/manifest"

    def mirror_path(self, table: str) -> str:
        return f"{self.root}/mirrors/{table}"

    def last_cut(self) -> datetime | None:
        if not DeltaTable.isDeltaTable(self.spark, self.manifest_path):
            return None
        last = self.spark.read.format("delta").load(self.manifest_path).agg(F.max("cut_timestamp")).first()[0]
        return utc(last)

    def cuts(self) -> list[datetime]:
        """Every cut in the manifest, oldest first, in UTC."""
        if not DeltaTable.isDeltaTable(self.spark, self.manifest_path):
            return []
        rows = self.spark.read.format("delta").load(self.manifest_path).select("cut_timestamp").distinct().collect()
        return sorted(utc(r.cut_timestamp) for r in rows)

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
        if (previous is not None and cut <= previous) or not self.changelog.exists():
            return CutResult(cut, previous, applied=False)  # already applied, or nothing landed yet
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
        cached = changes = self.changes(previous, cut).cache()
        set_aside: list[UntypedValue] = []
        try:
            types = column_types_by_table(changes)
            tables = sorted(types)
            bad = untyped_values(changes, types)
            if bad and self.untyped_policy == "fail":
                raise UntypedValueError(
                    f"{len(bad)} value(s) committed in ({previous}, {cut}] cannot be typed, so the cut was not "
                    f"applied: {'; '.join(v.describe() for v in bad[:5])}. Set CS_PLATFORM_UNTYPED_VALUES="
                    "quarantine to set such transactions aside and apply the rest (see README, Quarantine).",
                    bad,
                )
            if bad:
                self.quarantine.add(changes, bad, cut)
                changes = changes.where(~F.col("server_transaction_id").isin(sorted({v.transaction for v in bad})))
                set_aside = bad
                tables = sorted(r.table_name for r in changes.select("table_name").distinct().collect())
            versions = {
                table: apply_changes(self.spark, self.mirror_path(table), changes.where(F.col("table_name") == table), types[table])
                for table in tables
            }
            counts = changes.agg(F.countDistinct("server_transaction_id"), F.count("*")).first()
        finally:
            cached.unpersist()
        if not tables and previous is None:
            return CutResult(cut, previous, applied=False)  # nothing under the first cut: no mirror to record
        untouched = {r.table_name for r in self._manifest_rows(previous)} - set(tables) if previous is not None else set()
        versions.update({table: version(self.spark, self.mirror_path(table)) for table in untouched})
        versions = dict(sorted(versions.items()))
        rows = [(cut, previous, table, v, counts[0], counts[1]) for table, v in versions.items()]
        schema = "cut_timestamp timestamp, previous_cut timestamp, table_name string, mirror_version long, transactions long, mods long"
        self.spark.createDataFrame(rows, schema).withColumn("committed_at", F.current_timestamp()).write.format(
            "delta"
        ).mode("append").save(self.manifest_path)
        return CutResult(cut, previous, True, counts[0], counts[1], versions, tuple(set_aside))

    def mirrors_at_cut(self, cut: datetime | None = None) -> dict[str, DataFrame]:
        """Every mirror as of one cut (the latest if None): a transaction-consistent snapshot."""
        return {
            r.table_name: self.spark.read.format("delta").option("versionAsOf", r.mirror_version).load(self.mirror_path(r.table_name))
            for r in self._manifest_rows(cut)
        }

    def _manifest_rows(self, cut: datetime | None) -> list:
        """(table_name, mirror_version) of each mirror at one cut (the latest if None)."""
        manifest = self.spark.read.format("delta").load(self.manifest_path)
        cut = cut or utc(manifest.agg(F.max("cut_timestamp")).first()[0])
        rows = manifest.where(F.col("cut_timestamp") == F.lit(cut)).select("table_name", "mirror_version").collect()
        if not rows:
            raise KeyError(f"no cut at {cut} in {self.manifest_path}")
        return rows


def _plain(value: datetime) -> datetime:
    """A plain datetime (Spark rejects subclasses such as Spanner's DatetimeWithNanoseconds)."""
    return datetime.combine(value.date(), value.timetz())
