"""The lake on a Spark Connect server (what `make dev` and lake runs under `dagster dev` use): the
cut tests run again as a client of a real server started from the installed pyspark, east of UTC,
and the server logs no more than its warnings and errors; a server that is not there is reported
within seconds, naming the setting."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cs_platform.dev.emulator import free_loopback_port
from cs_platform.lake.spark import MASTER_SETTING, REMOTE_SETTING, SparkUnreachableError, check_reachable

CUT_TESTS = Path(__file__).with_name("test_stream_lake.py")


@pytest.mark.heavy
@pytest.mark.xdist_group("processes")  # with test_dagster_ui: one server for both
def test_the_cut_tests_pass_on_a_spark_connect_server(spark_connect):
    env = {**os.environ, REMOTE_SETTING: spark_connect.remote}
    result = subprocess.run(
        # East of UTC only (with DST): a client that read naive datetimes as UTC fails there as
        # it would west of it, and the in-process runs of these tests cover both. The two whose
        # client-side work differs from a plain cut (every kind of mirror change and new columns,
        # the quarantine's own writes); dagster dev's lake runs (test_dagster_ui) take the
        # snapshot and cut on Spark Connect end to end, with cross-partition transactions.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "Berlin and (semantics or quarantine)", str(CUT_TESTS)],
        env=env, capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout and " failed" not in result.stdout
    # The server logs warnings and errors, not each request, job and task it ran for these cuts.
    logged = spark_connect.log.read_text(errors="replace")
    assert "Setting Spark log level to \"WARN\"" in logged, logged[-3000:]
    chatter = [line for line in logged.splitlines() if " INFO DAGScheduler" in line or " INFO SessionHolder" in line]
    assert not chatter, chatter[:5]


@pytest.mark.parametrize("key, setting, url", [("spark.remote", REMOTE_SETTING, "sc"), ("spark.master", MASTER_SETTING, "spark")])
def test_an_unreachable_server_or_master_fails_fast_naming_the_setting(key, setting, url):
    address = f"{url}://127.0.0.1:{free_loopback_port()}"  # nothing listens there
    began = time.monotonic()
    with pytest.raises(SparkUnreachableError, match=rf"nothing answers at {setting}={address}"):
        check_reachable({key: address})
    assert time.monotonic() - began < 30
    with pytest.raises(SparkUnreachableError, match=rf"{setting}='{url}://x' is not {url}://host:port"):
        check_reachable({key: f"{url}://x"})
