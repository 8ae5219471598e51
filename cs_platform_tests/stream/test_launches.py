"""Launch decisions of the partition sensor, on metadata rows built in memory."""

from datetime import datetime, timedelta, timezone

from cs_platform.changestream.metadata import PartitionMetadata, PartitionState
from cs_platform.stream.launches import LaunchPlanner, LaunchRecord, SensorCursor

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def partition(token: str, state: PartitionState, watermark_s: float = 0) -> PartitionMetadata:
    return PartitionMetadata(
        token=token,
        parent_tokens=("initial",),
        start_timestamp=T0,
        end_timestamp=None,
        heartbeat_millis=1000,
        state=state,
        watermark=T0 + timedelta(seconds=watermark_s),
    )


PLANNER = LaunchPlanner(max_parallel=3, retry_backoff_s=5, max_backoff_s=60)


def test_new_partitions_are_launched_once_each_with_distinct_run_keys():
    created = [partition(f"tok{i}", PartitionState.CREATED) for i in range(3)]
    plan = PLANNER.plan(created, live_keys=set(), launched={}, now=100.0)
    assert [launch.reason for launch in plan.launches] == ["new"] * 3
    assert len({launch.run_key for launch in plan.launches}) == 3
    assert all("/" not in launch.run_key and "," not in launch.run_key for launch in plan.launches)
    assert set(plan.launched) == {p.key for p in created}


def test_partition_with_a_live_run_is_never_launched_again():
    running = partition("tok", PartitionState.RUNNING, watermark_s=5)
    plan = PLANNER.plan([running], live_keys={running.key}, launched={}, now=100.0)
    assert plan.launches == ()


def test_progress_since_last_launch_resumes_at_once_from_the_new_watermark():
    running = partition("tok", PartitionState.RUNNING, watermark_s=10)
    earlier = {running.key: LaunchRecord((T0 + timedelta(seconds=5)).isoformat(), 0, launched_at=99.0)}
    (launch,) = PLANNER.plan([running], set(), earlier, now=100.0).launches
    assert launch.reason == "resume" and launch.attempt == 0
    assert launch.run_key.endswith(f"@{running.watermark.isoformat()}#0")


def test_no_progress_retries_with_exponential_backoff_and_a_new_run_key():
    stuck = partition("tok", PartitionState.RUNNING, watermark_s=10)
    cursor = {stuck.key: LaunchRecord(stuck.watermark.isoformat(), 0, launched_at=100.0)}
    assert PLANNER.plan([stuck], set(), cursor, now=104.0).launches == ()  # backoff(1) = 5 s
    plan = PLANNER.plan([stuck], set(), cursor, now=105.0)
    (retry,) = plan.launches
    assert retry.reason == "retry" and retry.attempt == 1 and retry.run_key.endswith("#1")
    # The next failure waits twice as long: 10 s after the retry.
    assert PLANNER.plan([stuck], set(), plan.launched, now=114.0).launches == ()
    assert PLANNER.plan([stuck], set(), plan.launched, now=115.0).launches[0].attempt == 2
    assert PLANNER.backoff(10) == 60  # capped


def test_parallelism_cap_counts_live_runs_and_prefers_the_oldest_watermark():
    rows = [partition(f"tok{i}", PartitionState.RUNNING, watermark_s=w) for i, w in enumerate([30, 10, 20, 40])]
    plan = PLANNER.plan(rows, live_keys={"somewhere-else"}, launched={}, now=0.0)
    assert [launch.partition.token for launch in plan.launches] == ["tok1", "tok2"]
    assert plan.waiting == 2 and plan.starved == 2


def test_only_partitions_due_now_without_a_slot_are_starved():
    """Starved partitions make the sensor ask live runs to yield; one in backoff must not, or a
    failing partition would cut every healthy read short."""
    backing_off = partition("failing", PartitionState.RUNNING, watermark_s=5)
    cursor = {backing_off.key: LaunchRecord(backing_off.watermark.isoformat(), 0, launched_at=100.0)}
    due = [partition(f"tok{i}", PartitionState.RUNNING, watermark_s=10 + i) for i in range(2)]
    live = {"a", "b"}  # one slot left of three
    plan = PLANNER.plan([backing_off, *due], live, cursor, now=101.0)
    assert [launch.partition.token for launch in plan.launches] == ["tok0"]
    assert plan.waiting == 2 and plan.starved == 1
    plan = PLANNER.plan([backing_off], {"a", "b", "c"}, cursor, now=101.0)
    assert plan.waiting == 1 and plan.starved == 0


def test_reads_rotate_through_the_run_queue_when_it_holds_reader_runs_to_the_slots():
    """Up to queue_ahead runs more than the slots are launched to wait in the run queue, the oldest
    partitions first, so a slot a yielding run frees goes to the next at the queue's next pass;
    every partition with no slot to read in, queued or not launched, is starved (live runs are
    asked to yield); never a second run for a partition with one live."""
    planner = LaunchPlanner(max_parallel=2, retry_backoff_s=5, queue_ahead=2)
    rows = [partition(f"tok{i}", PartitionState.RUNNING, watermark_s=10 * i) for i in range(6)]
    key = {p.token: p.key for p in rows}
    reading = {key["tok4"], key["tok5"]}  # both slots taken
    plan = planner.plan(rows, reading, launched={}, now=0.0)
    assert [launch.partition.token for launch in plan.launches] == ["tok0", "tok1"]
    assert plan.starved == 4 and plan.waiting == 2
    plan = planner.plan(rows, reading | {key["tok0"], key["tok1"]}, plan.launched, now=1.0, queued=2)
    assert plan.launches == () and plan.starved == 4
    # tok4 yielded: tok0 took its slot from the queue; one more goes to wait there.
    plan = planner.plan(rows, {key["tok5"], key["tok0"], key["tok1"]}, plan.launched, now=2.0, queued=1)
    assert [launch.partition.token for launch in plan.launches] == ["tok2"]
    assert plan.starved == 4  # tok1 and tok2 in the queue, tok3 and tok4 (which yielded) not launched
    # Without a queue that holds runs to the slots (queue_ahead 0), nothing waits in it.
    assert PLANNER.plan(rows, {key["tok3"], key["tok4"], key["tok5"]}, {}, now=0.0).launches == ()


def test_cursor_keeps_only_unfinished_partitions_and_survives_a_round_trip():
    running = partition("tok", PartitionState.RUNNING)
    plan = PLANNER.plan([running], set(), {"gone": LaunchRecord("x", 0, 1.0)}, now=1.0)
    assert set(plan.launched) == {running.key}
    cursor = SensorCursor(True, plan.launched)
    assert SensorCursor.load(cursor.dump()) == cursor


def test_unreadable_cursor_means_a_fresh_start():
    assert SensorCursor.load("not json") == SensorCursor()
    assert SensorCursor.load('{"initialized": true}') == SensorCursor()
    assert SensorCursor.load(None) == SensorCursor()
