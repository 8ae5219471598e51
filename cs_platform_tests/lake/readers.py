"""Every mirror of a published cut as read by DuckDB, ``deltalake`` and Spark SQL through the
statements and helpers of ``cs_platform.lake.engines``, in one comparable form, and the check that
they all equal the mirrors Spark opens with ``Lake.mirrors_at_cut``."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb

from cs_platform.lake.cuts import Lake
from cs_platform.lake.engines import CutTables, history_statements, read_arrow, statements
from cs_platform.lake.history_schema import VALID_FROM
from cs_platform.lake.identifiers import double_quoted
from cs_platform.lake.mirrors import primary_key
from cs_platform.lake.published import PublishedCut, cut_of_version, published_cut
from cs_platform.lake.types import utc

Rows = list[tuple]


def comparable(value):
    """One value as every engine's would compare: instants in UTC (PySpark hands back naive local
    time), bytes as bytes, arrays as tuples."""
    if isinstance(value, datetime):
        return utc(value) if value.tzinfo is None else value.astimezone(timezone.utc)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)):
        return tuple(comparable(v) for v in value)
    return value


def _sorted(rows) -> Rows:
    return sorted((tuple(comparable(v) for v in row) for row in rows), key=repr)


def by_spark(lake: Lake, cut: datetime) -> dict[str, Rows]:
    return {table: _sorted(df.collect()) for table, df in lake.mirrors_at_cut(cut).items()}


def by_duckdb(tables: CutTables) -> dict[str, Rows]:
    """The mirrors through the DuckDB statements ``cs-platform-lake open --engine duckdb`` prints."""
    with duckdb.connect() as con:
        con.execute(statements(tables, "duckdb"))
        return {table: _sorted(con.execute(f"SELECT * FROM {double_quoted(table)}").fetchall()) for table in tables.cut.versions}


def by_deltalake(tables: CutTables) -> dict[str, Rows]:
    return {table: _sorted(tuple(row.values()) for row in arrow.to_pylist()) for table, arrow in read_arrow(tables).items()}


def by_spark_sql(lake: Lake, tables: CutTables) -> dict[str, Rows]:
    """The mirrors through the Spark SQL statements ``cs-platform-lake open --engine spark`` prints."""
    for statement in statements(tables, "spark").splitlines():
        if not statement.startswith("--"):
            lake.spark.sql(statement.rstrip(";"))
    return {table: _sorted(lake.spark.table(f"`{table}`").collect()) for table in tables.cut.versions}


def check_readers_agree(lake: Lake, cut: datetime) -> PublishedCut:
    """At ``cut``: DuckDB, deltalake and Spark SQL (through the printed statements) read every
    mirror exactly as ``Lake.mirrors_at_cut`` does, and each pinned version names its cut in its
    commit. Returns the cut as published."""
    published = published_cut(lake.location, cut)
    tables = CutTables.of(lake.location, published)
    expected = by_spark(lake, cut)
    for reader, read in (("duckdb", by_duckdb(tables)), ("deltalake", by_deltalake(tables)), ("spark sql", by_spark_sql(lake, tables))):
        for table, rows in expected.items():
            assert read[table] == rows, f"{reader} reads {table} at cut {cut.isoformat()} unlike Spark: {read[table][:3]} vs {rows[:3]}"
    for table, version in published.versions.items():
        named = cut_of_version(lake.location, table, version)
        assert named is not None and named <= published.cut, f"{table} v{version} names cut {named}, published at {published.cut}"
    return published


def history_versions(lake: Lake, table: str) -> list[dict]:
    """Every version in ``table``'s history (its latest version), by key then ``_valid_from``, instants in UTC."""
    history = lake.history_table(table)
    keys = primary_key(lake.spark, history)
    rows = [{c: comparable(v) for c, v in r.asDict().items()} for r in history.read(lake.spark).collect()]
    return sorted(rows, key=lambda r: (*[repr(r[k]) for k in keys], r[VALID_FROM]))


def check_history_at_cut(lake: Lake, cut: datetime) -> None:
    """Every history table, read by DuckDB at its latest version through the statements of
    ``engines.history_statements`` (no time travel), is the mirror at ``cut`` row by row."""
    tables = CutTables.of(lake.location, published_cut(lake.location, cut))
    assert tables.histories, f"no history table at cut {cut.isoformat()}"
    mirrors = lake.mirrors_at_cut(cut)
    with duckdb.connect() as con:
        con.execute(history_statements(tables, "duckdb"))
        for table in tables.histories:
            columns = mirrors[table].columns
            expected = _sorted(mirrors[table].collect())
            read = _sorted(con.execute(f"SELECT {', '.join(map(double_quoted, columns))} FROM {double_quoted(table)}").fetchall())
            assert read == expected, f"history of {table} at cut {cut.isoformat()} is not its mirror: {read[:3]} vs {expected[:3]}"
