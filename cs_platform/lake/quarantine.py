"""Values that cannot be typed, and the quarantine table for their transactions.

A cut checks every value it would apply against its column's type before it touches a mirror
(:func:`untyped_values`). Under the ``quarantine`` policy the *whole* transaction of each such
value is appended to ``<lake>/quarantine`` (every changelog row of it, plus the reason and the
cut), and the cut applies the rest: a transaction is never applied in part.

Resolving (docs/lake.md, "Quarantine"): inspect the rows, repair the affected tables (re-snapshot them or
reset the stream), then :meth:`Quarantine.resolve` the transactions; the check goes green when the
table is empty. Delta keeps the resolved rows in the table's history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.delta import DeltaPath
from cs_platform.lake.fence import Fence
from cs_platform.lake.identifiers import quoted, sql_string
from cs_platform.lake.types import untyped, utc
from cs_platform.landing.rows import IDENTITY

SHOWN_CHARS = 100  # of an untyped value, in a check's metadata and an error


@dataclass(frozen=True)
class UntypedValue:
    transaction: str
    commit_timestamp: datetime
    table: str
    column: str
    raw: str
    type: str

    def describe(self) -> str:
        """One line for a check's metadata and an error: the value cut at ``SHOWN_CHARS`` (a
        multi-megabyte value would fill the event log; the quarantine table keeps it whole)."""
        shown = repr(self.raw[:SHOWN_CHARS]) + (f" (cut: {len(self.raw)} characters)" if len(self.raw) > SHOWN_CHARS else "")
        return f"transaction {self.transaction} (committed {self.commit_timestamp}) wrote {shown} to {self.table}.{self.column}, which is not a {self.type}"


def untyped_values(changes: DataFrame, types: dict[str, dict[str, dict]], limit: int = 10_000) -> list[UntypedValue]:
    """Every key or new value in ``changes`` that has no value of its column's type (at most
    ``limit``), in commit order. ``types``: per table, its columns (``column_types_by_table``)."""
    predicates = {(table, name): untyped("raw", column["type"]) for table, columns in types.items() for name, column in columns.items()}
    cases = [f"WHEN table_name = '{t}' AND name = '{n}' THEN {p}" for (t, n), p in predicates.items() if p != "false"]
    if not cases:
        return []
    entries = F.concat(
        F.map_entries(F.from_json("keys", "MAP<STRING,STRING>")),
        F.map_entries(F.from_json("new_values", "MAP<STRING,STRING>")),
    )
    values = changes.select("server_transaction_id", "commit_timestamp", "table_name", F.explode(entries).alias("e")).select(
        "server_transaction_id", "commit_timestamp", "table_name", F.col("e.key").alias("name"), F.col("e.value").alias("raw")
    )
    bad = values.where(F.expr(f"CASE {' '.join(cases)} ELSE false END")).orderBy("commit_timestamp", "server_transaction_id")
    return [
        UntypedValue(r.server_transaction_id, utc(r.commit_timestamp), r.table_name, r.name, r.raw, _type_name(types[r.table_name][r.name]["type"]))
        for r in bad.limit(limit).collect()
    ]


def _type_name(spanner: dict) -> str:
    return f"ARRAY<{_type_name(spanner['array_element_type'])}>" if spanner["code"] == "ARRAY" else spanner["code"]


class Quarantine:
    """``<lake>/quarantine``: the changelog rows of transactions a cut set aside, with the reason."""

    def __init__(self, spark: SparkSession, table: DeltaPath, fence: Fence) -> None:
        self.spark = spark
        self.delta = table
        self.fence = fence  # every write is fenced (``lake.fence``)

    def add(self, changes: DataFrame, values: list[UntypedValue], cut: datetime) -> None:
        reasons = {}
        for value in values:
            reasons.setdefault(value.transaction, []).append(value.describe())
        reason = F.create_map(*[x for t, r in sorted(reasons.items()) for x in (F.lit(t), F.lit("; ".join(r)))])
        rows = (
            changes.where(F.col("server_transaction_id").isin(sorted(reasons)))
            .withColumn("reason", reason[F.col("server_transaction_id")])
            .withColumn("cut_timestamp", F.lit(cut))
            .withColumn("quarantined_at", F.current_timestamp())
        )
        # Inserted once by change identity: a cut tried again after a crash sets the same ones aside.
        if not self.exists():
            with self.fence.writing():
                rows.limit(0).write.format("delta").save(self.delta.uri)
        identity = " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in IDENTITY)
        with self.fence.writing():
            self.delta.merge(self.spark, rows, f"ON {identity} WHEN NOT MATCHED THEN INSERT *")

    def exists(self) -> bool:
        return self.delta.exists()

    def table(self) -> DataFrame:
        return self.delta.read(self.spark)

    def transactions(self) -> list[dict]:
        """One summary per quarantined transaction: id, commit timestamp, tables, rows and reason."""
        if not self.exists():
            return []
        summary = self.table().groupBy("server_transaction_id").agg(
            F.min("commit_timestamp").alias("commit_timestamp"),
            F.concat_ws(",", F.sort_array(F.collect_set("table_name"))).alias("tables"),
            F.count("*").alias("rows"),
            F.first("reason").alias("reason"),
        )
        return [r.asDict() for r in summary.orderBy("commit_timestamp").collect()]

    def resolve(self, transaction_ids: list[str]) -> int:
        """Remove transactions an operator has dealt with (see module docstring); returns how many rows."""
        if not self.exists() or not transaction_ids:
            return 0
        ids = ", ".join(sql_string(t) for t in transaction_ids)
        statement = f"DELETE FROM delta.{quoted(self.delta.uri)} WHERE {quoted('server_transaction_id')} IN ({ids})"
        return int(self.spark.sql(statement).first().num_affected_rows)
