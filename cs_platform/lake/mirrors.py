"""One Delta table per source table, brought to a cut by one MERGE per table.

All changes of a table inside the cut are folded per primary key in (commit_timestamp,
server_transaction_id, record_sequence, mod_index) order into the key's final effect:

- DELETE: the last change deleted the row;
- REPLACE: the row was (re)inserted: its columns are exactly what the insert and later updates wrote;
- PATCH: only updates: the columns they wrote change, the others keep the mirror's values (the
  NEW_VALUES and OLD_AND_NEW_VALUES capture types carry only written columns).

Applying a final effect twice gives the same table, so re-running a cut, or a cut that covers a
half-applied earlier attempt, is exact. Columns that appear in ``column_types`` later are added to
the mirror first; a snapshot that replaces a mirror gives it the table's columns and types
(``replace_mirror``: a dropped column leaves it, a retyped one changes type).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from cs_platform.lake.delta import DeltaPath
from cs_platform.lake.identifiers import quoted, sql_string
from cs_platform.lake.types import spark_type, typed_value

PRIMARY_KEY_PROPERTY = "cs_platform.primaryKey"
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
ORDER = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MAP = "MAP<STRING,STRING>"
# Key types Delta keeps min/max statistics for (clustering needs them), and its limit of columns.
CLUSTERABLE = {"INT64", "FLOAT64", "FLOAT32", "NUMERIC", "STRING", "DATE", "TIMESTAMP", "UUID"}
MAX_CLUSTER_COLUMNS = 4

# A key's changes in commit order, folded into its final effect (module docstring) by Spark SQL
# alone. Values stay wire text: from_json into MAP<STRING,STRING> keeps numbers, booleans and arrays
# as their JSON text, which ``typed_value`` then casts. Key columns always come from ``keys``.
_FOLD = f"""aggregate(
    transform(
        sort_array(collect_list(struct({", ".join(ORDER)}, mod_type, keys, new_values))),
        c -> named_struct('mod_type', c.mod_type, 'key_values', from_json(c.keys, '{_MAP}'), 'written', from_json(c.new_values, '{_MAP}'))),
    named_struct('op', 'PATCH', 'values', CAST(map() AS {_MAP})),
    (effect, c) -> CASE c.mod_type
        WHEN 'DELETE' THEN named_struct('op', 'DELETE', 'values', c.key_values)
        WHEN 'INSERT' THEN named_struct('op', 'REPLACE', 'values',
            map_concat(c.key_values, map_filter(c.written, (k, v) -> NOT map_contains_key(c.key_values, k))))
        ELSE named_struct('op', effect.op, 'values', map_concat(
            map_filter(effect.values, (k, v) -> NOT map_contains_key(c.written, k) AND NOT map_contains_key(c.key_values, k)),
            map_filter(c.written, (k, v) -> NOT map_contains_key(c.key_values, k)),
            c.key_values))
    END)"""


def column_types_by_table(descriptions: list[tuple[str, str]]) -> dict[str, dict[str, dict]]:
    """Per table, every column in the records' ``column_types`` descriptions ((table, JSON) pairs,
    latest description last), keys first by position."""
    tables: dict[str, dict[str, dict]] = {}
    for table, column_types in descriptions:
        columns = tables.setdefault(table, {})
        for column in json.loads(column_types):
            columns[column["name"]] = column
    return {
        table: dict(sorted(columns.items(), key=lambda c: (not c[1]["is_primary_key"], c[1]["ordinal_position"])))
        for table, columns in sorted(tables.items())
    }


def final_effects(changes: DataFrame, columns: dict[str, dict], per: tuple[str, ...] = ("keys",)) -> DataFrame:
    """One row per primary key of ``changes`` (one table's), or per key and whatever else ``per``
    groups by (history: per key and transaction): ``__op`` (DELETE, REPLACE or PATCH), each column
    typed, ``<column>__set``, whether the changes wrote it, and the ``per`` columns but ``keys``."""
    effects = changes.groupBy(*per).agg(F.expr(_FOLD).alias("effect"))
    return effects.select(
        *[c for c in per if c != "keys"],
        F.col("effect.op").alias("__op"),
        *_typed(lambda name: f"effect.values[{sql_string(name)}]", columns),
        *[F.expr(f"map_contains_key(effect.values, {sql_string(name)})").alias(f"{name}__set") for name in columns],
    )


def typed_rows(rows: DataFrame, columns: dict[str, dict]) -> DataFrame:
    """Snapshot rows (a column of wire text per table column, ``values.read_text``) as mirror rows:
    typed by the very expressions that type the changes' final effects."""
    return rows.select(*_typed(quoted, columns))


def _typed(value_of, columns: dict[str, dict]) -> list:
    """Each column's wire text (the SQL expression ``value_of(name)``), cast to its mirror type."""
    return [F.expr(typed_value(value_of(name), c["type"])).alias(name) for name, c in columns.items()]


def replace_mirror(spark: SparkSession, mirror: DeltaPath, rows: DataFrame, columns: dict[str, dict]) -> tuple[int, int]:
    """Make ``rows`` (typed, see :func:`typed_rows`) the whole of ``mirror`` in one commit, its
    columns and types too: a column the table no longer has leaves the mirror, a retyped one takes
    its new type (earlier versions keep theirs, for time travel); returns the mirror's new version
    and its rows. A new mirror is created with its rows (CREATE TABLE AS SELECT): one commit instead
    of an empty table then an overwrite, which took half of a small mirror's write (2.6 s → 1.1 s
    for 300 rows, three mirrors side by side)."""
    if mirror.exists():
        rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(mirror.uri)
    else:
        view = f"cs_platform_snapshot_{uuid.uuid4().hex}"  # tables are written side by side
        rows.createOrReplaceTempView(view)
        try:
            _create(spark, mirror, columns, view)
        finally:
            spark.catalog.dropTempView(view)
    version = mirror.version()
    return version, int(mirror.commit_metrics(version).get("numOutputRows", 0))


def apply_changes(spark: SparkSession, mirror: DeltaPath, changes: DataFrame, columns: dict[str, dict]) -> int:
    """Bring ``mirror`` up to date with ``changes`` (one table's, whose columns are ``columns``,
    see :func:`column_types_by_table`, all in the mirror already: :func:`ensure_columns`) in one
    MERGE; returns the mirror's new version."""
    keys = [name for name, c in columns.items() if c["is_primary_key"]]
    others = [name for name in columns if name not in keys]
    op = quoted("__op")
    clauses = [
        "ON " + " AND ".join(f"t.{quoted(k)} <=> s.{quoted(k)}" for k in keys),
        f"WHEN MATCHED AND s.{op} = 'DELETE' THEN DELETE",
    ]
    if others:
        replace = ", ".join(f"{quoted(c)} = s.{quoted(c)}" for c in others)
        patch = ", ".join(f"{quoted(c)} = CASE WHEN s.{quoted(c + '__set')} THEN s.{quoted(c)} ELSE t.{quoted(c)} END" for c in others)
        clauses += [f"WHEN MATCHED AND s.{op} = 'REPLACE' THEN UPDATE SET {replace}", f"WHEN MATCHED AND s.{op} = 'PATCH' THEN UPDATE SET {patch}"]
    names = ", ".join(quoted(c) for c in columns)
    clauses.append(f"WHEN NOT MATCHED AND s.{op} != 'DELETE' THEN INSERT ({names}) VALUES ({', '.join(f's.{quoted(c)}' for c in columns)})")
    # Computed once, from the cut's cached changes: a MERGE reads its source twice (touched files,
    # then the rewrite), and would otherwise run the fold twice. Delta would copy the source once
    # more to make those reads agree; a checkpoint already does, so the cut turns that copy off
    # (``MATERIALIZE_SOURCE``) for all its MERGEs.
    mirror.merge(spark, final_effects(changes, columns).localCheckpoint(), " ".join(clauses))
    return mirror.version()


def append_inserts(spark: SparkSession, mirror: DeltaPath, changes: DataFrame, columns: dict[str, dict]) -> int:
    """Bring ``mirror`` up to date with ``changes`` that only insert rows, by appending them; returns
    the mirror's new version. Only exact when no key they insert is in the mirror: a Spanner INSERT
    fails on an existing row, so a key first inserted after the previous cut is not in a mirror that
    holds exactly the source at that cut (``Lake`` decides when it does). An append reads nothing of
    the mirror, where a MERGE joins the changes with it first: a 10-row append costs ~0.14 s, a MERGE
    ~0.66 s (docs/tuning.md), and audit, event and ledger tables only ever take inserts. The
    mirror has ``columns`` already (:func:`ensure_columns`)."""
    rows = final_effects(changes, columns).where(F.col("__op") == "REPLACE")  # one row per key, as the MERGE would insert
    rows.select(*[F.col(quoted(name)) for name in columns]).write.format("delta").mode("append").save(mirror.uri)
    return mirror.version()


def primary_key(spark: SparkSession, mirror: DeltaPath) -> list[str]:
    row = spark.sql(f"SHOW TBLPROPERTIES delta.{quoted(mirror.uri)} ({sql_string(PRIMARY_KEY_PROPERTY)})").first()
    return row.value.split(",")


def ensure_columns(spark: SparkSession, mirror: DeltaPath, columns: dict[str, dict]) -> None:
    """Create the mirror, or add the columns it lacks (a write of its own, before the write that
    fills them: ``lake.fence``). A new mirror has deletion vectors, so a MERGE marks the rows it replaces instead
    of copying the rest of their files (the maintenance job purges the marks), and is clustered by
    its primary key, so OPTIMIZE keeps each key range in few files. Columns are added by an empty
    append with ``mergeSchema``, not ``ALTER TABLE``: delta-spark records no transaction identifier
    on an ALTER, so a writer the lake's fence stopped could still run one."""
    if not mirror.exists():
        _create(spark, mirror, columns)
        return
    wanted = {name: spark_type(c["type"]) for name, c in columns.items()}
    present = mirror.read(spark)
    missing = [F.lit(None).cast(sql_type).alias(name) for name, sql_type in wanted.items() if name not in present.columns]
    if missing:
        present.limit(0).select("*", *missing).write.format("delta").mode("append").option("mergeSchema", "true").save(mirror.uri)


def _create(spark: SparkSession, mirror: DeltaPath, columns: dict[str, dict], view: str | None = None) -> None:
    """Create ``mirror`` (:func:`_table_definition`) in one commit, with the rows of the temporary
    view ``view``, each column cast to its type, or with none.

    ``CREATE OR REPLACE``, only ever where no commit exists: a writer killed while creating a table
    leaves its files but no commit (an empty ``_delta_log``, data files), which ``CREATE TABLE``
    takes for a table that exists (``TABLE_OR_VIEW_ALREADY_EXISTS``, every later try failing the
    same way) and ``IF NOT EXISTS`` for one to leave alone (no table, and the write after it fails).
    A replace takes the location over, leftovers and all (they are never read; ``VACUUM`` removes
    them). It does not reopen a race with a newer writer: one that created the table since carries a
    higher transaction version, and Delta skips an older writer's replace of it as any fenced write
    (``lake.fence``)."""
    value = quoted if view else lambda _name: "NULL"
    typed = ", ".join(f"CAST({value(name)} AS {spark_type(c['type'])}) AS {quoted(name)}" for name, c in columns.items())
    rows = f"FROM {quoted(view)}" if view else "WHERE false"
    spark.sql(f"CREATE OR REPLACE TABLE delta.{quoted(mirror.uri)} {_table_definition(columns)} AS SELECT {typed} {rows}")


def _table_definition(columns: dict[str, dict]) -> str:
    """What every new mirror is created with (see :func:`ensure_columns`): Delta, clustered by its
    primary key's clusterable columns, deletion vectors on, the primary key as a table property."""
    keys = [name for name, c in columns.items() if c["is_primary_key"]]
    clustered = [k for k in keys if columns[k]["type"]["code"] in CLUSTERABLE][:MAX_CLUSTER_COLUMNS]
    cluster_by = f"CLUSTER BY ({', '.join(map(quoted, clustered))}) " if clustered else ""
    return (
        f"USING delta {cluster_by}TBLPROPERTIES ({sql_string(PRIMARY_KEY_PROPERTY)} = {sql_string(','.join(keys))}, "
        "'delta.enableDeletionVectors' = 'true')"
    )


def key_values(rows: DataFrame, keys: list[str]) -> list[tuple]:
    """The primary key of every row of ``rows`` (a sample: they are collected), as the values a
    Spanner read takes: TIMESTAMP in UTC (not PySpark's naive local time), BYTES as ``bytes``."""
    kinds = {f.name: f.dataType for f in rows.schema.fields}
    columns = [F.unix_micros(F.col(f"`{k}`")).alias(k) if isinstance(kinds[k], TimestampType) else F.col(f"`{k}`") for k in keys]
    rows = rows.select(*columns).collect()

    def value(name: str, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(kinds[name], TimestampType):
            return EPOCH + timedelta(microseconds=v)
        return bytes(v) if isinstance(v, (bytearray, memoryview)) else v

    return [tuple(value(k, v) for k, v in zip(keys, row)) for row in rows]
