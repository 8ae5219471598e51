"""What the source database says about its change streams (``INFORMATION_SCHEMA``).

Lower-case names work in both dialects: GoogleSQL names are case-insensitive, PostgreSQL folds
unquoted names to lower case.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Mapping

from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import UnknownChangeStreamError, UnsupportedColumnTypeError
from cs_platform.changestream.query import PartitionMode
from cs_platform.changestream.records import ColumnType


def change_streams(database: Database, timeout_s: float = 30.0) -> list[str]:
    with database.snapshot() as snap:
        rows = snap.execute_sql("SELECT change_stream_name FROM information_schema.change_streams", timeout=timeout_s)
        return sorted(r[0] for r in rows)


def require_change_stream(database: Database, stream: str, timeout_s: float = 30.0) -> None:
    """Raise :class:`UnknownChangeStreamError` naming the streams that do exist if ``stream`` does not."""
    found = change_streams(database, timeout_s)
    if stream not in found:
        raise UnknownChangeStreamError(
            f"change stream {stream!r} does not exist in database {database.database_id!r} (it has: "
            f"{', '.join(found) or 'none'}): create it (CREATE CHANGE STREAM {stream} FOR …) or fix the stream's name.",
            fixed_by=("stream",),
        )


@dataclass(frozen=True)
class WatchedTable:
    """A table a change stream watches, and the columns it watches (keys always), as change records
    describe them (``column_types``): a snapshot of the table then types its rows as the stream does."""

    name: str
    columns: tuple[ColumnType, ...]  # keys first, then by position in the table


DEFAULT_RETENTION = timedelta(hours=1)  # version_retention_period when none is set
MIN_STREAM_RETENTION = timedelta(days=1)  # the shortest retention_period Spanner accepts (and its default)
_RETENTION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DEFAULT_SCHEMAS = {"", "public"}  # GoogleSQL's, PostgreSQL's: its tables go by their bare name
_SYSTEM_SCHEMAS = {"information_schema", "spanner_sys", "pg_catalog"}
_PROTO_KINDS = ("PROTO<", "ENUM<")
_LENGTHS = re.compile(r"\([^()]*\)")  # STRING(MAX), character varying(10), (vector_length=>N)
_GENERATED = "ALWAYS"  # is_generated of a generated column: change streams do not carry them
_POSTGRES_TYPES = {
    "bigint": {"code": "INT64"},
    "boolean": {"code": "BOOL"},
    "bytea": {"code": "BYTES"},
    "character varying": {"code": "STRING"},
    "text": {"code": "STRING"},
    "date": {"code": "DATE"},
    "double precision": {"code": "FLOAT64"},
    "real": {"code": "FLOAT32"},
    "jsonb": {"code": "JSON", "type_annotation": "PG_JSONB"},
    "numeric": {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"},
    "timestamp with time zone": {"code": "TIMESTAMP"},
    "spanner.commit_timestamp": {"code": "TIMESTAMP"},
}


def column_type(spanner_type: str) -> dict:
    """``INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE`` (``ARRAY<STRING(MAX)>``, ``bigint[]``, ...) as the
    type structure change records carry (``{"code": "ARRAY", "array_element_type": {...}}``)."""
    text = spanner_type.strip()
    if text.upper().startswith("ARRAY<") and ">" in text:
        # An annotation after the element type is not a type: ARRAY<FLOAT32>(vector_length=>256).
        return {"code": "ARRAY", "array_element_type": column_type(text[6 : _closing(text, 5)])}
    if text.endswith("[]"):
        return {"code": "ARRAY", "array_element_type": column_type(text[:-2])}
    if text.upper().startswith(_PROTO_KINDS) and text.endswith(">"):
        # A proto bundle's message or enum: PROTO<pkg.Message>, ENUM<pkg.Enum> (as Beam's SpannerSchema
        # parses them), typed as records type them: code and proto_type_fqn (google/spanner/v1/type.proto).
        kind, name = text[:-1].split("<", 1)
        return {"code": kind.upper(), "proto_type_fqn": name.strip().strip("`")}
    base = text.split("(", 1)[0].split("<", 1)[0].strip()
    if base in _POSTGRES_TYPES:
        return dict(_POSTGRES_TYPES[base])
    if base.isupper():
        return {"code": base}
    raise UnsupportedColumnTypeError(f"column type {spanner_type!r} has no mapping in cs_platform yet; report it")


def _closing(text: str, opening: int) -> int:
    """The index of the ``>`` that closes the ``<`` at ``opening`` (element types nest: ARRAY<PROTO<x>>)."""
    depth = 0
    for i in range(opening, len(text)):
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise UnsupportedColumnTypeError(f"column type {text!r} has an unclosed '<'; report it")


def _typed(table: str, column: dict) -> dict:
    try:
        return column_type(column["spanner_type"])
    except UnsupportedColumnTypeError as e:
        raise UnsupportedColumnTypeError(f"{table}.{column['column_name']}: {e}") from e


# The INFORMATION_SCHEMA views that say which tables a stream watches (the columns' types are in others).
_MEMBERSHIP_VIEWS = ("change_streams", "change_stream_tables", "change_stream_columns", "tables")


def watched_tables(database: Database, stream: str, read_timestamp: datetime | None = None, timeout_s: float = 30.0) -> list[WatchedTable]:
    """Every table ``stream`` watches and its watched columns (``FOR ALL``: every user table, all its
    columns; a table without a column list: all its columns; a column list: those and the keys), as
    the schema stood at ``read_timestamp`` (now if None): a snapshot at T0 reads the tables of T0,
    even one dropped since."""
    return watched_tables_and_shapes(database, stream, read_timestamp, timeout_s)[0]


def watched_tables_and_shapes(
    database: Database, stream: str, read_timestamp: datetime | None = None, timeout_s: float = 30.0
) -> tuple[list[WatchedTable], dict[str, str]]:
    """:func:`watched_tables` and each table's :func:`shape` from one read of the schema (what a
    snapshot records of the tables it reads)."""
    schema = _read_schema(database, _MEMBERSHIP_VIEWS + ("columns", "index_columns"), read_timestamp, timeout_s)
    keys = {(qualified(r), r["column_name"]) for r in schema["index_columns"] if _user(r) and r["index_type"] == "PRIMARY_KEY"}
    tables = []
    for table, rows in _watched_column_rows(database, stream, schema, keys).items():
        columns = [ColumnType(r["column_name"], _typed(table, r), (table, r["column_name"]) in keys, int(r["ordinal_position"])) for r in rows]
        tables.append(WatchedTable(table, tuple(sorted(columns, key=lambda c: (not c.is_primary_key, c.ordinal_position)))))
    return tables, _shapes(database, stream, schema)


def watched_column_types(database: Database, stream: str, read_timestamp: datetime | None = None, timeout_s: float = 30.0) -> dict[str, dict[str, str]]:
    """Per table ``stream`` watches at ``read_timestamp``, its watched columns' names and Spanner
    types as INFORMATION_SCHEMA spells them, lengths left out (no type is mapped, so any column
    reads): what :func:`shape` digests, and what tells a column added from one dropped or retyped.
    Five of :func:`watched_tables`' six reads."""
    return _column_types(database, stream, _read_schema(database, _MEMBERSHIP_VIEWS + ("columns",), read_timestamp, timeout_s))


