"""Kill real processes with SIGKILL and check that reading resumes from the persisted watermarks.

- crash: a run killed (a) before its landing write, (b) after it but before the watermark update.
  The sensor presumes the dead run failed (stale_run_seconds), re-launches the partition from its
  watermark; nothing is lost, and (b) leaves duplicates that the change identity removes.
- presumed dead: a run is presumed dead once it has not landed for stale_run_seconds, however long it
  has read; a run the sensor marked failed while it was in fact alive stops before it lands again,
  so it never reads beside its re-launch.
- fencing: a run paused (SIGSTOP) between that check and a landing, presumed dead and re-launched,
  lands late when resumed but can no longer move its partition's watermark; nothing is lost. One
  paused as its partition's children are announced, resumed after a relaunch recorded them, they
  finished and cleanup deleted them, inserts none of them again.
- restart: the sensor loop and its runs are killed mid-stream and started again on the existing
  metadata table with an empty cursor: no re-initialization (Beam #32509), no error, no loss.
- lake: a long-lived lake run paused (SIGSTOP) between a mirror's commit and the manifest's: the cut
  it was applying is never published; the lake sensor presumes it dead once it stops marking itself
  alive (it would otherwise stay STARTED and stop the lake for good) and requests a new one; the
  next lake runs lose and double nothing, and the old run, resumed, is fenced out of the lake.
"""

import os
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterRun, DagsterRunStatus, RunsFilter, build_sensor_context, materialize

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, ONE_MICROSECOND, PartitionState, utc_now
from cs_platform.changestream.query import PartitionMode
from cs_platform.definitions import build_definitions
from cs_platform.defs.runs import PARTITION_TAG, live_runs_by_partition, mark_progress
from cs_platform.dev.deadline import Deadline, load_per_core, wait_until
from cs_platform.dev.oracle import changelog_mods, check_bank_cut, committed, spread
from cs_platform.dev.sensor_loop import SensorLoop, evaluate_sensor
from cs_platform.dev.workload import INITIAL_BALANCE
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.published import manifest_log
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.verify import mirrors_against_source
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import advance_lake
from cs_platform_tests.defs.landing_oracle import ASSET, assert_no_loss, observed_landing_paths, reads
from cs_platform_tests.defs.processes import JOB, SENSOR, spawn, wait_for
from cs_platform_tests.defs.test_cleanup import kept_by_cleanup
from cs_platform_tests.lake.readers import (
    bank_without_time_travel,
    check_history_at_cut,
    latest_cut_without_time_travel,
)

LAKE_JOB = "bank_stream_lake"


def lake_run_requested(instance) -> bool:
    """One tick of the lake sensor asks for a lake run."""
    defs = build_definitions()
    with build_sensor_context(instance=instance, resources=defs.resources) as context:
        return bool(defs.get_sensor_def("bank_stream_lake_sensor").evaluate_tick(context).run_requests)


def stale_run_seconds() -> float:
    """How long the sensor waits, after a killed run's start or last landing, before it presumes the
    run dead: short, so the test is quick, yet longer than a live run goes without landing on this
    machine now (it lands every 2 s while heartbeats move its watermark, later when the machine is
    loaded), and more than twice the landing interval. A live run presumed dead stops itself before
    its next landing: nothing is lost, but it is a failure these tests do not expect."""
    return max(12.0, 5 * load_per_core())


def readable(store):
    """The partitions a run reads now, or that the sensor would launch one for now."""
    unfinished = store.unfinished()
    return [*unfinished.schedulable, *unfinished.in_states(PartitionState.SCHEDULED, PartitionState.RUNNING)]


def reading_partitions(bank_stream, loop):
    """Every live partition, SCHEDULED or RUNNING with no run in flight: the one the emulator puts
    all data in is among them. Partitions churn every 6-12 s, faster than runs drain on a loaded
    machine, so children that became schedulable meanwhile are marked SCHEDULED here, as the sensor
    would, not launched: waiting for a moment with none to launch could last forever (it did, on a
    loaded machine)."""
    loop.wait_for_runs()
    store = bank_stream.store
    schedulable = store.unfinished().schedulable
    loop.instance.add_dynamic_partitions("bank_stream_partitions", [p.key for p in schedulable])
    store.transition([p.token for p in schedulable], PartitionState.SCHEDULED)
    found = store.unfinished().in_states(PartitionState.SCHEDULED, PartitionState.RUNNING)
    assert found, "no live partition"
    return found


# Rounds of victims until one had landed rows: on a loaded machine a victim starts seconds late and
# its partition may end before the data reaches it (a fresh clone at a load of 12 needed more than 3).
KILL_ROUNDS = 6


