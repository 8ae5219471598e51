"""The change stream query: its statement, bound arguments and validation.

The stream name is the only thing spliced into SQL (a table-valued function name cannot be a
parameter), so it must be a plain Spanner identifier; every other argument is a bound parameter.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1 import RequestOptions, param_types

from cs_platform.changestream.errors import InvalidIdentifierError
from cs_platform.errors import InvalidArgumentError

# Spanner identifiers: a letter, then letters, digits or underscores; at most 128 characters.
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")

# The seeds document 1,000..300,000 ms; current Spanner and the emulator accept 100..300,000.
MIN_HEARTBEAT_MILLIS = 100
MAX_HEARTBEAT_MILLIS = 300_000


class Dialect(str, enum.Enum):
    GOOGLE_STANDARD_SQL = "GOOGLE_STANDARD_SQL"
    POSTGRESQL = "POSTGRESQL"


class PartitionMode(str, enum.Enum):
    """How the stream's partitions behave (``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS``
    ``partition_mode``; absent means IMMUTABLE_KEY_RANGE). IMMUTABLE_KEY_RANGE partitions end in
    child partitions; MUTABLE_KEY_RANGE ones announce new partitions, move key ranges between live
    ones, end with an end record, and are read as ``google.spanner.v1.ChangeStreamRecord`` messages
    (https://cloud.google.com/spanner/docs/change-streams/details)."""

    IMMUTABLE_KEY_RANGE = "IMMUTABLE_KEY_RANGE"
    MUTABLE_KEY_RANGE = "MUTABLE_KEY_RANGE"


class RpcPriority(str, enum.Enum):
    """The priority of the change stream and metadata requests: a busy database can serve CDC
    reads after its own traffic (LOW); HIGH, like Beam's connector, by default."""

    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"

    @property
    def request_options(self) -> RequestOptions:
        return RequestOptions(priority=getattr(RequestOptions.Priority, f"PRIORITY_{self.value}"))


def validate_identifier(name: str, what: str) -> str:
    """Return ``name`` if it is a plain Spanner identifier, else raise naming ``what`` and the rule."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise InvalidIdentifierError(
            f"{what} {name!r} is not a valid Spanner identifier: use a letter followed by up to 127 "
            "letters, digits or underscores (no quotes, spaces, dots or SQL)"
        )
    return name


def quote_identifier(name: str, what: str, dialect: "Dialect | str" = "GOOGLE_STANDARD_SQL") -> str:
    """``name`` validated and quoted for SQL: `` `Order` `` in GoogleSQL, ``"Order"`` in PostgreSQL.

    Quoting makes reserved words (``Order``, ``Group``, ``Select``) and, in PostgreSQL, mixed case
    names work; validation first keeps anything but a plain identifier out of the statement.
    """
    validate_identifier(name, what)
    return f'"{name}"' if Dialect(dialect) is Dialect.POSTGRESQL else f"`{name}`"


def validate_table(name: str) -> str:
    """A table's name as change records give it: ``Table``, or ``schema.Table`` in a named schema."""
    schema, dot, table = name.rpartition(".")
    if dot:
        validate_identifier(schema, "schema name")
    validate_identifier(table, "table name")
    return name


def quote_table(name: str, dialect: "Dialect | str" = "GOOGLE_STANDARD_SQL") -> str:
    """A table's name (:func:`validate_table`) quoted for SQL part by part: `` `schema`.`Table` ``,
    ``"schema"."Table"``."""
    schema, dot, table = validate_table(name).rpartition(".")
    quoted = quote_identifier(table, "table name", dialect)
    return f"{quote_identifier(schema, 'schema name', dialect)}.{quoted}" if dot else quoted


def validate_heartbeat_millis(millis: int) -> int:
    if isinstance(millis, bool) or not isinstance(millis, int) or not (
        MIN_HEARTBEAT_MILLIS <= millis <= MAX_HEARTBEAT_MILLIS
    ):
        raise InvalidArgumentError(
            f"heartbeat_millis {millis!r} is out of range: use an integer from {MIN_HEARTBEAT_MILLIS} "
            f"to {MAX_HEARTBEAT_MILLIS} milliseconds (Spanner rejects others)"
        )
    return millis


@dataclass(frozen=True)
class Statement:
    sql: str
    params: dict[str, Any]
    param_types: dict[str, Any]


@dataclass(frozen=True)
class ChangeStreamQuery:
    """Builds ``READ_<stream>`` (GoogleSQL) or ``spanner.read_json_<stream>`` (PostgreSQL) calls;
    a PostgreSQL MUTABLE_KEY_RANGE stream is read with ``spanner.read_proto_bytes_<stream>``."""

    stream_name: str
    dialect: Dialect = Dialect.GOOGLE_STANDARD_SQL
    heartbeat_millis: int = 2_000
    partition_mode: PartitionMode = PartitionMode.IMMUTABLE_KEY_RANGE

    def __post_init__(self) -> None:
        validate_identifier(self.stream_name, "change stream name")
        validate_heartbeat_millis(self.heartbeat_millis)
        object.__setattr__(self, "dialect", Dialect(self.dialect))
        object.__setattr__(self, "partition_mode", PartitionMode(self.partition_mode))

    @property
    def mutable(self) -> bool:
        return self.partition_mode is PartitionMode.MUTABLE_KEY_RANGE

    def statement(self, start: datetime, end: datetime | None, token: str | None) -> Statement:
        if end is not None and end < start:
            raise InvalidArgumentError(f"end timestamp {end} is before start timestamp {start}")
        if self.dialect is Dialect.POSTGRESQL:
            function = "read_proto_bytes_" if self.mutable else "read_json_"
            sql = f"SELECT * FROM spanner.{function}{self.stream_name}($1, $2, $3, $4, null)"
            names = ("p1", "p2", "p3", "p4")
        else:
            sql = (
                f"SELECT ChangeRecord FROM READ_{self.stream_name}("
                "start_timestamp => @start_timestamp, end_timestamp => @end_timestamp, "
                "partition_token => @partition_token, heartbeat_milliseconds => @heartbeat_milliseconds)"
            )
            names = ("start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds")
        values = (start, end, token, self.heartbeat_millis)
        types = (param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64)
        return Statement(sql, dict(zip(names, values)), dict(zip(names, types)))
