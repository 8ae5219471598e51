"""History tables (type 2): every version of every row of a watched table, bounded by Spanner's
commit timestamps, maintained by the same cut as its mirror.

A row of ``history/<table>`` is one version of one source row: the table's columns (the full row
state; a partial update is folded onto the version before it, as the mirror folds it), then

- ``_valid_from``: the commit timestamp of the transaction that wrote this version (for a version
  seeded from a snapshot, the snapshot's cut, and ``_operation`` = ``SNAPSHOT``);
- ``_valid_to``: the commit timestamp of the transaction that wrote the next version or deleted the
  row; NULL while the version is current;
- ``_transaction_id`` (Spanner's server transaction id; NULL for a snapshot version) and
  ``_operation`` (INSERT, UPDATE or SNAPSHOT).

One transaction makes one version of a key, however many mods it has for it. Spanner's names start
with a letter, so the ``_`` columns never clash with a table's own.

Because the bounds are commit timestamps, the rows with ``_valid_from <= C AND (_valid_to IS NULL
OR _valid_to > C)`` are exactly the table at C, for every published cut C, read at the history
table's *latest* version: a later cut only adds versions from after C and closes versions at a
timestamp after C. That is how an engine without time travel (BigQuery, Athena) reads a consistent
cut, even while a newer cut is being written (``docs/reading.md``).

A cut writes a table's history in one MERGE, in proportion to its changes, beside the table's
mirror (``cuts``): the state before the cut of the keys it touched is the history itself at the
previous cut (``history_at`` of its latest version: a crashed attempt only added versions that start
after that cut and ended versions after it, so a re-run computes the same versions); the MERGE closes each
touched key's open version and inserts the new ones, matching versions by their ``_valid_from`` so a
re-run inserts nothing twice (and updates what it already wrote: a re-run may cover more
transactions, so a version a crashed attempt left open may now have an end). A 10-mod cut with
history takes 1.35-1.5x the same cut without (bench/lake_cost.py).
"""

from __future__ import annotations

from datetime import datetime
from functools import reduce

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cs_platform.lake.delta import DeltaPath
from cs_platform.lake.history_schema import BOUNDS, OPERATION, SNAPSHOT, TRANSACTION, VALID_FROM, VALID_TO
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.mirrors import ensure_columns, final_effects, replace_mirror
from cs_platform.lake.types import spark_type, sql_timestamp

_KIND = "__kind"  # of a MERGE source row: a new version, or the closing of a key's open version


def history_columns(columns: dict[str, dict]) -> dict[str, dict]:
    """A table's columns (``mirrors.column_types_by_table``), then the version bounds, as column
    descriptions: the history table is created and evolved by the code that does the mirrors."""
    bounds = {name: {"name": name, "type": {"code": code}, "is_primary_key": False} for name, code in BOUNDS.items()}
    return {**columns, **bounds}


def seed_history(spark: SparkSession, history: DeltaPath, rows: DataFrame, columns: dict[str, dict], cut: datetime) -> int:
    """Make ``rows`` (typed mirror rows as of ``cut``) the whole of a new history: one ``SNAPSHOT``
    version per row, valid from the cut. Returns the history's new version."""
    version, _ = replace_mirror(spark, history, _snapshot_versions(rows, columns, cut), history_columns(columns))
    return version


def _snapshot_versions(rows: DataFrame, columns: dict[str, dict], cut: datetime) -> DataFrame:
    """``rows`` (the table at ``cut``) as one ``SNAPSHOT`` version each, valid from the cut."""
    return _aligned(rows, columns).select(
        *[F.col(quoted(c)) for c in columns],
        F.lit(cut).cast("timestamp").alias(VALID_FROM),
        F.lit(None).cast("timestamp").alias(VALID_TO),
        F.lit(None).cast("string").alias(TRANSACTION),
        F.lit(SNAPSHOT).alias(OPERATION),
    )


