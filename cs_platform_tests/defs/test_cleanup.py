"""Cleanup on real parts: a stream read by sensor-launched runs, a lake cut that ingested only part
of what landed, then cleanup passes SIGKILLed right after the first deletion of each step, and a
full pass. Nothing the changelog has not ingested is removed, each killed step is finished by the
next pass, ended reader and lake runs go (a lake run still cutting stays), and the lake then cuts
the whole stream, complete."""

import os
import signal
from datetime import timedelta

import pytest
from dagster import AssetKey, DagsterRunStatus, RunsFilter, materialize

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionState
from cs_platform.changestream.query import PartitionMode
from cs_platform.definitions import build_definitions
from cs_platform.defs.lake_assets import CHECKS
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.lake.published import ingested_landing
from cs_platform.landing.store import LandingStore
from cs_platform_tests.conftest import end_run
from cs_platform_tests.defs.processes import spawn, wait_for

PARTITIONS, READER_JOB, LAKE_JOB = "bank_stream_partitions", "bank_stream_read_partition", "bank_stream_lake"


def asset(defs, *key: str):
    return [a for a in defs.assets if AssetKey(list(key)) in a.keys]


def kept_by_cleanup(rows) -> set[str]:
    """The metadata rows cleanup must never delete, by the design's rule (written here, not taken
    from the store, so the test checks it): the initial partition and every parent of an
    unfinished row."""
    return {INITIAL_PARTITION_TOKEN} | {t for p in rows if p.state is not PartitionState.FINISHED for t in p.parent_tokens}