# How a reader run presumed dead while it still read ends itself: before its next landing
# (``runs.stop_if_presumed_dead``), or, presumed dead after that check, at the watermark its
# re-launch fenced off (``reading``: FencedOffError).
STOPPED_ALIVE = ("but was still reading partition", "no longer owns partition")


def step_failures(instance, run_id: str) -> list[str]:
    """The descriptions of the run's step failures (none for a run killed, or marked failed by its sensor)."""
    return [str(e.dagster_event.event_specific_data) for e in instance.all_logs(run_id) if e.dagster_event and e.dagster_event.is_step_failure]


def stopped_itself_presumed_dead(failures: list[str]) -> bool:
    """True if a run with these step failures failed because it found itself given up while it
    still read, not because it was killed."""
    return any(said in failure for failure in failures for said in STOPPED_ALIVE)


def until_one_not_killed(loop, bank_stream, killed) -> None:
    """Between two rounds of victims: the stream moves on to partitions not killed yet. When every
    live partition was a victim, none comes before a victim's partition is re-launched (once
    presumed dead, after stale_run_s) and ends into children: a fixed pause could end before that.
    A child that waits for a killed parent (a merge) is no victim: wait for one that reads or is due to."""
    loop.run_until(lambda: any(p.key not in killed for p in readable(bank_stream.store)), timeout_s=120, drain=False)


# The run killed after a landing reads a MUTABLE_KEY_RANGE stream (DESIGN invariant 12) as Cloud
# Spanner serves a busy one: the front re-partitions it by key range (dev/front/key_ranges.py), so its
# partitions are announced by start records and end at end records, key ranges move between live
# ones, and a killed run held part of transfers whose other part other partitions landed.
@pytest.mark.parametrize("point, mode", [("before_landing", PartitionMode.IMMUTABLE_KEY_RANGE), ("after_landing", PartitionMode.MUTABLE_KEY_RANGE)])
def test_run_killed_mid_read_loses_nothing(bank_stream, dagster_instance, tmp_path, spanner_front, point, mode):
    # Cloud Spanner's shape: three partitions by key range, changing every second, transactions spread over them.
    spanner_front.partition_by_key_range(bank_stream.bank.database_id, "BankStream", partitions=3, change_every=timedelta(seconds=1), mode=mode)
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=stale_run_seconds())
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        loop.run_for(8)
        victims, markers, persisted = [], {}, {}
        # A partition may end (a split or a merge) before it has rows to land: an after_landing
        # round is repeated on other partitions until a killed run had landed rows.
        for _ in range(KILL_ROUNDS):
            killing = [p for p in reading_partitions(bank_stream, loop) if p.key not in markers]
            # A victim reads until it is killed, not until the loop's soft timeout, so an
            # after_landing victim reaches a landing with rows (processes.PATIENCE_S).
            reads_on = {"CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "600"}
            processes = {p.key: spawn("run", p.key, point, str(tmp_path / f"{p.key}.json"), **reads_on) for p in killing}
            markers |= {key: wait_for(tmp_path / f"{key}.json") for key in processes}
            for process in processes.values():
                os.killpg(process.pid, signal.SIGKILL)
                assert process.wait(timeout=10) == -signal.SIGKILL
            # The killed runs persisted nothing past the kill: each watermark is where it was, or
            # where the run's last heartbeat-only landing before it put it (after_landing).
            for p in killing:
                recorded = markers[p.key].get("watermark")
                persisted[p.key] = datetime.fromisoformat(recorded) if recorded else p.watermark
                after = bank_stream.store.get(p.token)
                assert after.watermark == persisted[p.key] and after.state is PartitionState.RUNNING
            victims += killing
            landed_rows = sum(m["rows"] for m in markers.values())
            if point == "before_landing" or landed_rows > 0:
                break
            until_one_not_killed(loop, bank_stream, markers)
        if point == "before_landing":
            assert landed_rows == 0

        stop.set()  # the victims' partitions had data in flight; now let the stream catch up
        loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=180, drain=False)
    writer.join()

    # The loop has closed, so every run has ended: what landed is final up to the low watermark.
    result = assert_no_loss(bank_stream.landing_root, workload, bank_stream.store.low_watermark())
    history = reads(dagster_instance)
    # A killed run's file stays, duplicating what the retry lands again, unless the retry read the
    # very same range (the partition ended at the same child start): then it rewrote the same path,
    # in any chunk of its read (a killed run never reports the file it landed last).
    rewritten = observed_landing_paths(dagster_instance) | {r.landing_path for r in history}
    expected_duplicates = sum(m["rows"] for m in markers.values() if m["landed"] not in rewritten)
    assert result.duplicates == expected_duplicates
    print(f"{point}: {len(victims)} runs killed, {landed_rows} rows landed by them, {result.duplicates} duplicates removed")
    if point == "after_landing":
        assert landed_rows > 0, "no killed run had landed data: the writer was idle?"
    key_ranges = spanner_front.key_range_stats(bank_stream.bank.database_id, "BankStream")
    changed = (key_ranges.moves and key_ranges.ends) if mode is PartitionMode.MUTABLE_KEY_RANGE else (key_ranges.splits and key_ranges.merges)
    assert key_ranges.spread_transactions and changed, key_ranges
    # The sensor declared the dead runs failed and re-launched their partitions from the watermark.
    # On a loaded machine a live run can go stale_run_seconds without landing too: the sensor
    # presumes it dead and it stops itself before its next landing (the fence, as the fencing test
    # proves); such a run is no victim, and no other run may fail.
    failed = dagster_instance.get_run_records(RunsFilter(job_name=JOB, statuses=[DagsterRunStatus.FAILURE]))
    failures = {r.dagster_run.run_id: (r.dagster_run.tags.get(PARTITION_TAG), step_failures(dagster_instance, r.dagster_run.run_id)) for r in failed}
    stopped_alive = [run_id for run_id, (_, said) in failures.items() if stopped_itself_presumed_dead(said)]
    assert len(failed) - len(stopped_alive) == len(victims), (
        f"{len(failed)} failed runs, {len(stopped_alive)} of them stopped while alive, {len(victims)} killed "
        f"({sorted(p.key for p in victims)}); each failed run's partition and step failures: {list(failures.values())}"
    )
    chains = {}
    for read in history:
        chains.setdefault(read.partition_key, []).append(read)
    for p in victims:
        assert any(r.query_start == persisted[p.key] + ONE_MICROSECOND for r in chains[p.key]) or persisted[p.key] < p.reads_from
    announced = [p for p in bank_stream.store.all() if not p.parent_tokens and not p.is_initial]  # by start records, mid-stream
    assert bool(announced) == (mode is PartitionMode.MUTABLE_KEY_RANGE), f"{len(announced)} partitions without parents"


