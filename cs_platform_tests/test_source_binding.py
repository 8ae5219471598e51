"""One source per lake (DESIGN invariant 7). A second emulator process with the same project,
instance, database and stream names (what `make dev` after `make demo` was) writes into the same
landing root and lake: its runs are refused with both sources named, its watermark does not move,
and nothing of the first source is deduplicated away or changed. Before the fix, the emulator's
restarted transaction ids made the second source's changes look like duplicates of the first's."""

import threading
from datetime import timedelta

import pytest
from dagster import instance_for_test

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore, utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.oracle import committed, landed
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, create_database, create_instance
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.source import SourceMismatchError
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import advance_lake
from cs_platform.stream.state import source_identity
from cs_platform_tests.conftest import TEST_INSTANCE_OVERRIDES


def test_a_second_source_is_refused_by_landing_and_lake_and_nothing_is_dropped(bank_stream, dagster_instance, spark, tmp_path, monkeypatch):
    workload, end = bank_stream.read_short_window(dagster_instance, seconds=8)
    landing = LandingStore(str(bank_stream.landing_root))
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"))
    first = advance_lake(lake, landing, bank_stream.store, bank_stream.target, "BankStream")
    assert first.result.applied and first.result.transactions == sum(1 for t in workload.committed if t.commit_timestamp <= end)
    files, rows = landing.files("BankStream"), lake.changelog.table().count()
    source_a = source_identity(bank_stream.target, "BankStream", bank_stream.store)

    with SpannerEmulator(log_path=tmp_path / "second_emulator.log") as second:  # no churn: B never reads
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", second.host)  # the client prefers it to its own options
        target_b = SpannerTarget(source_a.project, source_a.instance, source_a.database, second.host)
        instance_b = create_instance(target_b.client(), source_a.instance)
        bank_b = create_database(instance_b, source_a.database, BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
        metadata_b = create_database(instance_b, bank_stream.metadata.database_id, [])
        store_b = PartitionMetadataStore(metadata_b, "BankStreamMetadata")
        start = utc_now()
        bank_stream.configure(start, start + timedelta(minutes=5))
        writer = BankWorkload(bank_b)
        writing = threading.Thread(target=writer.run_until, args=(start + timedelta(seconds=6), 20), daemon=True)
        writing.start()
        with instance_for_test(overrides=TEST_INSTANCE_OVERRIDES) as instance_b, SensorLoop(build_definitions, instance_b, bank_stream.sensor) as loop:
            # The first tick initializes B's metadata table, then finds the landing root is A's.
            with pytest.raises(Exception, match="belongs to") as refused:
                loop.tick()
            assert loop.stats.launched == 0
            # A run started by hand (a backfill) is refused the same way before it reads anything.
            job = loop.definitions.resolve_job_def("bank_stream_read_partition")
            instance_b.add_dynamic_partitions("bank_stream_partitions", ["initial"])
            run = job.execute_in_process(instance=instance_b, partition_key="initial", raise_on_error=False)
            assert not run.success
            assert "belongs to" in run.get_step_failure_events()[0].step_failure_data.error.to_string()
        writing.join()
        source_b = source_identity(target_b, "BankStream", store_b)
        assert source_b.epoch != source_a.epoch and source_b.database == source_a.database
        assert source_a.describe() in str(refused.value) and source_b.describe() in str(refused.value)
        # Nothing landed for B and its watermark did not move: B loses nothing either.
        initial_b = store_b.get(INITIAL_PARTITION_TOKEN)
        assert initial_b.watermark < initial_b.start_timestamp
        assert landing.files("BankStream") == files

        # The lake refuses B's cut whether it comes through A's landing root or a fresh one.
        with pytest.raises(SourceMismatchError, match="landing directory .* belongs to .*not to"):
            advance_lake(lake, landing, store_b, target_b, "BankStream")
        with pytest.raises(SourceMismatchError, match=r"lake .* belongs to .*" + source_a.epoch.replace("+", r"\+")):
            advance_lake(lake, LandingStore(str(tmp_path / "landing_b")), store_b, target_b, "BankStream")

    # Source A is as it was: every committed mod still there, none dropped as a "duplicate".
    assert lake.changelog.table().count() == rows
    assert landed(landing, "BankStream").mods == committed(workload, end)