def shape(columns: Mapping[str, str]) -> str:
    """A short digest of a table's watched columns (:func:`watched_column_types`): it changes when a
    watched column is dropped, added or retyped, which no change record says (``lake_steps``), not
    when a length or a vector length changes, which the mirror's types do not hold."""
    return hashlib.sha256(json.dumps(sorted(columns.items())).encode()).hexdigest()[:16]


def _column_types(database: Database, stream: str, schema: dict[str, list[dict]]) -> dict[str, dict[str, str]]:
    return {
        table: {r["column_name"]: _LENGTHS.sub("", r["spanner_type"]) for r in rows}
        for table, rows in _watched_column_rows(database, stream, schema, keys=None).items()
    }


def _shapes(database: Database, stream: str, schema: dict[str, list[dict]]) -> dict[str, str]:
    return {table: shape(columns) for table, columns in _column_types(database, stream, schema).items()}


def _watched_column_rows(database: Database, stream: str, schema: dict[str, list[dict]], keys: set[tuple[str, str]] | None) -> dict[str, list[dict]]:
    """Per watched table (sorted), the ``columns`` rows of the columns its records carry: its
    primary key (``keys``), and the chosen columns that are not generated. With ``keys`` None, a key
    a column list leaves out is left out here too: :func:`watched_column_types` needs no key, since
    Spanner drops or retypes no key column."""
    watched = _watched_columns(database, stream, schema)
    rows: dict[str, list[dict]] = {table: [] for table in sorted(watched)}
    for r in schema["columns"]:
        table = qualified(r) if _user(r) else None
        if table not in rows:
            continue
        chosen = watched[table]
        is_key = keys is not None and (table, r["column_name"]) in keys
        if is_key or (r.get("is_generated") != _GENERATED and (chosen is None or r["column_name"] in chosen)):
            rows[table].append(r)
    return rows


def watched_table_names(database: Database, stream: str, read_timestamp: datetime | None = None, timeout_s: float = 30.0) -> list[str]:
    """The names of the tables ``stream`` watches at ``read_timestamp`` (:func:`watched_tables`
    without their columns: four of its six reads, and no column type to map)."""
    return sorted(_watched_columns(database, stream, _read_schema(database, _MEMBERSHIP_VIEWS, read_timestamp, timeout_s)))