def evolve_history(spark: SparkSession, history: DeltaPath, columns: dict[str, dict]) -> None:
    """Give an existing history the table's columns at a reshape (``columns``), keeping every
    version and every column the table no longer has: an added column is added (NULL in the
    versions before); a retyped one takes its new type, its earlier values cast by Spark's CAST (a
    value that does not cast reads NULL; STRING to BYTES gives its UTF-8 bytes, as Spanner's own
    ALTER COLUMN converts), which rewrites the history once. One write at most: ``reseed_history``
    follows it in a write group of its own (``lake.fence``)."""
    wanted = history_columns(columns)
    present = history.read(spark)
    kinds = {f.name: f.dataType.simpleString() for f in present.schema.fields}
    retyped = {c: spark_type(d["type"]) for c, d in wanted.items() if c in kinds and kinds[c] != _simple(spark, spark_type(d["type"]))}
    if not retyped:
        ensure_columns(spark, history, wanted)
        return
    missing = [F.lit(None).cast(spark_type(d["type"])).alias(c) for c, d in wanted.items() if c not in kinds]
    rewritten = present.select(*[F.col(quoted(c)).cast(retyped[c]).alias(c) if c in retyped else F.col(quoted(c)) for c in present.columns], *missing)
    rewritten.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(history.uri)


def _simple(spark: SparkSession, sql_type: str) -> str:
    """A SQL type as Spark's schema names it (``BIGINT`` -> ``bigint``, ``ARRAY<STRING>`` -> ``array<string>``)."""
    return spark.range(0).select(F.lit(None).cast(sql_type).alias("v")).schema["v"].dataType.simpleString()


def reseed_history(spark: SparkSession, history: DeltaPath, rows: DataFrame, columns: dict[str, dict], cut: datetime) -> int:
    """The table at ``cut`` read whole (joined again, reshaped by DDL, or rebuilt) into its history
    without losing a version: every version open at the cut is closed at it, and each row opens a
    ``SNAPSHOT`` version valid from it (a column the table no longer has is NULL in them). Read at
    its latest version and filtered at any published cut, before the cut or from it on, the history
    is the table at that cut (invariant 10). One MERGE; a re-run updates the versions it inserted.
    A new history is seeded (``seed_history``). Returns the history's new version."""
    if not history.exists():
        return seed_history(spark, history, rows, columns, cut)
    keys = [name for name, c in columns.items() if c["is_primary_key"]]
    source = _snapshot_versions(rows, columns, cut)
    names = source.columns
    at = f"CAST({sql_timestamp(cut)} AS TIMESTAMP)"
    start, end = quoted(VALID_FROM), quoted(VALID_TO)
    same = " AND ".join([*(f"t.{quoted(k)} <=> s.{quoted(k)}" for k in keys), f"t.{start} = s.{start}"])
    statement = (
        f"ON {same} WHEN MATCHED THEN UPDATE SET {', '.join(f'{quoted(c)} = s.{quoted(c)}' for c in names)} "
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(map(quoted, names))}) VALUES ({', '.join(f's.{quoted(c)}' for c in names)}) "
        f"WHEN NOT MATCHED BY SOURCE AND t.{end} IS NULL AND t.{start} < {at} THEN UPDATE SET {end} = {at}"
    )
    history.merge(spark, source, statement)
    return history.version()


