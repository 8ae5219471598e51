"""Exactly-once under replays: ingesting the same landing files twice, and a Spark apply killed
(SIGKILL) after a mirror committed (rows appended to a mirror that only takes inserts) and before
the manifest, then re-run, leave Delta tables identical to a clean run."""

import os
import signal
import subprocess
import sys
import time

from cs_platform.dev.deadline import Deadline
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.bank_landing import land_bank


def snapshot(lake: Lake) -> dict:
    mirrors = lake.mirrors_at_cut()
    tables = {name: sorted(tuple(r) for r in df.collect()) for name, df in mirrors.items()}
    changelog = sorted(tuple(r[c] for c in ("server_transaction_id", "record_sequence", "mod_index", "new_values")) for r in lake.changelog.table().collect())
    return {"cut": lake.last_cut(), "mirrors": tables, "changelog": changelog}


def test_replayed_ingest_and_killed_apply_end_identical_to_a_clean_run(spark, tmp_path):
    landing = LandingStore(str(tmp_path / "landing"))
    cuts = land_bank(landing)
    files = landing.files("Bank")
    middle, last = cuts[len(cuts) // 2], cuts[-1]

    clean = Lake(spark, str(tmp_path / "clean"))
    clean.changelog.ingest(files)
    clean.apply_cut(middle)
    clean.apply_cut(last)

    replayed = Lake(spark, str(tmp_path / "replayed"))
    replayed.changelog.ingest(files[:3])
    replayed.changelog.ingest(files)  # the first three again, and the rest
    assert replayed.changelog.ingest(files).files == 0
    replayed.apply_cut(middle)
    # Kill an apply of the last cut once its Transfers rows are appended.
    marker = tmp_path / "marker"
    process = subprocess.Popen(
        [sys.executable, "-m", "cs_platform_tests.lake.killed_apply", str(tmp_path / "landing"), replayed.root, last.isoformat(), str(marker)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = Deadline(180)
    while not marker.exists():
        assert process.poll() is None, "killed_apply ended before its append"
        assert not deadline.expired(), f"killed_apply stalled before its append ({deadline.describe()})"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the Python driver and its Spark JVM
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert replayed.last_cut() == middle  # the manifest never saw the killed cut
    rerun = Lake(spark, replayed.root)  # the next lake run: a writer newer than the killed one (``lake.fence``)
    rerun.changelog.ingest(files)
    result = rerun.apply_cut(last)

    assert snapshot(replayed) == snapshot(clean)
    assert "Transfers" not in result.appended  # it has a version the manifest has not published: merged
    balances = snapshot(clean)["mirrors"]["Accounts"]
    assert sum(b for _, b in balances) == 1000 * len(balances)
