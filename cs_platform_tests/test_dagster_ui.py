"""`dagster dev -w workspace.yaml` on the emulator, checked in headless Chromium.

The real daemon evaluates the real sensors and launches real run processes (Dagster's default run
launcher and queued run coordinator, with the tag concurrency limits of ``cs_platform.dev.embedded``):
the partition sensor's reader runs, and the lake sensor's lake runs, with nobody clicking. The lake
must advance on its own: one long-lived lake run applies cut after cut (each a consistent bank; the
production stack's test watches it longer), and its run page shows each cut, as a reader run's page
shows each landing. The webserver must show the assets, sensors, dynamic partitions, run history,
the mirrors' freshness policy and the checks' descriptions, with no dialog over them. A screenshot
of the asset page (and the DOM the assertions read) is left in the test's temp directory (never in git).
"""

import os
import shutil
import threading
import time
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from cs_platform.changestream.metadata import utc_now
from cs_platform.defs.lake_assets import CHECKS
from cs_platform.dev.dagster_dev import start_dagster_dev
from cs_platform.dev.deadline import run_within, wait_until
from cs_platform.dev.embedded import embedded_bank
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import stop_process_group
from cs_platform.dev.serve import DEV_SETTINGS
from cs_platform.dev.workload import INITIAL_BALANCE, BankWorkload
from cs_platform.lake.engines import CutTables, read_arrow
from cs_platform.lake.published import lake_location, published_cuts

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("Chromium is needed for the UI check: install it with 'apt-get install chromium' (.ci/run does)")
    return found


def render(url: str, profile: Path, screenshot: Path | None = None) -> str:
    args = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--window-size=1400,1000"]
    began = time.monotonic()
    if screenshot:
        run_within([*args, f"--screenshot={screenshot}", url], 120)
    dom = run_within([*args, "--dump-dom", url], 120, text=True).stdout
    if screenshot:
        screenshot.with_suffix(".html").write_text(dom)  # what the assertions read, beside what a person sees
    print(f"rendered {url} in {time.monotonic() - began:.1f}s")
    return dom


def cuts_by_run(instance: DagsterInstance) -> Counter:
    """Applied cuts (materializations of mirrors) per lake run."""
    records = instance.fetch_materializations(AssetKey(["bank_stream", "mirrors"]), limit=1000).records
    return Counter(r.run_id for r in records if r.asset_materialization.metadata["applied"].value)


def landings_by_run(instance: DagsterInstance) -> Counter:
    """Landed files (observations of landed_changes) per reader run."""
    records = instance.fetch_observations(AssetKey(["bank_stream", "landed_changes"]), limit=1000).records
    return Counter(r.run_id for r in records)


def busiest(counts: Counter, at_least: int) -> str | None:
    """The run with the most events, if it has at least ``at_least``."""
    found = counts.most_common(1)
    return found[0][0] if found and found[0][1] >= at_least else None


def serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.heavy
@pytest.mark.xdist_group("processes")
def test_dagster_dev_advances_the_lake_on_its_own_and_shows_it(tmp_path, spark_connect_remote):
    # What `make dev` runs: its own emulator (partitions churn every 20 s), the bank, its dagster.yaml,
    # and a Spark Connect server for the lake runs (the session's, as make dev starts one).
    with embedded_bank(tmp_path, partition_alive_seconds=20) as bank:
        start = utc_now()
        os.environ.update(
            CS_PLATFORM_SPARK_REMOTE=spark_connect_remote, CS_PLATFORM_START_TIMESTAMP=start.isoformat(), **DEV_SETTINGS,
            # The hourly maintenance pass waits for, and holds up, lake runs: schedule it half an hour
            # away, so it never falls inside the cuts this test counts (test_maintenance covers it).
            CS_PLATFORM_LAKE_MAINTENANCE_CRON=f"{(start.minute + 30) % 60} * * * *",
        )
        # It writes until the runs have shown what the pages must (``stop``), however long a loaded
        # machine takes to get there: a fixed window ended the writes before a reader run had
        # landed twice at load 14 on 2 cores (the three cuts alone took 3 minutes).
        workload, stop = BankWorkload(bank.bank), threading.Event()
        writer = threading.Thread(target=workload.run_until, args=(start + timedelta(hours=1), 10), kwargs={"stop": stop}, daemon=True)
        writer.start()
        try:
            check_dagster_dev(tmp_path, stop)
        finally:  # before the emulator stops, or the writer fails on a closed port
            stop.set()
            writer.join()