def test_a_run_that_lands_is_alive_however_long_it_reads_and_one_that_stops_landing_is_presumed_dead(bank_stream, dagster_instance):
    """Liveness is measured from a run's last landing, not its start: a long run is never presumed
    dead (measured from its start, it was at stale_run_seconds, and read on beside its re-launch),
    and a dead one is noticed stale_run_seconds after it stopped landing."""
    stale = max(3.0, 2 * load_per_core())
    bank_stream.configure(utc_now(), utc_now() + timedelta(hours=1), soft_timeout_s=60, stale_run_s=stale)
    bank_stream.monkeypatch.setenv("CS_PLATFORM_LANDING_INTERVAL_SECONDS", "1")
    definitions = build_definitions()
    sensor = definitions.resolve_sensor_def(SENSOR)
    first = evaluate_sensor(definitions, dagster_instance, sensor, None)  # initializes the stream
    [launch] = first.run_requests  # not executed: a run that lands stands in for it
    run = DagsterRun(job_name=JOB, run_id="1" * 32, status=DagsterRunStatus.STARTED, tags={"dagster/partition": launch.partition_key})
    dagster_instance.add_run(run)
    landing_until = time.monotonic() + 1.5 * stale
    while time.monotonic() < landing_until:  # it lands every landing interval, for longer than stale
        mark_progress(dagster_instance, run.run_id)
        time.sleep(0.2)
    mark_progress(dagster_instance, run.run_id)
    evaluate_sensor(definitions, dagster_instance, sensor, first.cursor)
    assert dagster_instance.get_run_by_id(run.run_id).status is DagsterRunStatus.STARTED, "a run that lands was presumed dead"
    time.sleep(stale + 0.5)  # it stops landing
    evaluate_sensor(definitions, dagster_instance, sensor, first.cursor)
    assert dagster_instance.get_run_by_id(run.run_id).status is DagsterRunStatus.FAILURE
    [failure] = [e for e in dagster_instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.is_run_failure]
    assert "presumed dead" in failure.message and "no landing for" in failure.message


