"""Reproduce the emulator's chop-boundary loss, and show that past windows do not suffer from it.

    python -m cs_platform.dev.chop_boundary_probe [--chop-ms 1] [--commits 1000]

Starts a private emulator whose live queries scan in ``--chop-ms`` chops, commits single-row
transactions while one streaming query per partition is open, then reads the same range again with an
end timestamp already past (what ``tail.POLLING`` does). Prints, for both, how many commits are
missing, and whether the streaming losses sit on one grid of period chop + 1 µs (the boundaries
``[s, e)`` then ``[e + 1 µs, …)`` of the emulator's scans). Small chops make the loss frequent
(about 1 commit in 1,001 at 1 ms) but make the emulator slow: keep ``--commits`` near 1,000.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from datetime import datetime, timedelta

from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.mapper import GoogleSqlRowMapper
from cs_platform.changestream.metadata import utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.records import ChangeRecord, ChildPartitionsRecord, DataChangeRecord
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance

log = logging.getLogger("chop_boundary_probe")
QUERY = ChangeStreamQuery("ProbeStream", heartbeat_millis=1000)


def query(database: Database, start: datetime, end: datetime, token: str | None) -> list[ChangeRecord]:
    statement = QUERY.statement(start, end, token)
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            statement.sql, params=statement.params, param_types=statement.param_types, lazy_decode=True
        )
        rows = list(results)
        mapper = GoogleSqlRowMapper(token or "initial", results.fields)
        return [record for row in rows for record in mapper.map_row(row)]


def commit_timestamps(records: list[DataChangeRecord]) -> set[datetime]:
    return {r.commit_timestamp for r in records if isinstance(r, DataChangeRecord)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chop-ms", type=int, default=1)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--per-second", type=float, default=200.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    chop_flag = f"--change_streams_partition_query_chop_interval={args.chop_ms}ms"
    emulator = SpannerEmulator(churn=False, extra_flags=(chop_flag,)).start()
    try:
        client = SpannerTarget("probe-project", "probe", "probe", emulator.host).client()
        database = create_database(
            create_instance(client, "probe"),
            "probe",
            ["CREATE TABLE Probe (Id INT64 NOT NULL) PRIMARY KEY (Id)", "CREATE CHANGE STREAM ProbeStream FOR Probe"],
        )
        start = utc_now()
        tokens = [
            child.token
            for record in query(database, start, start, None)
            if isinstance(record, ChildPartitionsRecord)
            for child in record.child_partitions
        ]
        end = start + timedelta(seconds=3 + args.commits / args.per_second + 2)
        streamed: set[datetime] = set()

        def stream(token: str) -> None:
            streamed.update(commit_timestamps(query(database, start, end, token)))

        readers = [threading.Thread(target=stream, args=(token,)) for token in tokens]
        for reader in readers:
            reader.start()
        time.sleep(2)  # the queries are live (past their first, historical chop) before the first commit
        committed = []
        for i in range(args.commits):
            with database.batch() as batch:
                batch.insert("Probe", ["Id"], [[i]])
            committed.append(batch.committed)
            time.sleep(1 / args.per_second)
            if (i + 1) % 250 == 0:
                log.info("%d commits", i + 1)
        log.info("waiting for the streaming queries to reach %s", end.isoformat())
        for reader in readers:
            reader.join()
        settled = {ts for token in tokens for ts in commit_timestamps(query(database, start, end, token))}
        report(args.chop_ms, committed, streamed, settled)
    finally:
        emulator.stop()


def report(chop_ms: int, committed: list[datetime], streamed: set[datetime], settled: set[datetime]) -> None:
    lost = sorted(set(committed) - streamed)
    period_us = chop_ms * 1000 + 1
    offsets = {int((ts - lost[0]) / timedelta(microseconds=1)) % period_us for ts in lost}
    print(f"chop {chop_ms} ms, {len(committed)} commits")
    print(f"  streaming query (end ahead):  {len(lost)} missing, expected about {len(committed) / period_us:.1f}")
    if lost:
        grid = "all on one grid" if offsets == {0} else f"NOT on one grid (offsets {sorted(offsets)[:5]})"
        print(f"    period {period_us} µs: {grid}; first {lost[0].isoformat()}")
    print(f"  past window (end behind now): {len(set(committed) - settled)} missing")


if __name__ == "__main__":
    main()
