"""Reads of the source tables as of a timestamp, to check the lake against the source.

A stale read at the cut timestamp sees exactly the transactions committed at or before it, which
is what the mirrors must hold at that cut.
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from google.cloud import spanner
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.query import validate_identifier


class SourceSnapshot:
    def __init__(self, database: Database, read_timestamp: datetime) -> None:
        self.database = database
        self.read_timestamp = read_timestamp

    def row_count(self, table: str) -> int:
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            return list(snap.execute_sql(f"SELECT COUNT(*) FROM {validate_identifier(table, 'table name')}"))[0][0]

    def existing_keys(self, table: str, key_columns: Sequence[str], keys: Sequence[Sequence]) -> set[tuple]:
        """Which of ``keys`` (primary key values, in key column order) exist at the timestamp."""
        if not keys:
            return set()
        columns = [validate_identifier(c, "key column name") for c in key_columns]
        with self.database.snapshot(read_timestamp=self.read_timestamp) as snap:
            rows = snap.read(validate_identifier(table, "table name"), columns, spanner.KeySet(keys=[list(k) for k in keys]))
            return {tuple(r) for r in rows}