def test_a_run_presumed_dead_while_alive_stops_before_it_lands_again(bank_stream, dagster_instance, tmp_path, monkeypatch):
    monkeypatch.setenv("CS_PLATFORM_LANDING_INTERVAL_SECONDS", "0.5")  # a first chunk, with data or not, at once
    workload, writer, stop = bank_stream.start_open_stream()
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        loop.run_for(4)
        victim = reading_partitions(bank_stream, loop)[0]
    marker = tmp_path / "run.json"
    process = spawn("run", victim.key, "presumed_dead", str(marker))
    try:
        wait_for(marker)  # the run read its first chunk and waits, before landing it, for the verdict
        [record] = live_runs_by_partition(dagster_instance, JOB, ASSET)[victim.key]
        dagster_instance.report_run_failed(record.dagster_run, "presumed dead by the test")
        marker.with_suffix(".go").touch()
        deadline = Deadline(120)
        while process.poll() is None:
            assert not deadline.expired(), f"the run read on after it was marked failed ({deadline.describe()})"
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        stop.set()
        writer.join()
    assert process.returncode == 1, "the run ended without failing: it did not see that it was given up"
    assert not marker.with_suffix(".late").exists(), "the run landed after it was marked failed"
    events = [e.dagster_event for e in dagster_instance.all_logs(record.dagster_run.run_id) if e.dagster_event]
    failures = [e for e in events if e.is_step_failure]
    assert len(failures) == 1 and "stopping before its next landing" in str(failures[0].event_specific_data)
    assert bank_stream.store.get(victim.token).state is PartitionState.RUNNING  # for its re-launch to finish


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (T: stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def pause_runs_holding_rows(bank_stream, loop, tmp_path: Path, processes: dict, timestamps: int, **settings: str) -> dict[str, dict]:
    """Start a ``paused`` run for every live partition, in rounds, until one of them stopped itself
    holding rows of ``timestamps`` commit timestamps or more; the others end as runs do (a partition
    ends with no rows after its last run's landing: only the child partitions' record was left).
    Returns the markers of the runs that stopped; ``processes`` gathers every run started, for the
    caller to reap. ``settings`` are the runs' own."""
    for _ in range(10):
        for p in reading_partitions(bank_stream, loop):  # a run that ended without rows left it live, or ended it
            processes[p.key] = spawn("run", p.key, "paused", str(tmp_path / f"{p.key}.json"), str(timestamps), **settings)

        def settled() -> bool:  # every run stopped itself holding rows, or ended
            return all(
                process.poll() is not None or ((tmp_path / f"{key}.json").exists() and process_state(process.pid) == "T")
                for key, process in processes.items()
            )

        wait_until(settled, 180, "the paused runs to stop or end", poll_s=0.05)
        paused = {key: wait_for(tmp_path / f"{key}.json") for key, process in processes.items() if process.poll() is None}
        if paused:
            assert all(processes[key].returncode == 0 for key in processes if key not in paused), "a run that did not pause failed"
            return paused
    raise AssertionError("no run held rows in 10 rounds of live partitions: the writer was idle?")


@pytest.mark.heavy
def test_a_paused_run_resumed_while_its_relaunch_is_below_its_chunk_and_after_a_cut_loses_nothing(
    bank_stream, dagster_instance, spark, tmp_path, monkeypatch
):
    """Fencing (DESIGN invariant 11), in the order that loses data without it. A run stops itself
    (SIGSTOP) holding a chunk of several transactions, (W0, W1], before landing it; it is presumed
    dead and its partition relaunched. The relaunch lands two chunks of one transaction each, still
    below W1, and stops; a cut ingests them, so the lake's mark for the partition's landing is past
    the late chunk's file (named from W0). Then the paused run resumes: it lands its chunk late, a
    file the lake never ingests, and must not move the watermark to W1. The relaunch is killed and
    relaunched from the persisted watermark: with the fence, from below W1, so every mod of the
    chunk is read again; without it, from W1, and the mods between the relaunch's last landing and
    W1 would exist only in that late file. Then every committed mod reaches the changelog once and
    every cut is the source's bank.

    The sensor's presumption is the test's here (``report_run_failed``, as the sensor reports it):
    the relaunch has to be a run the test can stop below W1, and the sensor's stale limit is long
    (600 s), so that it relaunches neither run behind the test's back."""
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=600)
    store = bank_stream.store
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"), history=HistoryPolicy(None))
    landing = LandingStore(str(bank_stream.landing_root))

    def cut() -> None:  # what a lake run does at each cut (lake_steps.advance_lake)
        assert advance_lake(lake, landing, store, bank_stream.target, "BankStream") is not None

    # The paused run: lands every 3 s (a chunk of many transactions), reads until it is stopped.
    # The relaunch: a chunk for every transaction (a transfer is 4 mods: a chunk is due at the 5th,
    # the next transaction's first record), and none by time.
    paused_run = {"CS_PLATFORM_LANDING_INTERVAL_SECONDS": "3", "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "600"}
    relaunch_run = {"CS_PLATFORM_LANDING_CHUNK_MODS": "5", "CS_PLATFORM_LANDING_INTERVAL_SECONDS": "250", "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "600"}
    processes: dict = {}
    relaunch = None
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        loop.run_for(4)
        cut()  # the snapshot and a first cut: the cut below is an incremental one
        try:
            markers = pause_runs_holding_rows(bank_stream, loop, tmp_path, processes, 3, **paused_run)
            key, paused = next(iter(markers.items()))
            victim = processes[key]
            for other in (k for k in markers if k != key):  # one paused run is this test; the others end as dead runs do
                os.killpg(processes[other].pid, signal.SIGKILL)
                processes[other].wait()
                dagster_instance.report_run_failed(dagster_instance.get_run_by_id(store.get_by_key(other).owner), "presumed dead by the test")
            owner = store.get_by_key(key).owner
            dagster_instance.report_run_failed(dagster_instance.get_run_by_id(owner), "presumed dead by the test")
            relaunch_marker = tmp_path / f"{key}.relaunch.json"
            relaunch = spawn("run", key, "between_chunks", str(relaunch_marker), "2", **relaunch_run)
            # Once the relaunch owns the partition the sensor leaves it alone, and the loop reads the
            # other partitions while the relaunch lands: the stream's later generations do not pile
            # up for the end.
            wait_until(lambda: store.get_by_key(key).owner != owner or relaunch.poll() is not None, 120, "the relaunch taking the partition", poll_s=0.1)
            loop.run_until(lambda: relaunch_marker.exists() or relaunch.poll() is not None, timeout_s=120, drain=False)
            below = wait_for(relaunch_marker, 5)
            stop.set()  # what follows needs no more writes
            late_chunk_end = datetime.fromisoformat(paused["watermark"])
            assert len(below["with_rows"]) == 2 and datetime.fromisoformat(below["watermark"]) < late_chunk_end, (below, paused)
            taken = store.get_by_key(key)
            assert taken.owner != owner and taken.watermark < late_chunk_end
            cut()  # ingests the relaunch's two files: the partition's mark is past the late chunk's name
            os.kill(victim.pid, signal.SIGCONT)
            wait_until(lambda: victim.poll() is not None, 120, "the resumed run to persist or stop", poll_s=0.1)
            assert (tmp_path / f"{key}.late").exists(), "the resumed run did not land its chunk"
            after = store.get_by_key(key)  # checked last: the data checks speak first
            os.killpg(relaunch.pid, signal.SIGKILL)  # the relaunch dies below the late chunk
            relaunch.wait()
            dagster_instance.report_run_failed(dagster_instance.get_run_by_id(taken.owner), "presumed dead by the test")
            loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=240, drain=False)
        finally:
            for process in [*processes.values(), relaunch]:
                if process is not None and process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
    writer.join()
    cut()
    cuts = lake.cuts()
    assert cuts[-1] >= workload.committed[-1].commit_timestamp
    mods, repeated = changelog_mods(lake, cuts[-1])
    expected = committed(workload, cuts[-1], cuts[0])
    assert repeated == 0 and mods == expected, f"{len(expected - mods)} committed mods missing from the changelog, {len(mods - expected)} extra"
    for at in spread(cuts):
        check_bank_cut(lake, bank_stream.bank, at)
    assert after.owner == taken.owner and after.watermark == taken.watermark, "the resumed run moved the watermark"
    assert victim.returncode == 1, "the resumed run did not fail"
    events = [e.dagster_event for e in dagster_instance.all_logs(owner) if e.dagster_event]
    [failure] = [e for e in events if e.is_step_failure]
    assert "no longer owns partition" in str(failure.event_specific_data), str(failure.event_specific_data)
    print(f"fencing below the late chunk: {paused['timestamps']} transactions paused, the relaunch stopped at {below['watermark']}, {len(cuts)} cuts")


def deletable(store, tokens: list[str]) -> bool:
    """Every one of ``tokens`` FINISHED and none kept by cleanup's rule: cleanup deletes them."""
    rows = {p.token: p for p in store.all()}
    kept = kept_by_cleanup(rows.values())
    return all(t in rows and rows[t].state is PartitionState.FINISHED and t not in kept for t in tokens)


@pytest.mark.heavy
def test_a_paused_run_that_meets_children_cleanup_deleted_does_not_insert_them_again(bank_stream, dagster_instance, tmp_path):
    """Fencing of ``add_children`` (DESIGN invariant 11), on real processes. A run stops itself
    (SIGSTOP) as its partition's children are announced, before it records them; it is presumed dead
    and a relaunch reads the partition again, records the children and finishes it. The children
    are read and finish too, and cleanup deletes them. Then the paused run resumes: it must not insert
    them again (CREATED at their old start, they would take the low watermark back, and past the
    stream's retention the lake would wait on them for good); it stops, fenced, with one clear line."""
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=600)  # the test presumes the run dead itself
    store = bank_stream.store
    marker = tmp_path / "paused.json"
    victim = relaunch = None
    try:
        with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
            loop.run_until(store.table_exists, timeout_s=60, drain=False)
            key = reading_partitions(bank_stream, loop)[0].key  # no tick until the victim has taken it
            # Both read until the partition ends (the fixture's runs end after 2 s, before a partition
            # living 6-12 s announces its children: the paused run did so once in a full suite).
            until_the_end = {"CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "600"}
            victim = spawn("run", key, "before_children", str(marker), **until_the_end)
            wait_until(lambda: victim.poll() is not None or (marker.exists() and process_state(victim.pid) == "T"), 120, "the run to pause", poll_s=0.05)
            assert victim.poll() is None, "the run ended without announcing children"
            paused = wait_for(marker)
            owner = store.get_by_key(key).owner
            dagster_instance.report_run_failed(dagster_instance.get_run_by_id(owner), "presumed dead by the test")
            relaunch = spawn("drained", key, str(tmp_path / "relaunch.json"), **until_the_end)
            loop.run_until(lambda: relaunch.poll() is not None, timeout_s=180, drain=False)
            assert relaunch.returncode == 0 and store.get_by_key(key).state is PartitionState.FINISHED
            children = paused["children"]
            assert children and set(children) <= {p.token for p in store.all()}, "the relaunch recorded the children"
            loop.run_until(lambda: deletable(store, children), timeout_s=240, drain=False)
            stop.set()
        child_keys = {p.key for p in store.all() if p.token in children}
        deleted = store.delete_finished(timedelta(0))  # cleanup's metadata step, retention 0 (partition keys)
        assert child_keys <= set(deleted)
        low = store.low_watermark()
        os.kill(victim.pid, signal.SIGCONT)
        wait_until(lambda: victim.poll() is not None, 120, "the resumed run to end", poll_s=0.1)
    finally:
        for process in (victim, relaunch):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    writer.join()
    rows = {p.token: p for p in store.all()}
    back = set(children) & set(rows)
    assert not back, f"the resumed run inserted {len(back)} of the {len(children)} children cleanup had deleted"
    assert store.low_watermark() >= low
    assert victim.returncode == 1, "the resumed run did not fail"
    [failure] = [e.dagster_event for e in dagster_instance.all_logs(owner) if e.dagster_event and e.dagster_event.is_step_failure]
    assert "no longer owns partition" in str(failure.event_specific_data), str(failure.event_specific_data)
    print(f"fenced at its children: partition {key} ({'kept' if paused['partition'] in rows else 'deleted'}), {len(children)} children deleted by cleanup")


def test_restart_resumes_from_watermarks_without_reinitializing(bank_stream, dagster_instance):
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=stale_run_seconds())
    everything = spawn("loop")
    # Let it read for a while: the initial partition and a few generations of children.
    deadline = Deadline(120)
    while not (bank_stream.store.table_exists() and len(bank_stream.store.all()) >= 6):
        assert everything.poll() is None, "the loop process died"
        assert not deadline.expired(), f"the loop process made no progress ({deadline.describe()})"
        time.sleep(0.5)
    os.killpg(everything.pid, signal.SIGKILL)  # the loop and every run it was executing
    assert everything.wait(timeout=10) == -signal.SIGKILL
    before = {p.key: p for p in bank_stream.store.all()}
    initial = before[INITIAL_PARTITION_TOKEN]
    interrupted = [p for p in before.values() if p.state in (PartitionState.SCHEDULED, PartitionState.RUNNING)]
    assert len(before) > 1 and initial.state is PartitionState.FINISHED

    stop.set()
    with SensorLoop(build_definitions, dagster_instance, SENSOR, cursor=None) as loop:
        loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=180, drain=False)
        assert loop.stats.failed == 0
    writer.join()

    after = {p.key: p for p in bank_stream.store.all()}
    assert after[INITIAL_PARTITION_TOKEN].created_at == initial.created_at  # not re-initialized
    assert after[INITIAL_PARTITION_TOKEN].start_timestamp == initial.start_timestamp
    assert_no_loss(bank_stream.landing_root, workload, bank_stream.store.low_watermark())
    chains = {}
    for read in reads(dagster_instance):
        chains.setdefault(read.partition_key, []).append(read)
    for p in interrupted:
        resume_from = max(p.reads_from, p.watermark + ONE_MICROSECOND)
        assert any(r.query_start == resume_from for r in chains[p.key]), f"{p.key} did not resume at its watermark"
    print(f"restart: {len(before)} partitions before, {len(interrupted)} interrupted, {len(after)} in the end")


