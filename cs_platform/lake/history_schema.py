"""What a history table is made of, and which tables keep one: the part of ``history`` that
readers on other engines need too, so it imports nothing of Spark."""

from __future__ import annotations

from dataclasses import dataclass

VALID_FROM, VALID_TO, TRANSACTION, OPERATION = "_valid_from", "_valid_to", "_transaction_id", "_operation"
SNAPSHOT = "SNAPSHOT"
SETTING = "CS_PLATFORM_HISTORY_TABLES"
BOUNDS = {VALID_FROM: "TIMESTAMP", VALID_TO: "TIMESTAMP", TRANSACTION: "STRING", OPERATION: "STRING"}


@dataclass(frozen=True)
class HistoryPolicy:
    """Which watched tables keep a history table: ``none``, ``all``, or a comma-separated list."""

    tables: frozenset[str] | None = frozenset()  # None: every table

    @classmethod
    def parse(cls, text: str) -> HistoryPolicy:
        words = [w.strip() for w in text.split(",") if w.strip()]
        if words in ([], ["none"]):
            return cls()
        if words == ["all"]:
            return cls(None)
        if {"all", "none"} & set(words):
            raise ValueError(f"{SETTING}={text!r}: give none, all, or a list of table names, not a mix")
        return cls(frozenset(words))

    def keeps(self, table: str) -> bool:
        return self.tables is None or table in self.tables
