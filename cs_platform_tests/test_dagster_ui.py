"""`dagster dev -w workspace.yaml` on the emulator, checked in headless Chromium.

The real daemon evaluates the real sensors and launches real runs (the queued run coordinator, with
the tag concurrency limits of ``cs_platform.dev.embedded``, and make dev's launcher): the partition
sensor's reader runs on warm run workers, and the lake sensor's lake runs in processes of the code
server, with nobody clicking. The lake
must advance on its own: one long-lived lake run applies cut after cut (each a consistent bank; the
production stack's test watches it longer), and its run page shows each cut, as a reader run's page
shows each landing. The webserver must show the assets, sensors, dynamic partitions, run history,
the mirrors' freshness policy and the checks' descriptions, with no dialog over them. Each page is
awaited until it shows what the test checks (:mod:`cs_platform_tests.chromium`); its screenshot and
the DOM the assertions read are left in the test's temp directory (never in git).
"""

import os
import threading
import time
import urllib.request
from collections import Counter
from datetime import timedelta

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from cs_platform.changestream.metadata import utc_now
from cs_platform.defs.lake_assets import CHECKS
from cs_platform.dev.dagster_dev import start_dagster_dev
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.embedded import embedded_bank
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import stop_process_group
from cs_platform.dev.run_workers import run_workers
from cs_platform.dev.serve import DEV_SETTINGS
from cs_platform.dev.workload import INITIAL_BALANCE, BankWorkload
from cs_platform.lake.engines import CutTables, read_arrow
from cs_platform.lake.published import lake_location, published_cuts
from cs_platform_tests.chromium import HeadlessChromium


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
def test_dagster_dev_advances_the_lake_on_its_own_and_shows_it(tmp_path, spark_connect):
    # What `make dev` runs: its own emulator, the bank, its dagster.yaml, and a Spark Connect server
    # for the lake runs (the session's, as make dev starts one). Its partitions live 60 s, not make
    # dev's 20: a reader run must land twice for its page to show each landing, and at a load of 8 per
    # core the daemon's launches came 20 s late, so every run read a partition that had already ended,
    # landed once, and the test waited 20 minutes (a lake run cutting all along) for a run that never came.
    with embedded_bank(tmp_path, partition_alive_seconds=60) as bank:
        start = utc_now()
        os.environ.update(
            CS_PLATFORM_SPARK_REMOTE=spark_connect.remote, CS_PLATFORM_START_TIMESTAMP=start.isoformat(), **DEV_SETTINGS,
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
            # make dev's warm run workers: the reader runs execute there, shown as any run is.
            with run_workers(tmp_path, bank.dagster_home):
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
            # The lake advances by itself: one long-lived lake run of the lake sensor applies cut after cut.
            wait_until(lambda: busiest(cuts_by_run(instance), 3), 240, "a lake run of the lake sensor applying three cuts")
            lake_run = busiest(cuts_by_run(instance), 3)
            print(f"3 cuts applied by lake run {lake_run} {time.monotonic() - started:.0f} s after dagster dev started")
            wait_until(lambda: busiest(landings_by_run(instance), 2), 120, "a reader run landing twice")
            reader_run = busiest(landings_by_run(instance), 2)
            # The stream churned: the initial partition ended and its children were added.
            wait_until(lambda: len(instance.get_dynamic_partitions("bank_stream_partitions")) >= 3, 120, "the initial partition's children")
            keys = instance.get_dynamic_partitions("bank_stream_partitions")
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

        first = sorted(CHECKS)[0]  # the checks page opens on the first check, with its description
        with HeadlessChromium(tmp_path / "ui") as browser:
            asset_page = browser.show(f"{base}/assets/bank_stream/landed_changes", lambda dom: "landed_changes" in dom and "bank_stream" in dom,
                                      "the landed changes asset", "asset")
            browser.show(f"{base}/assets/bank_stream/landed_changes?view=partitions", lambda dom: "initial" in dom and keys[1] in dom,
                         "the initial partition and a child", "partitions")
            browser.show(f"{base}/automation", lambda dom: "bank_stream_partition_sensor" in dom, "the partition sensor", "automation")
            browser.show(f"{base}/runs", lambda dom: "bank_stream_read_partition" in dom and "Success" in dom, "a reader run that succeeded", "runs")
            # One lake run, several published cuts; one reader run, several landings: each on its run's page.
            # (The long-lived lake run started before most reader runs: the runs list may page it away.)
            lake_run_page = browser.show(f"{base}/runs/{lake_run}", lambda dom: "bank_stream_lake" in dom and dom.count("Materialized value") >= 2 * 3,
                                         "three cuts of changelog and mirrors", "lake_run")
            browser.show(f"{base}/runs/{reader_run}", lambda dom: dom.count('data-tooltip="ASSET_OBSERVATION"') >= 2, "two landings", "reader_run")
            assert "Join the Dagster community" not in asset_page + lake_run_page, "a dialog covers the page"
            browser.show(f"{base}/assets/bank_stream/mirrors", lambda dom: "Freshness" in dom, "the mirrors' freshness policy", "mirrors")
            # The list middle-truncates long names on screen; each row's title holds the whole name.
            browser.show(f"{base}/assets/bank_stream/mirrors?view=checks",
                         lambda dom: f"Checks ({len(CHECKS)})" in dom and all(f'title="{name}"' in dom for name in CHECKS) and CHECKS[first][:60] in dom,
                         f"a row for each of the {len(CHECKS)} checks and the first one's description", "checks")
        print(f"UI checked; each page's screenshot and DOM in {tmp_path / 'ui'}")
    finally:
        # `dagster dev` outlives SIGTERM (or SIGINT) by more than 30 s, its webserver and daemon
        # waiting on their code servers; this instance is thrown away: SIGKILL after a short grace.
        stop_process_group(dev, grace_s=5)
        log.close()