@pytest.mark.heavy
def test_a_run_killed_between_chunks_keeps_what_it_landed_and_loses_nothing(bank_stream, dagster_instance, tmp_path, monkeypatch):
    monkeypatch.setenv("CS_PLATFORM_LANDING_CHUNK_MODS", "20")  # a run with data lands many chunks
    monkeypatch.setenv("CS_PLATFORM_LANDING_INTERVAL_SECONDS", "0.5")  # and one without, heartbeats
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=stale_run_seconds())
    killed: dict[str, dict] = {}  # partition key -> the marker of the run killed in it
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        # The emulator puts the data in one partition at a time, which can end before its victim
        # reads it (a victim takes seconds to start on a loaded machine): the other victims then get
        # heartbeats only. Rounds of victims, each killed and checked, until one had landed rows.
        loop.run_for(8)
        for _ in range(KILL_ROUNDS):
            victims = {p.key: p for p in reading_partitions(bank_stream, loop) if p.key not in killed}
            processes = {key: spawn("run", key, "between_chunks", str(tmp_path / f"{key}.json")) for key in victims}
            # Each run stops after its first chunk (a partition that ends first ends its run normally).
            deadline = Deadline(120)
            while any(process.poll() is None and not (tmp_path / f"{key}.json").exists() for key, process in processes.items()):
                assert not deadline.expired(), f"runs neither ended nor stopped between chunks ({deadline.describe()})"
                time.sleep(0.1)
            markers = {key: wait_for(tmp_path / f"{key}.json") for key in processes if (tmp_path / f"{key}.json").exists()}
            # The runs are alive, and the UI already shows each file they landed (an observation per landing).
            observed = {(r.asset_observation.partition, r.asset_observation.metadata["landing_path"].value) for r in dagster_instance.fetch_observations(ASSET, limit=10_000).records}
            assert {(key, m["landed"]) for key, m in markers.items() if m["rows"]} <= observed
            for key, marker in markers.items():
                os.killpg(processes[key].pid, signal.SIGKILL)
                assert processes[key].wait(timeout=10) == -signal.SIGKILL
                after = bank_stream.store.get_by_key(key)
                # What the killed run landed stays landed, and its watermark says so.
                assert after.watermark.isoformat() == marker["watermark"] and after.state is PartitionState.RUNNING
                if marker["rows"]:
                    assert marker["rows"] < 40, "the first chunk holds about CS_PLATFORM_LANDING_CHUNK_MODS mods"
                else:  # an interval's chunk of heartbeats: no file, and the watermark moved all the same
                    assert marker["landed"] is None and after.watermark > victims[key].watermark
            killed.update(markers)
            if any(m["rows"] for m in killed.values()):
                break
            until_one_not_killed(loop, bank_stream, killed)
        assert any(m["rows"] for m in killed.values()), f"no run landed a chunk of data in {KILL_ROUNDS} rounds: the writer was idle?"

        stop.set()
        loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=180, drain=False)
    writer.join()
    result = assert_no_loss(bank_stream.landing_root, workload, bank_stream.store.low_watermark())
    assert result.duplicates == 0  # the re-launched reads began after the killed runs' last chunk


