"""``python -m cs_platform.reset``: a stream whose start must change is started over. Without
confirmation nothing is removed; with it, the metadata table, landing files and lake go, and the
stream then reads again from the new start as a new epoch, into a lake bound to it."""

import os
import subprocess
import sys

import pytest

from cs_platform.changestream.errors import SettingsDriftError
from cs_platform.changestream.metadata import utc_now
from cs_platform.defs.resources import configured_resources
from cs_platform.lake.stream_lake import Lake
from cs_platform.settings import naming_settings
from cs_platform.stream.lake_steps import advance_lake
from cs_platform.stream.state import source_identity


def reset(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "cs_platform.reset", "BankStream", *args]
    return subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=os.environ.copy())


@pytest.mark.heavy
def test_reset_starts_a_stream_over_after_confirmation(bank_stream, dagster_instance, spark):
    bank_stream.read_short_window(dagster_instance, seconds=6)
    resources = configured_resources(os.environ)
    landing, lake_root = resources["landing"].store(), resources["lake"].stream_root("BankStream")
    assert advance_lake(Lake(spark, lake_root), landing, bank_stream.store, bank_stream.target, "BankStream").result.applied
    old_epoch = source_identity(bank_stream.target, "BankStream", bank_stream.store).epoch

    # A new start on the existing table is refused, naming both starts and the reset.
    new_start = utc_now()
    with pytest.raises(SettingsDriftError, match="start .* but metadata table BankStreamMetadata has .*python -m cs_platform.reset BankStream"):
        with naming_settings("BankStream"):  # as the sensor's first tick calls it (test_first_tick)
            bank_stream.store.initialize(new_start, None, 500)

    refused = reset()
    assert refused.returncode == 2 and "refusing without confirmation" in refused.stderr
    assert bank_stream.store.table_exists() and landing.files("BankStream") and os.path.isdir(lake_root)

    done = reset("--yes")
    assert done.returncode == 0, done.stderr
    assert "lake removed, landing removed, metadata table dropped" in done.stdout
    assert not bank_stream.store.table_exists() and not landing.files("BankStream") and not os.path.exists(lake_root)

    workload, _ = bank_stream.read_short_window(dagster_instance, seconds=8)  # from a new start
    assert source_identity(bank_stream.target, "BankStream", bank_stream.store).epoch != old_epoch
    again = advance_lake(Lake(spark, lake_root), landing, bank_stream.store, bank_stream.target, "BankStream")
    assert again.result.applied, (again, landing.files("BankStream"), len(workload.committed))
    assert reset("--yes").stdout.count("removed") == 2  # and again: every step is repeatable
