"""Runs asked to end drain (``defs/reading.py``, ``defs/lake_assets.py``). A reader run sent SIGTERM
(a deploy) or SIGINT (Dagster's termination) lands what it read since its last landing, persists
that watermark and ends CANCELED, within a heartbeat or so; the stream read on from there loses and
duplicates nothing. A lake run sent SIGTERM ends CANCELED on a published cut, each cut around the
signal whole (a lake run SIGKILLed is presumed dead: ``test_crash_and_restart``, its lake test).
Real processes: each run is a process of its own, as the run launcher starts it."""

import json
import os
import signal
import time
from datetime import datetime, timedelta

import pytest
from dagster import DagsterRunStatus

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionState
from cs_platform.definitions import build_definitions
from cs_platform.defs.resources import change_stream_resource_key, configured_resources
from cs_platform.dev.deadline import Deadline, wait_until
from cs_platform.dev.oracle import check_bank_cut, spread
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore, landed_upto
from cs_platform_tests.conftest import SOFT_TIMEOUT_S
from cs_platform_tests.defs.landing_oracle import assert_no_loss
from cs_platform_tests.defs.processes import SENSOR, spawn, wait_for

DRAIN_BOUND_S = 10  # at the defaults (docs/operations.md); scaled by the machine's load (Deadline)


@pytest.mark.heavy
def test_terminated_reader_and_lake_runs_drain_and_end_canceled(
    bank_stream, dagster_instance, spanner_front, spark, tmp_path, monkeypatch
):
    # Two partitions by key range that live through the test (the emulator's churn every 6 s would
    # end a run before it is terminated); a landing every 30 s, so all a drained run lands after its
    # first landing is what it read since, drained.
    spanner_front.partition_by_key_range(bank_stream.bank.database_id, "BankStream", partitions=2, change_every=timedelta(hours=1))
    monkeypatch.setenv("CS_PLATFORM_LANDING_INTERVAL_SECONDS", "30")
    workload, writer, stop = bank_stream.start_open_stream(stale_run_s=120)
    monkeypatch.setenv("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", "600")  # the runs read until they are terminated
    change_stream = configured_resources(os.environ)[change_stream_resource_key("BankStream")]
    store = bank_stream.store
    store.initialize(change_stream.start(), change_stream.end(), change_stream.heartbeat_millis)
    initial = change_stream.reader().read(store.get(INITIAL_PARTITION_TOKEN), timedelta(seconds=30))  # names the two partitions
    store.record_progress(INITIAL_PARTITION_TOKEN, initial.watermark, True, owner=None)
    children = store.unfinished().schedulable
    assert len(children) == 2
    dagster_instance.add_dynamic_partitions("bank_stream_partitions", [p.key for p in children])
    processes = {p.key: spawn("drained", p.key, str(tmp_path / f"{p.key}.json")) for p in children}
    markers = {key: wait_for(tmp_path / f"{key}.json") for key in processes}  # each landed its first chunk
    committed = len(workload.committed)
    wait_until(lambda: len(workload.committed) >= committed + 40, 60, "40 more transfers", poll_s=0.1)  # read, not landed yet
    terminated = time.monotonic()
    # The run worker itself: SIGTERM as a deploy or a scale-down sends it, SIGINT as Dagster's
    # termination does (its code server interrupts the run's process).
    for process, number in zip(processes.values(), (signal.SIGTERM, signal.SIGINT)):
        os.kill(process.pid, number)
    first = {key: datetime.fromisoformat(m["watermark"]) for key, m in markers.items()}
    drained, deadline = {}, Deadline(DRAIN_BOUND_S)
    while len(drained) < len(children):  # each drained run persists a watermark past its first landing's
        for partition in children:
            if partition.key not in drained and bank_stream.store.get(partition.token).watermark > first[partition.key]:
                drained[partition.key] = time.monotonic() - terminated
        assert not deadline.expired(), f"no watermark persisted after SIGTERM by {set(processes) - set(drained)} ({deadline.describe()})"
        time.sleep(0.05)
    for partition in children:
        key = partition.key
        assert processes[key].wait(timeout=60) == 0
        ended = json.loads((tmp_path / f"{key}.ended").read_text())
        assert ended["status"] == DagsterRunStatus.CANCELED.value, ended
        after = bank_stream.store.get(partition.token)
        assert after.state is PartitionState.RUNNING and after.owner == markers[key]["run_id"]  # drained, not finished
        # What it read since its first landing was landed by the drain: its last file reaches the
        # watermark it persisted (the writer wrote to both partitions' key ranges meanwhile).
        files = [f for f in LandingStore(str(bank_stream.landing_root)).files("BankStream") if f"/{key}/" in f]
        assert files and max(landed_upto(os.path.basename(f)) for f in files) == after.watermark > first[key]
    print(f"drained in {', '.join(f'{s:.1f}' for s in drained.values())} s after the signal")

    # The sensor reads on from the drained watermarks while a lake run cuts. Sent SIGTERM once it
    # published a cut, it ends CANCELED on a published cut, never half of one.
    monkeypatch.setenv("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", str(SOFT_TIMEOUT_S))
    monkeypatch.setenv("CS_PLATFORM_LANDING_INTERVAL_SECONDS", "2")
    monkeypatch.setenv("CS_PLATFORM_STALE_RUN_SECONDS", "120")
    monkeypatch.setenv("CS_PLATFORM_CUT_INTERVAL_SECONDS", "5")  # fewer cuts to check
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        marker = tmp_path / "lake.json"
        lake_run = spawn("lake_drained", str(marker))
        loop.run_until(lambda: marker.exists() or lake_run.poll() is not None, timeout_s=300, drain=False)
        assert lake_run.poll() is None, "the lake run ended before it published a cut"
        os.kill(lake_run.pid, signal.SIGTERM)  # to the run's process, as a deploy sends it
        loop.run_until(lambda: lake_run.poll() is not None, timeout_s=120, drain=False)  # reads go on meanwhile
        assert lake_run.wait() == 0
        assert json.loads((tmp_path / "lake.ended").read_text())["status"] == DagsterRunStatus.CANCELED.value
        stop.set()
        loop.run_until(bank_stream.caught_up(writer, workload), timeout_s=180, drain=False)
    writer.join()
    result = assert_no_loss(bank_stream.landing_root, workload, bank_stream.store.low_watermark())
    assert result.duplicates == 0
    # The cuts around the signal whole, the bank at their time: the drained run's first (the signal
    # came after it), the middle one and the last, which it or its successor took after the signal.
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"))
    first_cut = datetime.fromisoformat(json.loads(marker.read_text())["cut"])
    around = [c for c in lake.cuts() if c >= first_cut]
    assert around and around[0] == first_cut
    for cut in spread(around):
        check_bank_cut(lake, bank_stream.bank, cut)
