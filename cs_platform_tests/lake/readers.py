"""Every mirror of a published cut as read by DuckDB, ``deltalake`` and Spark SQL through the
statements and helpers of ``cs_platform.lake.engines``, in one comparable form, and the check that
they all equal the mirrors Spark opens with ``Lake.mirrors_at_cut``."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from cs_platform.lake.engines import CutTables, history_statements, read_arrow, statements
from cs_platform.lake.history_schema import OPERATION, SNAPSHOT, VALID_FROM, VALID_TO
from cs_platform.lake.identifiers import double_quoted, standard_string
from cs_platform.lake.mirrors import primary_key
from cs_platform.lake.published import PublishedCut, cut_of_version, published_cut
from cs_platform.lake.stream_lake import Lake
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


def check_history_intervals(lake: Lake, table: str, writes: dict[str, list[tuple[datetime, str]]]) -> int:
    """The versions of ``table``'s history against the source's commit log (``writes``: per key, as
    the canonical JSON of its key columns, the (commit timestamp, mod type) of every transaction
    that wrote it, ascending): per key the validity intervals do not overlap; a version ends where
    the next begins unless the key was deleted in between, and then at the delete; only the last
    may be open; every bound is a commit timestamp of a transaction that wrote the key (a snapshot
    version begins at the snapshot's cut). Returns how many versions were checked."""
    history = lake.history_table(table)
    keys = primary_key(lake.spark, history)
    versions: dict[str, list[dict]] = {}
    for row in history_versions(lake, table):
        versions.setdefault(json.dumps({k: row[k] for k in keys}, sort_keys=True), []).append(row)
    for key, rows in versions.items():
        committed = dict(writes.get(key, []))
        for row, after in zip(rows, rows[1:] + [None]):
            where = f"{table} {key} version from {row[VALID_FROM]}"
            assert row[OPERATION] == SNAPSHOT or row[VALID_FROM] in committed, f"{where}: not a commit that wrote the key"
            if after is None:
                continue
            assert row[VALID_TO] is not None and row[VALID_TO] <= after[VALID_FROM], f"{where} overlaps the next ({row[VALID_TO]})"
            if row[VALID_TO] < after[VALID_FROM]:
                assert committed.get(row[VALID_TO]) == "DELETE", f"{where} ends at {row[VALID_TO]}, which deleted nothing"
        last = rows[-1]
        if last[VALID_TO] is not None:
            assert committed.get(last[VALID_TO]) == "DELETE", f"{table} {key}: its last version ends at {last[VALID_TO]}, not at a delete"
    return sum(len(rows) for rows in versions.values())


def _duckdb_read(lake: Lake, query) -> tuple:
    """``query(tables)``'s first row, in DuckDB, after the no-time-travel views at the latest cut."""
    tables = CutTables.of(lake.location, published_cut(lake.location))
    with duckdb.connect() as con:
        con.execute(history_statements(tables, "duckdb", latest=True))
        return con.execute(query(tables)).fetchone()


def latest_cut_without_time_travel(lake: Lake) -> datetime:
    """The latest published cut as an engine without time travel finds it: the manifest's latest rows."""
    (cut,) = _duckdb_read(lake, lambda t: f"SELECT max(cut_timestamp) FROM delta_scan({standard_string(t.manifest)})")
    return comparable(cut)


def bank_without_time_travel(lake: Lake) -> tuple[int, int]:
    """(accounts, total balance) of the bank at the latest published cut, from the history tables
    at their latest version (``engines.history_statements(latest=True)``, what BigQuery or Athena run)."""
    return _duckdb_read(lake, lambda t: 'SELECT count(*), sum("Balance") FROM "Accounts"')
