"""Applying change records to Delta mirrors vs a plain Delta append of the same rows, same run.

Synthesizes landing files shaped like the reader's (one row per mod): --keys account inserts, then
updates of random accounts, in transactions of --mods-per-txn mods, --mods in all (>= 200k). Then:
  (baseline) read_landed(spark, landing).write.format("delta").mode("append")  — the rows as-is
  (ingest)   Changelog.ingest: MERGE on change identity (exactly-once)
  (apply)    Lake.apply_cut: completeness check, per-key fold in commit order, MERGE into the mirror,
             manifest append
Prints seconds (median of --repeat fresh runs) and ratios against the baseline.

    .venv/bin/python bench/lake_apply.py [--mods 200000 --keys 50000 --repeat 2]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.lake.changelog import read_landed
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore

T0 = datetime(2026, 11, 22, tzinfo=timezone.utc)
COLUMNS = (
    ColumnType("AccountId", {"code": "STRING"}, True, 1),
    ColumnType("Balance", {"code": "INT64"}, False, 2),
    ColumnType("Note", {"code": "STRING"}, False, 3),
)


def synthesize(
    root: Path | str, mods: int, keys: int, per_txn: int, files: int, after: datetime = T0, opens: bool = True
) -> tuple[list[str], datetime]:
    """Landing files under ``root`` with ``mods`` mods committed after ``after``: inserts of the
    ``keys`` accounts first (when ``opens``), then updates of random ones."""
    rng = random.Random(7)
    store = LandingStore(str(root))
    records, ts = [], after
    for start in range(0, mods, per_txn):
        ts += timedelta(milliseconds=1)
        inserting = opens and start < keys
        batch_mods = tuple(
            Mod({"AccountId": f"acct-{(start + i) if inserting else rng.randrange(keys):07d}"}, {"Balance": str(rng.randrange(10**6)), **({"Note": "opened"} if inserting else {})}, {})
            for i in range(min(per_txn, mods - start))
        )
        records.append(
            DataChangeRecord(
                "bench", ts, "00000000", f"txn-{start}", True, "Accounts", COLUMNS, batch_mods,
                ModType.INSERT if inserting else ModType.UPDATE, ValueCaptureType.OLD_AND_NEW_VALUES, 1, 1, "", False,
            )
        )
    chunk = -(-len(records) // files)
    for i in range(0, len(records), chunk):
        part = tuple(records[i : i + chunk])
        store.write("Bench", f"p{i}", PartitionBatch("bench", part[0].commit_timestamp, part[-1].commit_timestamp, part, (), part[-1].commit_timestamp, False))
    return store.files("Bench"), ts


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mods", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--mods-per-txn", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    spark = delta_spark_session("lake_apply_bench", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="lake_bench_"))
    try:
        files, last = synthesize(work / "landing", args.mods, args.keys, args.mods_per_txn, files=10)
        results: dict[str, list[float]] = {"baseline": [], "ingest": [], "apply": []}
        for run in range(args.repeat):
            lake = Lake(spark, str(work / f"lake{run}"))
            results["baseline"].append(timed(lambda: read_landed(spark, files).write.format("delta").mode("append").save(str(work / f"append{run}"))))
            results["ingest"].append(timed(lambda: lake.changelog.ingest(files)))
            results["apply"].append(timed(lambda: lake.apply_cut(last)))
            rows = lake.mirrors_at_cut()["Accounts"].count()
            assert rows == args.keys, f"mirror has {rows} rows, expected {args.keys}"
        median = {k: statistics.median(v) for k, v in results.items()}
        print(f"\n{args.mods:,} mods, {args.keys:,} keys, {len(files)} landing files, median of {args.repeat}")
        for name, seconds in median.items():
            print(f"  {name:<9} {seconds:7.2f} s  {args.mods / seconds:10,.0f} mods/s")
        print(f"  apply / baseline            = {median['apply'] / median['baseline']:.2f}")
        print(f"  (ingest + apply) / baseline = {(median['ingest'] + median['apply']) / median['baseline']:.2f}")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
