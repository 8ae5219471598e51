"""`dagster dev -w workspace.yaml` on the emulator, checked in headless Chromium.

The real daemon evaluates the real sensor and launches real run processes (Dagster's default run
launcher and queued run coordinator, with the tag concurrency limits of ``cs_platform.dev.embedded``);
the webserver must then show the asset, the sensor, the dynamic partitions and the run history.
A screenshot of the asset page is left in the test's temp directory (never in git).
"""

import shutil
import subprocess
import threading
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.dagster_dev import start_dagster_dev, stop_dagster_dev
from cs_platform.dev.embedded import DAGSTER_YAML
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.workload import BankWorkload

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
    if screenshot:
        subprocess.run([*args, f"--screenshot={screenshot}", url], check=True, capture_output=True, timeout=120)
    return subprocess.run([*args, "--dump-dom", url], check=True, capture_output=True, text=True, timeout=120).stdout


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s:.0f}s")
        time.sleep(1)


def serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def test_dagster_dev_shows_asset_sensor_partitions_and_runs(bank_stream, tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("CS_PLATFORM_SENSOR_INTERVAL_SECONDS", "5")
    start = utc_now()
    bank_stream.configure(start, start + timedelta(minutes=10), soft_timeout_s=5, stale_run_s=120)
    workload = BankWorkload(bank_stream.bank)
    threading.Thread(target=workload.run_until, args=(start + timedelta(seconds=40), 10), daemon=True).start()

    port = free_loopback_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "dagster_dev.log", "wb")
    dev = start_dagster_dev(port, log)
    try:
        wait_until(lambda: serving(f"{base}/server_info"), 180, "dagster dev webserver")
        with DagsterInstance.get() as instance:
            succeeded = RunsFilter(job_name="bank_stream_read_partition", statuses=[DagsterRunStatus.SUCCESS])
            wait_until(lambda: instance.get_runs_count(succeeded) >= 3, 240, "three sensor-launched runs")
            keys = instance.get_dynamic_partitions("bank_stream_partitions")
        assert "initial" in keys and len(keys) >= 3

        profile = tmp_path / "chromium"
        asset_page = render(f"{base}/assets/bank_stream/landed_changes", profile, tmp_path / "asset.png")
        assert "landed_changes" in asset_page and "bank_stream" in asset_page
        partitions_page = render(f"{base}/assets/bank_stream/landed_changes?view=partitions", profile)
        assert "initial" in partitions_page and keys[1] in partitions_page
        automation_page = render(f"{base}/automation", profile)
        assert "bank_stream_partition_sensor" in automation_page
        runs_page = render(f"{base}/runs", profile)
        assert "bank_stream_read_partition" in runs_page and "Success" in runs_page
        print(f"UI checked; screenshot at {tmp_path / 'asset.png'}")
    finally:
        stop_dagster_dev(dev)
        log.close()