def check_dagster_dev(tmp_path, stop_writing: threading.Event):

    port = free_loopback_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "dagster_dev.log", "wb")
    dev = start_dagster_dev(port, log)
    started = time.monotonic()
    try:
        wait_until(lambda: serving(f"{base}/server_info"), 180, "dagster dev webserver")
        print(f"webserver up {time.monotonic() - started:.0f} s after dagster dev started")
        with DagsterInstance.get() as instance:
            succeeded = RunsFilter(job_name="bank_stream_read_partition", statuses=[DagsterRunStatus.SUCCESS])
            wait_until(lambda: instance.get_runs_count(succeeded) >= 3, 240, "three sensor-launched runs")
            print(f"three reader runs done {time.monotonic() - started:.0f} s after dagster dev started")
            keys = instance.get_dynamic_partitions("bank_stream_partitions")
            # The lake advances by itself: one long-lived lake run of the lake sensor applies cut after cut.
            wait_until(lambda: busiest(cuts_by_run(instance), 3), 240, "a lake run of the lake sensor applying three cuts")
            lake_run = busiest(cuts_by_run(instance), 3)
            print(f"3 cuts applied by lake run {lake_run} {time.monotonic() - started:.0f} s after dagster dev started")
            wait_until(lambda: busiest(landings_by_run(instance), 2), 120, "a reader run landing twice")
            reader_run = busiest(landings_by_run(instance), 2)
            lake_runs = instance.get_run_records(RunsFilter(job_name="bank_stream_lake"))
            durations = sorted(r.end_time - r.start_time for r in lake_runs if r.end_time and r.start_time)
            print(f"lake runs: {len(lake_runs)}, run seconds {[round(d) for d in durations]}")
            assert all(r.dagster_run.tags.get("dagster/sensor_name") == "bank_stream_lake_sensor" for r in lake_runs)
        # What the pages must show has happened. The stream goes idle: the runs that go on while
        # Chromium renders read heartbeats and, once the last writes are cut, cut nothing new: no scan.
        stop_writing.set()
        assert "initial" in keys and len(keys) >= 3
        # Each cut published by then is a consistent bank, read as an analyst reads it (deltalake,
        # every mirror at the cut's version; the bank oracle compares cuts with the source elsewhere).
        location = lake_location(os.path.join(os.environ["CS_PLATFORM_LAKE_ROOT"], "BankStream"))
        cuts = published_cuts(location)
        assert len(cuts) >= 2
        for cut in cuts:  # the first is the snapshot at the stream's start, before any account
            balances = read_arrow(CutTables.of(location, cut))["Accounts"].column("Balance").to_pylist()
            assert sum(balances) == INITIAL_BALANCE * len(balances), f"cut {cut.cut} is not a consistent bank"
        assert balances, "the last cut has no accounts"

        profile = tmp_path / "chromium"
        asset_page = render(f"{base}/assets/bank_stream/landed_changes", profile, tmp_path / "asset.png")
        assert "landed_changes" in asset_page and "bank_stream" in asset_page
        partitions_page = render(f"{base}/assets/bank_stream/landed_changes?view=partitions", profile)
        assert "initial" in partitions_page and keys[1] in partitions_page
        automation_page = render(f"{base}/automation", profile)
        assert "bank_stream_partition_sensor" in automation_page
        runs_page = render(f"{base}/runs", profile)
        assert "bank_stream_read_partition" in runs_page and "Success" in runs_page
        # One lake run, several published cuts; one reader run, several landings: each on its run's page.
        # (The long-lived lake run started before most reader runs: the runs list may page it away.)
        lake_run_page = render(f"{base}/runs/{lake_run}", profile)
        assert "bank_stream_lake" in lake_run_page
        assert lake_run_page.count("Materialized value") >= 2 * 3, "the lake run's page shows three cuts of changelog and mirrors"
        reader_run_page = render(f"{base}/runs/{reader_run}", profile)
        assert reader_run_page.count('data-tooltip="ASSET_OBSERVATION"') >= 2, "the reader run's page shows two landings"
        assert "Join the Dagster community" not in asset_page + lake_run_page, "a dialog covers the page"
        mirrors_page = render(f"{base}/assets/bank_stream/mirrors", profile)
        assert "Freshness" in mirrors_page
        checks_page = render(f"{base}/assets/bank_stream/mirrors?view=checks", profile)
        assert f"Checks ({len(CHECKS)})" in checks_page
        # The list middle-truncates long names on screen; each row's title holds the whole name.
        missing = [name for name in CHECKS if f'title="{name}"' not in checks_page]
        assert not missing, f"the checks page lists no row for {missing}"
        first = sorted(CHECKS)[0]  # the page opens on the first check, with its description
        assert first in checks_page and CHECKS[first][:60] in checks_page
        print(f"UI checked; screenshot at {tmp_path / 'asset.png'}")
    finally:
        # `dagster dev` outlives SIGTERM (or SIGINT) by more than 30 s, its webserver and daemon
        # waiting on their code servers; this instance is thrown away: SIGKILL after a short grace.
        stop_process_group(dev, grace_s=5)
        log.close()
