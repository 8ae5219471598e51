"""What each run wrote to a Dagster instance's storage (SQLite, as ``make dev`` and the benches use it).

A run's cost in any run storage (SQLite here, Postgres in production) is the rows it wrote: its run
row and tags, its events (in its own event log, and its asset events once more in the index), its
asset check executions, and its captured step logs (compute logs, files). This counts the bytes of
those rows' values (``LENGTH`` of every column) and of its log files, by kind: the Dagster event
type, ``LOG`` for a log line, ``RUN`` for the
run row and its tags, ``COMPUTE_LOGS``. SQLite's files are larger than their rows: a run's own event
log database starts at ~130 KB of pages, which a Postgres table does not pay per run.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunStorage:
    by_kind: dict[str, int]  # bytes per kind
    events: dict[str, int]  # events per kind, in the run's own event log

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def of(self, *kinds: str) -> float:
        """The bytes of these kinds of event, with their share of the compute logs (the run's
        console prints a line per event)."""
        share = sum(self.events.get(k, 0) for k in kinds) / max(1, sum(self.events.values()))
        return sum(self.by_kind.get(kind, 0) for kind in kinds) + share * self.by_kind.get("COMPUTE_LOGS", 0)


def _row_bytes(connection: sqlite3.Connection, table: str, alias: str = "") -> str:
    """A SQL expression: the bytes of every column of a row of ``table``."""
    columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
    prefix = f"{alias}." if alias else ""
    return " + ".join(f'COALESCE(LENGTH({prefix}"{c}"), 0)' for c in columns)


def _event_kind() -> str:
    return "COALESCE(dagster_event_type, 'LOG')"


def storage_of_runs(home: Path, run_ids: list[str]) -> dict[str, RunStorage]:
    """Bytes each of ``run_ids`` wrote to the instance in ``home`` (DAGSTER_HOME), by kind."""
    wanted = set(run_ids)
    found: dict[str, dict[str, int]] = {run_id: defaultdict(int) for run_id in run_ids}
    counts: dict[str, dict[str, int]] = {run_id: defaultdict(int) for run_id in run_ids}
    runs = sqlite3.connect(home / "history" / "runs.db")
    for table in ("runs", "run_tags"):
        for run_id, size in runs.execute(f'SELECT run_id, SUM({_row_bytes(runs, table)}) FROM "{table}" GROUP BY run_id'):
            if run_id in wanted:
                found[run_id]["RUN"] += size
    runs.close()
    for run_id in run_ids:
        shard = home / "history" / "runs" / f"{run_id}.db"
        if shard.exists():
            events = sqlite3.connect(shard)
            for kind, size, count in events.execute(
                f"SELECT {_event_kind()}, SUM({_row_bytes(events, 'event_logs')}), COUNT(*) FROM event_logs GROUP BY 1"
            ):
                found[run_id][kind] += size
                counts[run_id][kind] += count
            events.close()
        logs = home / "storage" / run_id
        found[run_id]["COMPUTE_LOGS"] += sum(f.stat().st_size for f in logs.rglob("*") if f.is_file()) if logs.exists() else 0
    index = sqlite3.connect(home / "history" / "runs" / "index.db")
    rows = _row_bytes(index, "event_logs")
    tags = _row_bytes(index, "asset_event_tags", "t")
    query = (
        f"SELECT run_id, {_event_kind()}, SUM({rows}) + COALESCE(SUM((SELECT SUM({tags}) FROM asset_event_tags t WHERE t.event_id = event_logs.id)), 0) "
        "FROM event_logs GROUP BY 1, 2"
    )
    for run_id, kind, size in index.execute(query):
        if run_id in wanted:
            found[run_id][kind] += size
    checks = _row_bytes(index, "asset_check_executions")
    for run_id, size in index.execute(f"SELECT run_id, SUM({checks}) FROM asset_check_executions GROUP BY run_id"):
        if run_id in wanted:
            found[run_id]["ASSET_CHECK_EVALUATION"] += size
    index.close()
    return {run_id: RunStorage(dict(kinds), dict(counts[run_id])) for run_id, kinds in found.items()}
