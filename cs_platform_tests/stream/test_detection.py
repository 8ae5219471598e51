"""One tick of partition detection, on a real metadata table in the emulator: the sensor's
decisions without Dagster (the sensor's own tests run it on a real instance)."""

from datetime import timedelta

import pytest

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore, PartitionState, utc_now
from cs_platform.stream.detection import LiveRead, detect_partitions, presumed_dead
from cs_platform.stream.launches import LaunchPlanner

STALE = 60.0
PLANNER = LaunchPlanner(max_parallel=4, retry_backoff_s=5)
A_DAY = timedelta(days=1)


@pytest.fixture
def store(metadata_database) -> PartitionMetadataStore:
    return PartitionMetadataStore(metadata_database, "Detected")


def tick(store, live=(), launched=None, retention=A_DAY, now=1_000.0):
    return detect_partitions(
        store, live, launched or {}, PLANNER, stale_run_seconds=STALE, retention_period=lambda: retention, now=now
    )


def test_a_read_quiet_past_the_stale_limit_is_presumed_dead_and_a_queued_one_never():
    reads = [LiveRead("quiet", "a", STALE + 1), LiveRead("landing", "b", STALE - 1), LiveRead("queued", "c", None)]
    dead, alive = presumed_dead(reads, STALE)
    assert [r.run_id for r in dead] == ["quiet"]
    assert [r.run_id for r in alive] == ["landing", "queued"]


def test_a_new_partition_is_launched_once_and_marked_scheduled(store):
    store.initialize(utc_now() - timedelta(minutes=1), None, 1000)
    first = tick(store)
    [launch] = first.plan.launches
    assert (launch.partition.token, launch.reason) == (INITIAL_PARTITION_TOKEN, "new")
    assert store.get(INITIAL_PARTITION_TOKEN).state is PartitionState.SCHEDULED
    assert first.summary().startswith("1 launched, 0 running, 0 waiting; low watermark ")

    # Its run is live and landing: nothing to launch.
    running = tick(store, [LiveRead("run1", launch.partition.key, 5.0)], first.plan.launched, now=1_010.0)
    assert running.plan.launches == () and running.live_keys == {launch.partition.key} and running.presumed_dead == ()


def test_the_partition_of_a_read_presumed_dead_is_launched_again(store):
    store.initialize(utc_now() - timedelta(minutes=1), None, 1000)
    first = tick(store)
    key = first.plan.launches[0].partition.key
    # Far past the backoff: the read made no progress, so the relaunch is a retry from the same watermark.
    later = tick(store, [LiveRead("run1", key, STALE + 30)], first.plan.launched, now=1_000.0 + STALE + 30)
    assert [r.run_id for r in later.presumed_dead] == ["run1"] and later.live_keys == frozenset()
    [again] = later.plan.launches
    assert (again.partition.key, again.reason, again.attempt) == (key, "retry", 1)
    assert again.run_key != first.plan.launches[0].run_key


def test_a_partition_whose_records_expired_is_not_launched(store):
    store.initialize(utc_now() - 2 * A_DAY, None, 1000)
    detection = tick(store, retention=A_DAY)
    assert detection.expired == {INITIAL_PARTITION_TOKEN}
    assert detection.plan.launches == () and "1 expired (not launched" in detection.summary()
    assert store.get(INITIAL_PARTITION_TOKEN).state is PartitionState.CREATED


def test_a_stream_whose_partitions_all_finished_has_no_plan(store):
    store.initialize(utc_now() - timedelta(minutes=1), None, 1000)
    store.take(INITIAL_PARTITION_TOKEN, "reader")
    store.record_progress(INITIAL_PARTITION_TOKEN, utc_now(), True, "reader")
    detection = tick(store)
    assert detection.finished and detection.plan is None and detection.low_watermark is None
