"""One Delta table per source table, brought to a cut by one MERGE per table.

All changes of a table inside the cut are folded per primary key in (commit_timestamp,
server_transaction_id, record_sequence, mod_index) order into the key's final effect:

- DELETE: the last change deleted the row;
- REPLACE: the row was (re)inserted: its columns are exactly what the insert and later updates wrote;
- PATCH: only updates: the columns they wrote change, the others keep the mirror's values (the
  NEW_VALUES and OLD_AND_NEW_VALUES capture types carry only written columns).

Applying a final effect twice gives the same table, so re-running a cut, or a cut that covers a
half-applied earlier attempt, is exact. Columns that appear in ``column_types`` later are added to
the mirror first (schema evolution, nothing dropped).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StringType, StructField, StructType, TimestampType

from cs_platform.lake.types import spark_type, typed_value

PRIMARY_KEY_PROPERTY = "cs_platform.primaryKey"
ORDER = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EFFECT = StructType([StructField("op", StringType()), StructField("values", MapType(StringType(), StringType()))])


def plain(value: Any) -> str | None:
    """A wire value as text Spark can cast: strings as themselves, arrays as JSON, NULL as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)


def fold(changes: list) -> tuple[str, dict[str, str | None]]:
    """The final effect of a key's ordered changes (see module docstring)."""
    op, values = "PATCH", {}
    for change in changes:
        keys = json.loads(change["keys"])
        if change["mod_type"] == "DELETE":
            op, values = "DELETE", dict(keys)
        elif change["mod_type"] == "INSERT":
            op, values = "REPLACE", {**keys, **json.loads(change["new_values"])}
        else:
            values.update(json.loads(change["new_values"]))
            values.update(keys)
    return op, {name: plain(v) for name, v in values.items()}


_fold_udf = F.udf(fold, _EFFECT)


def column_types_by_table(changes: DataFrame) -> dict[str, dict[str, dict]]:
    """Per table, every column seen in the changes' records (latest description last), keys first
    by position."""
    tables: dict[str, dict[str, dict]] = {}
    for row in changes.select("table_name", "column_types").distinct().collect():
        columns = tables.setdefault(row.table_name, {})
        for column in json.loads(row.column_types):
            columns[column["name"]] = column
    return {
        table: dict(sorted(columns.items(), key=lambda c: (not c[1]["is_primary_key"], c[1]["ordinal_position"])))
        for table, columns in sorted(tables.items())
    }


def apply_changes(spark: SparkSession, path: str, changes: DataFrame, columns: dict[str, dict]) -> int:
    """Bring the mirror at ``path`` up to date with ``changes`` (one table's, whose columns are
    ``columns``, see :func:`column_types_by_table`); returns its version."""
    keys = [name for name, c in columns.items() if c["is_primary_key"]]
    _ensure_columns(spark, path, columns)
    ordered = F.sort_array(F.collect_list(F.struct(*ORDER, "keys", "mod_type", "new_values")))
    effects = changes.groupBy("keys").agg(_fold_udf(ordered).alias("effect"))
    source = effects.select(
        F.col("effect.op").alias("__op"),
        *[F.expr(typed_value(f"effect.values['{name}']", c["type"])).alias(name) for name, c in columns.items()],
        *[F.map_contains_key("effect.values", name).alias(f"{name}__set") for name in columns],
    )
    others = [name for name in columns if name not in keys]
    target = DeltaTable.forPath(spark, path).alias("t")
    merge = target.merge(source.alias("s"), " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys))
    merge = merge.whenMatchedDelete(condition="s.__op = 'DELETE'")
    if others:
        merge = merge.whenMatchedUpdate(condition="s.__op = 'REPLACE'", set={f"`{c}`": f"s.`{c}`" for c in others})
        merge = merge.whenMatchedUpdate(
            condition="s.__op = 'PATCH'",
            set={f"`{c}`": f"CASE WHEN s.`{c}__set` THEN s.`{c}` ELSE t.`{c}` END" for c in others},
        )
    merge = merge.whenNotMatchedInsert(condition="s.__op != 'DELETE'", values={f"`{c}`": f"s.`{c}`" for c in columns})
    merge.execute()
    return version(spark, path)


def primary_key(spark: SparkSession, path: str) -> list[str]:
    properties = DeltaTable.forPath(spark, path).detail().select("properties").first()[0]
    return properties[PRIMARY_KEY_PROPERTY].split(",")


def version(spark: SparkSession, path: str) -> int:
    return DeltaTable.forPath(spark, path).history(1).select("version").first()[0]


def _ensure_columns(spark: SparkSession, path: str, columns: dict[str, dict]) -> None:
    wanted = {name: spark_type(c["type"]) for name, c in columns.items()}
    if not DeltaTable.isDeltaTable(spark, path):
        schema = ", ".join(f"`{name}` {sql_type}" for name, sql_type in wanted.items())
        spark.createDataFrame([], schema).write.format("delta").save(path)
        keys = ",".join(name for name, c in columns.items() if c["is_primary_key"])
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{PRIMARY_KEY_PROPERTY}' = '{keys}')")
        return
    present = set(spark.read.format("delta").load(path).columns)
    missing = [f"`{name}` {sql_type}" for name, sql_type in wanted.items() if name not in present]
    if missing:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({', '.join(missing)})")


def sample_keys(mirror: DataFrame, keys: list[str], n: int, seed: int = 7) -> list[tuple]:
    """Up to ``n`` random primary keys of ``mirror``, as the values a Spanner read takes: TIMESTAMP
    in UTC (not PySpark's naive local time), BYTES as ``bytes``."""
    kinds = {f.name: f.dataType for f in mirror.schema.fields}
    columns = [F.unix_micros(F.col(f"`{k}`")).alias(k) if isinstance(kinds[k], TimestampType) else F.col(f"`{k}`") for k in keys]
    rows = mirror.select(*columns).orderBy(F.rand(seed=seed)).limit(n).collect()

    def value(name: str, v: Any) -> Any:
        if v is None:
            return None
        if isinstance(kinds[name], TimestampType):
            return EPOCH + timedelta(microseconds=v)
        return bytes(v) if isinstance(v, (bytearray, memoryview)) else v

    return [tuple(value(k, v) for k, v in zip(keys, row)) for row in rows]