def test_a_lake_run_paused_between_a_mirror_commit_and_the_manifest_is_fenced_and_its_successor_loses_and_duplicates_nothing(
    bank_stream, dagster_instance, spark, tmp_path, monkeypatch
):
    """A long-lived lake run (as the lake sensor launches it) has published a cut, and in the next
    one, after the Accounts mirror committed and before its history, the other mirrors (AuditEvents
    with keys deleted and re-inserted, Transfers appended to) and the manifest, its Python process
    stops (SIGSTOP; its Spark JVM goes on). Readers never see that cut: a reader without time travel
    sees a consistent bank at the manifest's latest cut. The lake sensor presumes the run dead by
    its silence; its successor publishes cuts while it sleeps (the first applies the half-applied
    range again: DESIGN invariant 3, as after a kill), with balances updated and audit events
    deleted and re-inserted in between. Resumed (SIGCONT), the old run does the rest of its cut's
    writes over its successor's cuts and tries to publish its own: the lake's fence (``lake.fence``)
    keeps every one of them out, and it stops with one line that says so. Then every mirror and
    history table equals the source read at the last cut the old run published, at each of its
    successor's cuts and at the last cut, value by value; the manifest only moves forward; no key
    is doubled in the appended Transfers mirror and no key has two open history versions; nothing
    is lost or doubled in the changelog."""
    monkeypatch.setenv("CS_PLATFORM_CUT_INTERVAL_SECONDS", "1")
    monkeypatch.setenv("CS_PLATFORM_HISTORY_TABLES", "Accounts")  # one table: what the no-time-travel bank reads
    # A few transfers a second give every 1 s cut something to commit; 40 a second made the ~2 minutes
    # a cold lake run takes to reach its second cut 4,460 transfers, all read, cut and checked again
    # after the kill, for nothing this test looks at.
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=stale_run_seconds(), per_second=5, recycle_every=3)
    marker = tmp_path / "lake.marker"
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"), history=HistoryPolicy(None))
    defs = build_definitions()
    step = [a for a in defs.assets if AssetKey(["bank_stream", "mirrors"]) in a.keys]
    victim = spawn("lake", "1", str(marker), "mirror", "pause")
    try:
        with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
            loop.run_until(lambda: marker.exists() or victim.poll() is not None, timeout_s=300, drain=False)
            assert victim.poll() is None, "the lake run ended before its second cut"
            wait_until(lambda: stopped(victim.pid), 30, "the lake run stopping itself")
            mirror, paused_cut = marker.read_text().splitlines()
            published = lake.cuts()
            assert len(published) >= 2 and published == sorted(published)  # the snapshot, then a cut of the run
            assert datetime.fromisoformat(paused_cut) > published[-1]  # its cut never reached the manifest,
            table = mirror.rstrip("/").rsplit("/", 1)[-1]
            assert table == "Accounts" and lake.mirror(table).version() > lake.last_published().versions[table]  # though its mirror committed it
            assert latest_cut_without_time_travel(lake) == published[-1]
            accounts, total = bank_without_time_travel(lake)
            assert accounts > 0 and total == INITIAL_BALANCE * accounts  # no transfer half visible
            [paused] = dagster_instance.get_run_records(RunsFilter(job_name=LAKE_JOB, statuses=[DagsterRunStatus.STARTED]))
            wait_until(lambda: lake_run_requested(dagster_instance), 3 * stale_run_seconds() + 60, "the lake sensor presuming the paused lake run dead", poll_s=1)
            assert dagster_instance.get_run_by_id(paused.dagster_run.run_id).status is DagsterRunStatus.FAILURE
            for _ in range(2):  # its successor's cuts, balances updated and events deleted and re-inserted between them
                before = lake.last_cut()
                loop.run_until(lambda: (bank_stream.store.low_watermark() or before) > before + timedelta(seconds=1), timeout_s=120, drain=False)
                assert materialize(step, resources=defs.resources, instance=dagster_instance).success
                assert lake.last_cut() > before
            successors = lake.cuts()
            os.kill(victim.pid, signal.SIGCONT)  # the Python process only: its JVM never stopped
            assert victim.wait(timeout=300) != 0
            failures = [e.dagster_event for e in dagster_instance.all_logs(paused.dagster_run.run_id) if e.dagster_event and e.dagster_event.is_step_failure]
            assert any("was fenced" in str(f.event_specific_data) for f in failures), "the resumed lake run did not say it was fenced"
            assert lake.cuts() == successors, "the resumed lake run published"
            stop.set()
            loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=180, drain=False)
    finally:
        if victim.poll() is None:  # an assertion failed before it ended: never leave it stopped
            os.killpg(victim.pid, signal.SIGKILL)
    writer.join()

    assert materialize(step, resources=defs.resources, instance=dagster_instance).success  # the next lake run, to the end
    cuts = lake.cuts()
    assert cuts[: len(published)] == published and cuts[-1] >= workload.committed[-1].commit_timestamp
    recorded = [r["cut"] for _, r in manifest_log(lake.location).all_recorded() if "cut" in r]
    assert recorded == sorted(recorded), "the manifest went back"
    mods, repeated = changelog_mods(lake, cuts[-1])
    assert repeated == 0 and mods == committed(workload, cuts[-1], published[0])
    database = bank_stream.bank
    # The cuts the old run could have harmed: its last, its successors' while it slept, and the
    # last (any damage it did stays in every later cut: each cut merges into the one before).
    for cut in sorted({*successors[len(published) - 1 :], cuts[-1]}):
        check_bank_cut(lake, database, cut)
        found = mirrors_against_source(lake, database, "BankStream", samples=1_000_000, cut=cut)  # every row, every column
        assert found.mismatched == [], f"cut {cut.isoformat()}: {found.tables}"
        check_history_at_cut(lake, cut)  # also: a version the old run reopened would be valid at every later cut
    transfers = lake.mirror("Transfers").read(spark)
    assert transfers.count() == transfers.select("TransferId").distinct().count(), "a transfer appended twice"
    history = lake.history_table("Accounts").read(spark)
    assert history.where("_valid_to IS NULL").groupBy("AccountId").count().where("count > 1").count() == 0, "two open versions of a key"


def stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP): state T in /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"
