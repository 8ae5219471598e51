"""What an ``ADD COLUMN`` with no ``DEFAULT`` costs the lake on a large table, both ways, in one run.

On a private emulator, loads ``--rows`` rows into one table watched by a change stream and takes
the snapshot at the stream's start (the lake's first cut, P). Then ``ALTER TABLE … ADD COLUMN`` with
no default, and, at a timestamp C after it, what the cut after the DDL does for that table:

- **read whole**, as every reshape did before and one whose rows Spanner filled (a ``DEFAULT``)
  still does: the table read at C into a mirror (``lake_steps.take_snapshot``; a lake of its own,
  so the mirror is created where a reshape overwrites one: the same read and typed write);
- **widened**: the catalog read at C and at P (``stream_membership`` with the previous cut), the rows
  with a value in the added column counted in Spanner at C and the keys the lake's changes give one
  (``widened_tables``), then the column added to the mirror (``mirrors.ensure_columns``).

Prints ``name: value`` lines: ``add_column_read_whole_s``, ``add_column_widened_s``, the Spanner
count's own seconds, ``read_whole_over_widened`` and the load average beside them.

    .venv/bin/python bench/add_column.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import utc_now
from cs_platform.changestream.source_reads import SourceSnapshot
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance
from cs_platform.lake.mirrors import ensure_columns
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.stream.lake_steps import stream_membership, take_snapshot, widened_tables

PROJECT, INSTANCE, DATABASE, STREAM, TABLE = "bench-project", "bench-instance", "add-column-bench", "Everything", "Customers"
DDL = [
    f"CREATE TABLE {TABLE} (Id INT64 NOT NULL, Name STRING(MAX), Balance FLOAT64, Since TIMESTAMP) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL",
]
PER_COMMIT = 1000  # rows per write (4,000 mutations; the emulator's limit is 80,000)


def load(database, rows: int) -> None:
    began, since = time.monotonic(), utc_now()
    for first in range(0, rows, PER_COMMIT):
        with database.batch() as batch:
            batch.insert(TABLE, ["Id", "Name", "Balance", "Since"], [[i, f"customer {i}", i / 100, since] for i in range(first, min(first + PER_COMMIT, rows))])
        if (first // PER_COMMIT + 1) % 100 == 0:
            print(f"  loaded {first + PER_COMMIT:,} rows ({time.monotonic() - began:.0f} s)", flush=True)


def committed_now(database):
    """A commit's timestamp: the schema read at it has every DDL that completed before."""
    with database.batch() as batch:
        batch.insert_or_update(TABLE, ["Id"], [[-1]])
    return batch.committed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="add_column_bench_"))
    with SpannerEmulator(churn=False, log_path=work / "emulator.log") as emulator:
        target = SpannerTarget(PROJECT, INSTANCE, DATABASE, emulator.host)
        database = create_database(create_instance(target.client(), INSTANCE), DATABASE, DDL)
        print(f"loading {args.rows:,} rows on {emulator.host}", flush=True)
        load(database, args.rows)
        spark = delta_spark_session("add_column_bench", "local[2]", jvm_log=work / "spark.log")
        try:
            lake = Lake(spark, str(work / "lake"))
            before = committed_now(database)
            start = take_snapshot(lake, target, STREAM, before)
            print(f"snapshot at P: {sum(start.rows.values()):,} rows", flush=True)
            live = dict(lake.last_published().shapes)
            database.update_ddl([f"ALTER TABLE {TABLE} ADD COLUMN Note STRING(MAX)"]).result(600)
            cut = committed_now(database)

            load_before = os.getloadavg()[0]
            began = time.monotonic()
            membership = stream_membership(database, STREAM, cut, live, previous=before)
            counted = time.monotonic()
            rows_with_values = SourceSnapshot(database, cut).rows_with_values(TABLE, ["Note"])
            count_s = time.monotonic() - counted
            widened = widened_tables(lake, database, membership, before, cut)
            ensure_columns(spark, lake.mirror(TABLE), widened[TABLE])
            widened_s = time.monotonic() - began

            # The same read and write into a lake of its own: a snapshot of a lake with cuts is
            # read at its latest cut, which here only a cut with changes could publish.
            began = time.monotonic()
            whole = take_snapshot(Lake(spark, str(work / "read_whole")), target, STREAM, cut, "the read whole", [TABLE])
            read_whole_s = time.monotonic() - began
            load_after = os.getloadavg()[0]
        finally:
            spark.stop()
    assert membership.added == {TABLE: {"Note": "STRING"}} and TABLE in widened and rows_with_values == 0, (membership, widened)
    print(f"rows: {whole.rows[TABLE]}")
    print(f"add_column_read_whole_s: {read_whole_s:.2f}")
    print(f"add_column_widened_s: {widened_s:.2f}")
    print(f"add_column_spanner_count_s: {count_s:.2f} (one of the two counts widened_tables makes)")
    print(f"read_whole_over_widened: {read_whole_s / widened_s:.1f}")
    print(f"load_average: {load_before:.1f} before, {load_after:.1f} after")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
