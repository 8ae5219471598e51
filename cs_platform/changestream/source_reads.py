"""Reads of the source tables as of a timestamp, to check the lake against the source.

A stale read at the cut timestamp sees exactly the transactions committed at or before it, which
is what the mirrors must hold at that cut.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Sequence

from google.cloud import spanner
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.connection import database_dialect
from cs_platform.changestream.query import quote_identifier, quote_table, validate_identifier, validate_table
from cs_platform.changestream.values import read_text


def key_value(value: Any) -> Any:
    """A primary key value as the Spanner client takes it in a KeySet: BYTES base64-encoded (the
    client's convention), timestamps timezone-aware, everything else as it is."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value))
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(f"key value {value!r} is a naive datetime: pass it timezone-aware (UTC)")
    return value


class SourceSnapshot:
    def __init__(self, database: Database, read_timestamp: datetime) -> None:
        self.database = database
        self.read_timestamp = read_timestamp

    def row_count(self, table: str) -> int:
        dialect = database_dialect(self.database)
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            return list(snap.execute_sql(f"SELECT COUNT(*) FROM {quote_table(table, dialect)}"))[0][0]

    def rows_with_values(self, table: str, columns: Sequence[str]) -> int:
        """How many rows hold a value (not NULL) in one of ``columns`` at the timestamp: one scan in
        Spanner, one number back."""
        dialect = database_dialect(self.database)
        where = " OR ".join(f"{quote_identifier(c, 'column name', dialect)} IS NOT NULL" for c in columns)
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            return list(snap.execute_sql(f"SELECT COUNT(*) FROM {quote_table(table, dialect)} WHERE {where}"))[0][0]

    def rows_as_text(self, table: str, columns: Sequence[str], key_columns: Sequence[str], keys: Sequence[Sequence]) -> list[tuple[str | None, ...]]:
        """The rows of ``keys`` (primary key values, in ``key_columns`` order) that exist at the
        timestamp, each value of ``columns`` as the text the lake casts (``values.read_text``, as a
        snapshot reads them): typed by the lake's own casts, they compare with a mirror's rows."""
        if not keys:
            return []
        names = [validate_identifier(c, "column name") for c in columns]
        keyset = spanner.KeySet(keys=[[key_value(v) for v in k] for k in keys])
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            return [tuple(map(read_text, row)) for row in snap.read(validate_table(table), names, keyset, lazy_decode=True)]

    def existing_keys(self, table: str, key_columns: Sequence[str], keys: Sequence[Sequence]) -> set[tuple]:
        """Which of ``keys`` (primary key values, in key column order) exist at the timestamp."""
        if not keys:
            return set()
        columns = [validate_identifier(c, "key column name") for c in key_columns]
        keyset = spanner.KeySet(keys=[[key_value(v) for v in k] for k in keys])
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            return {tuple(r) for r in snap.read(validate_table(table), columns, keyset)}
