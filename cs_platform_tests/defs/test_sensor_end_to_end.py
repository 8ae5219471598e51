"""Acceptance for the orchestration: a real Dagster instance, the real sensor evaluated repeatedly,
the runs it requests executed in worker processes, reading in streaming mode through the Cloud
Spanner front before the emulator, with a concurrent writer, through splits and merges of a stream
the front partitions by key range as Cloud Spanner does (IMMUTABLE_KEY_RANGE, each transaction
spread over the partitions that own its keys). Nothing lost; every run resumes from its partition's watermark; no
partition read by two runs at once; merge children launched only after every parent finished.

Two run slots for more live partitions than that, and a soft timeout longer than the window: reads
must rotate (runs asked to yield their slot end early) for the stream to finish in time."""

import threading
from collections import defaultdict
from datetime import timedelta

from dagster import DagsterRunStatus, RunsFilter

from cs_platform.changestream.metadata import ONE_MICROSECOND, lineage, utc_now
from cs_platform.changestream.query import PartitionMode
from cs_platform.definitions import build_definitions
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.dev.workload import BankWorkload
from cs_platform_tests.defs.landing_oracle import assert_no_loss, landing_observations, reads

WINDOW_SECONDS = 50
WRITES_PER_SECOND = 50
REPORT_EVERY_S = 2


def test_sensor_launched_runs_read_every_partition_once_and_lose_nothing(bank_stream, dagster_instance, spanner_front):
    start = utc_now()
    end = start + timedelta(seconds=WINDOW_SECONDS)
    bank_stream.configure(start, end, soft_timeout_s=WINDOW_SECONDS, stale_run_s=3 * WINDOW_SECONDS)
    for name, value in {
        "CS_PLATFORM_LANDING_INTERVAL_SECONDS": "1",  # a run lands as it reads
        "CS_PLATFORM_MAX_PARALLEL_READS": "2",
        # A run reads for 3 s before it yields its slot, so it lands (every second) more than once
        # first: streamed through the front, its first landing can come a second after its start.
        "CS_PLATFORM_YIELD_AFTER_SECONDS": "3",
        # And a run with more than 40 mods lands more than once whatever the time: on a loaded machine
        # (a fresh clone at a load of 6) every run began after its partition's end and read its
        # settled range in one interval, landing once.
        "CS_PLATFORM_LANDING_CHUNK_MODS": "40",
        "CS_PLATFORM_REPORT_INTERVAL_SECONDS": str(REPORT_EVERY_S),  # the UI sees a run's landings, not each
    }.items():
        bank_stream.monkeypatch.setenv(name, value)
    spanner_front.partition_by_key_range(
        bank_stream.bank.database_id, "BankStream", partitions=3, change_every=timedelta(seconds=2), mode=PartitionMode.IMMUTABLE_KEY_RANGE
    )
    workload = BankWorkload(bank_stream.bank)
    writer = threading.Thread(target=workload.run_until, args=(end - timedelta(seconds=3), WRITES_PER_SECOND), daemon=True)
    writer.start()
    with SensorLoop(build_definitions, dagster_instance, "bank_stream_partition_sensor") as loop:
        loop.run_until(bank_stream.finished, timeout_s=WINDOW_SECONDS + 120)
        # Once everything is FINISHED the sensor stops launching.
        assert not loop.tick().run_requests
    writer.join()

    result = assert_no_loss(bank_stream.landing_root, workload, end)
    # Enough traffic to cross several splits and merges; how fast the writer commits on a loaded
    # machine is its speed, not the product's (a fresh clone at a load of 12 committed 1,340).
    assert sum(1 for t in workload.committed if t.commit_timestamp <= end) >= 500
    assert {table for table, *_ in result.mods} == {"Accounts", "Transfers", "AuditEvents"}

    partitions = bank_stream.store.all()
    crossed = lineage(partitions)
    print(f"{len(workload.committed)} transactions, {crossed}, {loop.stats}")
    assert crossed.splits >= 2 and crossed.merges >= 2, crossed
    key_ranges = spanner_front.key_range_stats(bank_stream.bank.database_id, "BankStream")
    assert key_ranges.spread_transactions > 0, key_ranges
    assert loop.stats.failed == 0
    # Read as Cloud Spanner is read: the runs streamed (the front served their queries live; a
    # partition whose run began after its end reads settled history instead).
    assert spanner_front.live_queries > 0

    # Every partition became a dynamic partition; each of its reads resumed where the last one ended.
    by_key = {p.key: p for p in partitions}
    assert set(dagster_instance.get_dynamic_partitions("bank_stream_partitions")) == set(by_key)
    chains = defaultdict(list)
    for read in reads(dagster_instance):
        chains[read.partition_key].append(read)
    assert set(chains) == set(by_key)
    assert max(read.landed_chunks for chain in chains.values() for read in chain) >= 2, "no run landed twice"
    assert any(read.yielded for chain in chains.values() for read in chain), "no run yielded its slot"
    # While a run read, the UI saw its landings as observations of its partition: the first at once,
    # then one per report interval at most, each covering the files landed since the one before.
    landed_per_run = {read.run_id: read.landed_chunks for chain in chains.values() for read in chain if read.landed_chunks}
    observed = landing_observations(dagster_instance)
    assert set(observed) == set(landed_per_run)
    lives = {r.dagster_run.run_id: r.end_time - r.start_time for r in dagster_instance.get_run_records(RunsFilter(run_ids=list(observed)))}
    for run_id, reports in observed.items():
        assert reports[0].files == reports[0].so_far == 1, f"run {run_id}: its first landing was not reported at once"
        assert sum(r.files for r in reports) == reports[-1].so_far <= landed_per_run[run_id]  # each landing in one report
        assert len(reports) <= 1 + lives[run_id] / REPORT_EVERY_S, f"run {run_id} reported more often than every {REPORT_EVERY_S} s"
    for key, chain in chains.items():
        partition = by_key[key]
        assert chain[0].query_start == partition.reads_from  # T0 + 1µs for the stream's first partitions
        for before, after in zip(chain, chain[1:]):
            assert after.query_start == before.watermark + ONE_MICROSECOND, f"{key}: gap or overlap between reads"
        assert chain[-1].watermark == partition.watermark

    # No partition was read by two runs at once.
    runs = defaultdict(list)
    for record in dagster_instance.get_run_records(RunsFilter(job_name="bank_stream_read_partition")):
        assert record.dagster_run.status is DagsterRunStatus.SUCCESS
        runs[record.dagster_run.tags["dagster/partition"]].append((record.start_time, record.end_time))
    for key, spans in runs.items():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), f"overlapping runs of {key}"

    # Children (merge children included) ran only after every parent had finished.
    by_token = {p.token: p for p in partitions}
    for p in partitions:
        for parent in p.parent_tokens:
            assert by_token[parent].finished_at <= p.running_at, f"{p.key} ran before parent {by_token[parent].key} finished"
        first_run_start = min(start for start, _ in runs[p.key])
        latest_parent_finish = max((by_token[t].finished_at.timestamp() for t in p.parent_tokens), default=0)
        assert first_run_start >= latest_parent_finish - 0.2  # host clock vs emulator commit clock (~70 ms)