def apply_history(
    spark: SparkSession, history: DeltaPath, before: DataFrame | None, changes: DataFrame, columns: dict[str, dict]
) -> int:
    """Add the versions ``changes`` (one table's, in one cut) make to ``history``, and close the
    versions they end. ``before`` is the table as of the previous cut (None for a table new in this
    cut), any superset of its touched keys' rows with at least ``columns``. Returns the history's
    new version."""
    keys = [name for name, c in columns.items() if c["is_primary_key"]]
    steps = final_effects(changes, columns, per=("keys", "commit_timestamp", "server_transaction_id")).withColumn("__order", F.lit(1))
    if before is not None:
        steps = steps.localCheckpoint()  # read for its keys, then folded
        touched = F.broadcast(steps.select(*map(quoted, keys)).distinct())  # a cut touches few keys: never shuffle the table
        prior = before.join(touched, on=reduce(lambda a, b: a & b, [before[quoted(k)].eqNullSafe(touched[quoted(k)]) for k in keys]), how="left_semi")
        steps = steps.unionByName(
            _aligned(prior, columns).select(
                *[F.col(quoted(c)) for c in columns],
                *[F.lit(True).alias(f"{c}__set") for c in columns],
                F.lit("PRIOR").alias("__op"),
                F.lit(None).cast("timestamp").alias("commit_timestamp"),
                F.lit(None).cast("string").alias("server_transaction_id"),
                F.lit(0).alias("__order"),
            )
        )
    # A column's value after each step: what the latest step that wrote it wrote (a REPLACE, a
    # DELETE and the prior state write every column; a PATCH the columns it set).
    ordered = Window.partitionBy(*map(quoted, keys)).orderBy("__order", "commit_timestamp")
    upto = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    op = F.col("__op")

    def state(c: str):
        writes = op.isin("REPLACE", "DELETE", "PRIOR") | (F.col(quoted(f"{c}__set")) & (op == "PATCH"))
        written = F.when(op == "DELETE", F.lit(None)).otherwise(F.col(quoted(c)))
        return F.last(F.when(writes, F.struct(written.alias("v"))), ignorenulls=True).over(upto)["v"].alias(c)

    folded = steps.select(
        *[state(c) if c not in keys else F.col(quoted(c)) for c in columns],
        F.col("commit_timestamp").alias(VALID_FROM),
        F.lead("commit_timestamp").over(ordered).alias(VALID_TO),
        F.col("server_transaction_id").alias(TRANSACTION),
        F.when(op == "REPLACE", "INSERT").otherwise("UPDATE").alias(OPERATION),
        op,
    )
    # One MERGE source row per new version, and per key with a prior state one that closes it at
    # the key's first step (the prior row's next step): a DELETE is only the end of what came before.
    closing = op == "PRIOR"
    source = folded.where(op != "DELETE").select(
        *[F.col(quoted(c)) for c in columns],
        F.when(closing, F.col(VALID_TO)).otherwise(F.col(VALID_FROM)).alias(VALID_FROM),
        F.when(~closing, F.col(VALID_TO)).alias(VALID_TO),
        TRANSACTION,
        OPERATION,
        F.when(closing, "close").otherwise("version").alias(_KIND),
    ).localCheckpoint()

    everything = history_columns(columns)  # all in the history already (``mirrors.ensure_columns``)
    same_key = " AND ".join(f"t.{quoted(k)} <=> s.{quoted(k)}" for k in keys)
    start, end, kind = quoted(VALID_FROM), quoted(VALID_TO), quoted(_KIND)
    closes = f"s.{kind} = 'close' AND t.{start} < s.{start} AND (t.{end} IS NULL OR t.{end} = s.{start})"
    names = ", ".join(quoted(c) for c in everything)
    statement = (
        f"ON {same_key} AND (({closes}) OR (s.{kind} = 'version' AND t.{start} = s.{start})) "
        f"WHEN MATCHED AND s.{kind} = 'close' THEN UPDATE SET {end} = s.{start} "
        # A version a crashed attempt already wrote: a re-run may cover more, so its end may be new.
        f"WHEN MATCHED THEN UPDATE SET {', '.join(f'{quoted(c)} = s.{quoted(c)}' for c in everything)} "
        f"WHEN NOT MATCHED AND s.{kind} = 'version' THEN INSERT ({names}) VALUES ({', '.join(f's.{quoted(c)}' for c in everything)})"
    )
    history.merge(spark, source, statement)  # a checkpoint already: the cut turns Delta's copy off (see mirrors)
    return history.version()


def _aligned(rows: DataFrame, columns: dict[str, dict]) -> DataFrame:
    """``rows`` with every column of ``columns``: one added since they were written reads NULL."""
    return rows.select(
        *[F.col(quoted(c)) if c in rows.columns else F.lit(None).cast(spark_type(d["type"])).alias(c) for c, d in columns.items()]
    )


def history_at(history: DataFrame, cut: datetime) -> DataFrame:
    """The versions of ``history`` (read at any version that includes ``cut``) valid at ``cut``: the table as of the cut."""
    at = F.lit(cut).cast("timestamp")
    return history.where((F.col(VALID_FROM) <= at) & (F.col(VALID_TO).isNull() | (F.col(VALID_TO) > at)))