@pytest.mark.heavy
def test_cleanup_removes_only_what_is_safe_and_every_step_survives_sigkill(bank_stream, dagster_instance, spark, spanner_front, tmp_path, monkeypatch):
    # Two partitions by key range that split and merge every 15 s, not the emulator's churn every
    # 6-12 s: cleanup needs partitions that finish, not many of them. Each split or merge is a run
    # generation, and at a load of 7-10 per core a generation took 10-15 s: with a change every 5 s
    # (and at 3-6 s before that: 199 runs launched) the reads fell minutes behind the stream and the
    # test waited for them to catch up with a churn that never stops.
    spanner_front.partition_by_key_range(
        bank_stream.bank.database_id, "BankStream", partitions=2, change_every=timedelta(seconds=15), mode=PartitionMode.IMMUTABLE_KEY_RANGE
    )
    for kind in ("METADATA", "RUN", "LANDING"):
        monkeypatch.setenv(f"CS_PLATFORM_{kind}_RETENTION_SECONDS", "0")
    # The stream stays open, so its lag grows with the wall time the cleanup passes take: on a loaded
    # machine that passed the default 600 s and failed watermark_lag, a check of lateness this test
    # is not about (test_lake_assets tests it).
    monkeypatch.setenv("CS_PLATFORM_MAX_LAG_SECONDS", str(7 * 24 * 3600))
    # No reader run is killed here: a live run is presumed dead after 120 s without landing, not 20.
    # In a fresh clone's suite (load 5-7 per core, runs reading for a 30 s soft timeout) 21 of 63
    # reader runs failed, two partitions were re-launched seven times each as the backoff grew
    # to 300 s, and the loop ran out of time: a starved run that goes 20 s without landing is presumed
    # dead and stops itself.
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=120)
    defs = build_definitions()
    cut_step = asset(defs, "bank_stream", "mirrors")
    landing = LandingStore(str(bank_stream.landing_root))
    store = bank_stream.store
    lake_root = os.path.join(os.environ["CS_PLATFORM_LAKE_ROOT"], "BankStream")

    def unread() -> list[str]:
        """Landing files the changelog has not ingested (above their directory's mark)."""
        marks = ingested_landing(lake_root)
        return [f for f in landing.files("BankStream") if os.path.basename(f) > marks.get(os.path.dirname(f), "")]

    def some_removable_and_landed() -> bool:
        """A FINISHED row cleanup may delete (not the initial one, no parent of an unfinished row)
        and two landing files. The cut below ingests them, so each step of the killed passes has
        something to delete. On a quiet machine the first cut came 4 s into the stream, when only
        the initial partition had finished: the metadata step then deleted nothing and the test
        waited 90 s for its marker."""
        rows = store.all() if store.table_exists() else []
        spared = kept_by_cleanup(rows)
        return any(p.state is PartitionState.FINISHED and p.token not in spared for p in rows) and len(landing.files("BankStream")) >= 2

    with SensorLoop(build_definitions, dagster_instance, bank_stream.sensor) as loop:
        loop.run_until(some_removable_and_landed, timeout_s=120, drain=False)
        # Ingests what landed so far; the reads go on meanwhile.
        first = loop.run_beside(lambda: materialize(cut_step, resources=defs.resources, instance=dagster_instance), timeout_s=300)
        loop.run_until(lambda: bool(unread()), timeout_s=120, drain=False)  # and more lands after it
        stop.set()
        loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=120, drain=False)
    writer.join()
    assert first.success
    kept = unread()
    files = landing.files("BankStream")

    def state() -> tuple[int, int, int, int]:
        keys = len(dagster_instance.get_dynamic_partitions(PARTITIONS))
        return len(store.all()), keys, dagster_instance.get_runs_count(RunsFilter(job_name=READER_JOB)), len(landing.files("BankStream"))

    before = state()
    lake_job = defs.resolve_job_def(LAKE_JOB)  # ended lake runs (one failed), and one still cutting
    ended_lake_runs = [end_run(dagster_instance, lake_job, failed) for failed in (True, False)]
    cutting = dagster_instance.create_run_for_job(lake_job, status=DagsterRunStatus.STARTED)
    # Each pass is killed right after the first deletion of a step; it finished the steps before it.
    for step, index in (("metadata", 0), ("keys", 1), ("runs", 2), ("landing", 3)):
        marker = tmp_path / f"cleanup-{step}.json"
        process = spawn("cleanup", step, str(marker))
        assert wait_for(marker)["step"]
        os.killpg(process.pid, signal.SIGKILL)
        assert process.wait(timeout=10) == -signal.SIGKILL
        assert state()[index] == before[index] - 1, f"the pass killed in step {step} made exactly one deletion"
        assert all(os.path.exists(f) for f in kept), f"a pass killed in step {step} removed a file not yet ingested"

    cleaned = materialize(asset(defs, "bank_stream", "cleanup"), resources=defs.resources, instance=dagster_instance)
    assert cleaned.success
    report = cleaned.get_asset_materialization_events()[0].materialization.metadata
    assert report["landing_files_not_yet_ingested"].value == len(kept)
    assert report["landing_files_removed"].value == len(files) - len(kept) - 1  # one went in the killed pass
    assert sorted(landing.files("BankStream")) == sorted(kept)
    rows = store.all()
    needed = kept_by_cleanup(rows)
    assert all(p.state is not PartitionState.FINISHED or p.token in needed for p in rows)
    assert len(rows) < before[0]
    assert set(dagster_instance.get_dynamic_partitions(PARTITIONS)) <= {p.key for p in rows}
    assert dagster_instance.get_runs_count(RunsFilter(job_name=READER_JOB)) == 0
    assert ended_lake_runs and [r.run_id for r in dagster_instance.get_runs(RunsFilter(job_name=LAKE_JOB))] == [cutting.run_id]

    # The lake cuts the rest of the stream from what cleanup kept: every committed transaction.
    second = materialize(cut_step, resources=defs.resources, instance=dagster_instance)
    assert second.success
    assert {c.check_name: c.passed for c in second.get_asset_check_evaluations()} == dict.fromkeys(CHECKS, True)
    applied = [
        next(m for m in r.asset_materializations_for_node("bank_stream_cut") if m.asset_key == AssetKey(["bank_stream", "mirrors"])).metadata
        for r in (first, second)
    ]
    assert sum(m["transactions"].value for m in applied) == len(workload.committed)
