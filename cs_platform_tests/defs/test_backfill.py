"""Backfills and bad settings: re-materializing a FINISHED partition replays its range into the
same landing path, leaves its metadata alone and adds no new changes; a second reader of a live
partition is refused; settings errors name the setting."""

import pytest
from dagster import DagsterRun, DagsterRunStatus

from cs_platform.changestream.errors import InvalidIdentifierError
from cs_platform.changestream.metadata import PartitionState
from cs_platform.definitions import build_definitions
from cs_platform.defs.resources import ChangeStreamResource, SpannerResource
from cs_platform.dev.oracle import landed
from cs_platform.errors import InvalidArgumentError
from cs_platform.landing.store import LandingStore
from cs_platform_tests.defs.landing_oracle import reads
from cs_platform_tests.defs.processes import JOB


def test_replaying_a_finished_partition_is_idempotent_and_refused_while_another_run_reads(bank_stream, dagster_instance):
    bank_stream.read_short_window(dagster_instance)

    before = landed(LandingStore(str(bank_stream.landing_root)), "BankStream")
    files_before = set(LandingStore(str(bank_stream.landing_root)).files("BankStream"))
    history = reads(dagster_instance)
    key = max({r.partition_key for r in history}, key=lambda k: sum(r.records for r in history if r.partition_key == k))
    original_records = sum(r.records for r in history if r.partition_key == key)
    partition = bank_stream.store.get_by_key(key)
    assert partition.state is PartitionState.FINISHED and original_records > 0

    job = build_definitions().resolve_job_def(JOB)
    paths = []
    for _ in range(2):
        result = job.execute_in_process(instance=dagster_instance, partition_key=key)
        (materialization,) = result.asset_materializations_for_node("bank_stream__landed_changes")
        assert materialization.metadata["replay"].value is True
        # A replayed partition is finished and lags nothing (it used to report the lag of its end).
        assert materialization.metadata["partition_finished"].value is True
        assert "watermark_lag_seconds" not in materialization.metadata
        assert materialization.metadata["records"].value == original_records  # the whole range again
        paths.append(materialization.metadata["landing_path"].value)
        replayed_mods = materialization.metadata["mods"].value
    assert paths[0] == paths[1]  # the second replay rewrote the first one's file
    assert bank_stream.store.get_by_key(key) == partition  # watermark, state, timestamps untouched
    after = landed(LandingStore(str(bank_stream.landing_root)), "BankStream")
    assert after.mods == before.mods  # no change appears twice after de-duplication by identity
    # One read covering the whole range lands at the original file's path (rewritten in place);
    # otherwise the replay adds one file whose rows are all duplicates by identity.
    new_file = paths[0] not in files_before
    assert after.duplicates - before.duplicates == (replayed_mods if new_file else 0)

    # A second reader of a partition that a live run is reading is refused, naming that run.
    live = DagsterRun(job_name=JOB, run_id="0" * 32, status=DagsterRunStatus.STARTED, tags={"dagster/partition": key})
    dagster_instance.add_run(live)
    refused = job.execute_in_process(instance=dagster_instance, partition_key=key, raise_on_error=False)
    assert not refused.success
    assert "already being read by run(s) " + live.run_id in str(refused.get_step_failure_events()[0].step_failure_data.error.message)


def spanner() -> SpannerResource:
    return SpannerResource(project_id="p", instance_id="i", database_id="d")


@pytest.mark.parametrize(
    "settings, error, words",
    [
        ({"stream_name": "Bank; DROP TABLE x"}, InvalidIdentifierError, "change stream name"),
        ({"metadata_table": "1bad"}, InvalidIdentifierError, "metadata table name"),
        ({"heartbeat_millis": 50}, InvalidArgumentError, "CS_PLATFORM_HEARTBEAT_MILLIS=50 is not valid: it takes a whole number of milliseconds from 100"),
        ({"soft_timeout_seconds": 0}, InvalidArgumentError, "CS_PLATFORM_SOFT_TIMEOUT_SECONDS=0 is not valid: it takes a number of seconds above 0"),
        ({"stale_run_seconds": 10, "landing_interval_seconds": 5}, InvalidArgumentError, r"CS_PLATFORM_STALE_RUN_SECONDS \(10\) must exceed twice CS_PLATFORM_LANDING_INTERVAL_SECONDS"),
        ({"start_timestamp": "yesterday"}, InvalidArgumentError, "CS_PLATFORM_START_TIMESTAMP='yesterday' is not an RFC 3339"),
    ],
)
def test_bad_settings_fail_before_touching_spanner_and_name_the_variable(settings, error, words):
    resource = ChangeStreamResource(spanner=spanner(), **{"stream_name": "BankStream", **settings})
    with pytest.raises(error, match=words):
        resource.validated()