def _read_schema(database: Database, views: tuple[str, ...], read_timestamp: datetime | None, timeout_s: float) -> dict[str, list[dict]]:
    with database.snapshot(multi_use=True, **({"read_timestamp": read_timestamp} if read_timestamp else {})) as snap:
        return {name: _rows(snap, name, timeout_s) for name in views}


def _watched_columns(database: Database, stream: str, schema: dict[str, list[dict]]) -> dict[str, set[str] | None]:
    """Per watched table, its chosen columns (None: every column)."""
    streams = {r["change_stream_name"]: r for r in schema["change_streams"]}
    if stream not in streams:
        raise UnknownChangeStreamError(
            f"change stream {stream!r} does not exist in database {database.database_id!r} (it has: "
            f"{', '.join(sorted(streams)) or 'none'}): create it or fix the stream's name.",
            fixed_by=("stream",),
        )
    user_tables = sorted(qualified(r) for r in schema["tables"] if _user(r) and r["table_type"] == "BASE TABLE")
    if _yes(streams[stream]["all"]):
        return {table: None for table in user_tables}  # None: every column
    watched = {qualified(r): None if _yes(r["all_columns"]) else set() for r in schema["change_stream_tables"] if r["change_stream_name"] == stream}
    for r in schema["change_stream_columns"]:
        if r["change_stream_name"] == stream and watched.get(qualified(r)) is not None:
            watched[qualified(r)].add(r["column_name"])
    return watched


def qualified(row: Mapping[str, str]) -> str:
    """A table's name as change records give it: bare in the default schema, ``schema.Table`` in a
    named one (a schema's tables may share names with the default schema's; Spanner names cannot
    hold a dot, so the two never collide)."""
    schema, table = row["table_schema"], row["table_name"]
    return table if schema in _DEFAULT_SCHEMAS else f"{schema}.{table}"


def _user(row: Mapping[str, str]) -> bool:
    return row["table_schema"].lower() not in _SYSTEM_SCHEMAS


def _yes(flag) -> bool:
    """An INFORMATION_SCHEMA flag: BOOL in GoogleSQL, 'YES'/'NO' text in PostgreSQL."""
    return flag is True or str(flag).upper() in ("YES", "TRUE")


def _rows(snap, view: str, timeout_s: float) -> list[dict]:
    """Every row of ``information_schema.<view>``, keyed by lower-case column name (the view's
    columns differ a little between dialects, and ``ALL`` is a reserved word in both)."""
    result = snap.execute_sql(f"SELECT * FROM information_schema.{view}", timeout=timeout_s)
    rows = list(result)
    names = [field.name.lower() for field in result.fields]
    return [dict(zip(names, row)) for row in rows]


def _duration(text: str, default: timedelta) -> timedelta:
    """A Spanner duration option (``36h``, ``7d``, ``90m``, ``3600s``); ``default`` when unknown."""
    text = text.strip().lower()
    try:
        return timedelta(seconds=float(text[:-1]) * _RETENTION_UNITS[text[-1]])
    except (KeyError, ValueError, IndexError):
        return default


def version_retention(database: Database, timeout_s: float = 30.0) -> timedelta:
    """How far back the database serves reads (its ``version_retention_period``; 1 hour unless set)."""
    with database.snapshot() as snap:
        options = {r["option_name"].lower(): r["option_value"] for r in _rows(snap, "database_options", timeout_s)}
    # A spelling this code does not know: Spanner's default, the shortest.
    return _duration(str(options.get("version_retention_period") or "1h"), DEFAULT_RETENTION)


def _stream_options(database: Database, stream: str, timeout_s: float) -> dict[str, object]:
    with database.snapshot() as snap:
        return {
            r["option_name"].lower(): r["option_value"]
            for r in _rows(snap, "change_stream_options", timeout_s)
            if r["change_stream_name"] == stream
        }


def partition_mode(database: Database, stream: str, timeout_s: float = 30.0) -> PartitionMode:
    """How the stream's partitions behave (its ``partition_mode``; IMMUTABLE_KEY_RANGE unless set)."""
    value = str(_stream_options(database, stream, timeout_s).get("partition_mode") or PartitionMode.IMMUTABLE_KEY_RANGE.value)
    try:
        return PartitionMode(value.strip().upper())
    except ValueError as e:
        raise UnknownChangeStreamError(
            f"change stream {stream!r} has partition_mode {value!r}, which cs_platform does not know "
            f"(it reads {', '.join(m.value for m in PartitionMode)}): upgrade cs_platform"
        ) from e


def change_stream_retention(database: Database, stream: str, timeout_s: float = 30.0) -> timedelta:
    """How long the stream keeps its records (its ``retention_period``; 1 day unless set)."""
    options = _stream_options(database, stream, timeout_s)
    # A spelling this code does not know: Spanner's minimum, so a warning comes early, never late.
    return _duration(str(options.get("retention_period") or "1d"), MIN_STREAM_RETENTION)


