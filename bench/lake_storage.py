"""The same lake work on a local directory (baseline) and on gs:// through a GCS emulator, same run.

Synthesizes landing files shaped like the reader's (bench/lake_apply.py's generator) under each
root: --mods mods over --keys keys, then --small-mods more in a later range. Per root it times the
first cut (ingest + apply of everything) and a small cut after it (what a running stream does every
interval, where Delta's log reads and writes, not the data, set the cost). Local Spark (local[2])
with Google's GCS connector; the emulator is fake-gcs-server on loopback, so the figures show the
object-store protocol's overhead, not the network's.

    .venv/bin/python bench/lake_storage.py [--mods 20000 --keys 5000 --small-mods 1000 --repeat 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from cs_platform.dev.gcs_emulator import create_bucket, gcs_emulator
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.storage.gcs import EMULATOR_SETTING, GcsAccess
from lake_apply import synthesize, timed


def cut_times(spark, root: str, mods: int, keys: int, small_mods: int) -> tuple[float, float]:
    """Seconds of the first cut and of a small cut after it, with landing and lake under ``root``."""
    files, last = synthesize(f"{root}/landing", mods, keys, per_txn=100, files=10)
    later, end = synthesize(f"{root}/landing-later", small_mods, keys, per_txn=100, files=1, after=last, opens=False)
    lake = Lake(spark, f"{root}/lake")
    first = timed(lambda: (lake.changelog.ingest(files), lake.apply_cut(last)))
    small = timed(lambda: (lake.changelog.ingest(later), lake.apply_cut(end)))
    rows = lake.mirrors_at_cut()["Accounts"].count()
    assert rows == keys, f"mirror has {rows} rows, expected {keys}"
    return first, small


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mods", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--small-mods", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lake_storage_bench_"))
    try:
        with gcs_emulator(work / "gcs") as endpoint:
            os.environ[EMULATOR_SETTING] = endpoint
            spark = delta_spark_session("lake_storage_bench", "local[2]", jvm_log=work / "spark.log", storage=GcsAccess(endpoint))
            cut_times(spark, str(work / "warm-up"), args.small_mods, args.small_mods // 2, args.small_mods)  # a warm JVM for both
            results: dict[str, list[float]] = {"first_local": [], "small_local": [], "first_gcs": [], "small_gcs": []}
            for run in range(args.repeat):
                create_bucket(endpoint, f"bench-{run}")
                for where, root in (("local", str(work / f"local{run}")), ("gcs", f"gs://bench-{run}")):
                    first, small = cut_times(spark, root, args.mods, args.keys, args.small_mods)
                    results[f"first_{where}"].append(first)
                    results[f"small_{where}"].append(small)
            spark.stop()
        median = {k: statistics.median(v) for k, v in results.items()}
        print(f"# {args.mods:,} mods over {args.keys:,} keys, then {args.small_mods:,}; median of {args.repeat}")
        for name, seconds in median.items():
            print(f"cut_s_{name}: {seconds:.2f}")
        print(f"first_gcs_over_local: {median['first_gcs'] / median['first_local']:.2f}")
        print(f"small_gcs_over_local: {median['small_gcs'] / median['small_local']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
