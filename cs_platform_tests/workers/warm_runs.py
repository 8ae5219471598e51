"""What a reader run on a warm run worker must survive, done to live runs of a running stack (the
production stack's test calls each while its stream is written): a termination from the UI (the
webserver's GraphQL, as the Terminate button sends it) and by run monitoring past
``dagster/max_runtime`` (Dagster's own ``check_run_timeout``), a worker process SIGKILLed mid-read,
a daemon restart and a code location reload. The stack's end-to-end checks then prove that nothing
committed was lost or repeated across them."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import urllib.request
from dataclasses import dataclass

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, EventLogEntry, RunRecord, RunsFilter
from dagster._daemon.monitoring.run_monitoring import check_run_timeout

from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState
from cs_platform.dev.deadline import wait_until

READER_JOB = "bank_stream_read_partition"
READING = "reading partition"  # what a reader run logs as its read begins (defs/reading.py)
DRAINED = "drained: asked to end"  # ... and once it drained
log = logging.getLogger(__name__)


def graphql(webserver: str, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"{webserver}/graphql", json.dumps({"query": query, "variables": variables or {}}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.load(response)
    assert "errors" not in answer, answer
    return answer["data"]


def reader_runs(instance: DagsterInstance, *statuses: DagsterRunStatus) -> list[RunRecord]:
    return list(instance.get_run_records(RunsFilter(job_name=READER_JOB, statuses=list(statuses) or None)))


def a_live_reader_run(
    instance: DagsterInstance, besides: frozenset[str] = frozenset(), unfinished_in: PartitionMetadataStore | None = None
) -> RunRecord:
    """A reader run that is reading (it logged so) and has most of its read ahead: the one that
    started last, but none of ``besides`` (a run whose worker was killed is STARTED until run
    monitoring's next pass), and with ``unfinished_in``, one whose partition that store does not
    hold FINISHED (the emulator ends a generation of partitions together, and their runs stay
    STARTED while they end: waited past, not picked)."""
    found: list[RunRecord] = []
    reading: set[str] = set()  # runs seen reading: a run's log is read again only until it says so

    def unfinished(record: RunRecord) -> bool:
        key = record.dagster_run.tags["dagster/partition"]
        return unfinished_in is None or unfinished_in.get_by_key(key).state is not PartitionState.FINISHED

    def is_reading(run_id: str) -> bool:
        if run_id not in reading and any(READING in m for m in messages(instance, run_id)):
            reading.add(run_id)
        return run_id in reading

    def started() -> bool:
        found[:] = [
            r for r in reader_runs(instance, DagsterRunStatus.STARTED)
            if r.dagster_run.run_id not in besides and is_reading(r.dagster_run.run_id) and unfinished(r)
        ]
        return bool(found)

    wait_until(started, 180, "a reader run reading on a run worker", poll_s=0.5)
    return max(found, key=lambda r: r.start_time or 0)


def worker_pid(instance: DagsterInstance, run_id: str) -> int | None:
    """The process executing the run, as its worker reported it ("Started process for run")."""
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        metadata = entry.dagster_event.event_specific_data.metadata if entry.dagster_event else {}
        if "pid" in (metadata or {}):
            return int(metadata["pid"].value)
    return None


def ended(instance: DagsterInstance, run_id: str, within_s: float = 240) -> DagsterRunStatus:
    wait_until(lambda: instance.get_run_by_id(run_id).is_finished, within_s, f"run {run_id} to end", poll_s=0.5)
    return instance.get_run_by_id(run_id).status


def messages(instance: DagsterInstance, run_id: str) -> list[str]:
    """What the run logged: its log lines and its events' messages."""
    return messages_of(instance.all_logs(run_id))


def messages_of(entries: list[EventLogEntry]) -> list[str]:
    found = []
    for entry in entries:
        found.append(entry.message or "")
        if entry.dagster_event:
            found.append(entry.dagster_event.message or "")
    return found


@dataclass(frozen=True)
class Outcome:
    run_id: str
    status: DagsterRunStatus
    mid_read: bool  # the signal met the run in its read (it had not recorded its materialization): it had to drain
    drained: bool  # it logged that it landed what it read and persisted its watermark
    failure: str | None  # what reported it FAILED on the way, if anything did (an alert would have said so)


def terminated(instance: DagsterInstance, attempts: int, terminate, besides: frozenset[str]) -> Outcome:
    """Terminate a live reader run with ``terminate(record)`` until one is met in its read, up to
    ``attempts``; returns that one, or the last. A run whose read ended first (its soft timeout or
    its partition's end came before the signal: on a loaded machine the signal can take seconds)
    had nothing to drain, and Dagster ends it as its end met the signal."""
    for _ in range(attempts):
        record = a_live_reader_run(instance, besides)
        terminate(record)
        run_id = record.dagster_run.run_id
        status = ended(instance, run_id)
        entries = instance.all_logs(run_id)  # read once, for all three
        types = {entry.dagster_event.event_type for entry in entries if entry.dagster_event}
        mid_read = not types & {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_SUCCESS}
        drained = any(DRAINED in m for m in messages_of(entries))
        failures = [e.dagster_event.message for e in entries if e.dagster_event and e.dagster_event.event_type is DagsterEventType.RUN_FAILURE]
        outcome = Outcome(run_id, status, mid_read, drained, failures[0] if failures else None)
        if mid_read:
            return outcome
        log.info("run %s ended its read on its own before its termination (%s); another", run_id, status.value)
    print(f"none of {attempts} reader runs was met in its read by its termination; the last: {outcome}")
    return outcome


def ended_as_asked(outcome: Outcome) -> bool:
    """What a termination must leave: never a run marked FAILED (it landed and persisted what it
    read, and an alert would call it a failure), and a run met in its read drained and CANCELED."""
    drained = not outcome.mid_read or (outcome.status, outcome.drained) == (DagsterRunStatus.CANCELED, True)
    return outcome.failure is None and drained


def terminate_from_the_ui(webserver: str, instance: DagsterInstance, besides: frozenset[str]) -> Outcome:
    def click(record: RunRecord) -> None:
        answer = graphql(webserver, "mutation($id: String!) { terminateRun(runId: $id) { __typename } }", {"id": record.dagster_run.run_id})
        assert answer["terminateRun"]["__typename"] in ("TerminateRunSuccess", "TerminateRunFailure"), answer

    return terminated(instance, 5, click, besides)


def terminate_past_max_runtime(instance: DagsterInstance, besides: frozenset[str]) -> Outcome:
    """Run monitoring's own step for a run past ``dagster/max_runtime`` (here: a limit of 1 s)."""
    def monitor(record: RunRecord) -> None:
        over = record._replace(dagster_run=record.dagster_run.with_tags({**record.dagster_run.tags, "dagster/max_runtime": "1"}))
        check_run_timeout(instance, over, log, 0)

    return terminated(instance, 5, monitor, besides)


def kill_a_worker_process(instance: DagsterInstance, workers_pid: int, store: PartitionMetadataStore) -> tuple[RunRecord, float, frozenset[str]]:
    """SIGKILL the worker process of a live reader run (one of the run workers' own, checked) whose
    partition is unfinished before the kill and still after it: a run that read its partition to
    its end just before owes no relaunch, so another is killed. Returns the run, when it was killed,
    and every run killed (each STARTED until run monitoring's next pass)."""
    killed: set[str] = set()
    for _ in range(3):
        record = a_live_reader_run(instance, frozenset(killed), unfinished_in=store)
        run_id, key = record.dagster_run.run_id, record.dagster_run.tags["dagster/partition"]
        pid = worker_pid(instance, run_id)
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        assert parent == workers_pid, f"run {run_id}'s pid {pid} is not a run worker's process"
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        killed.add(run_id)
        if store.get_by_key(key).state is not PartitionState.FINISHED:
            return record, killed_at, frozenset(killed)
        log.info("run %s finished partition %s just before it was killed; another", run_id, key)
    raise AssertionError("three reader runs in a row finished their partitions as they were killed")


def relaunched(instance: DagsterInstance, record: RunRecord, killed_at: float) -> RunRecord:
    """The next reader run of the killed run's partition, once the sensor launched it."""
    key = record.dagster_run.tags["dagster/partition"]
    found: list[RunRecord] = []

    def launched() -> bool:
        found[:] = [r for r in instance.get_run_records(RunsFilter(job_name=READER_JOB, tags={"dagster/partition": key}))
                    if r.create_timestamp.timestamp() > killed_at]
        return bool(found)

    wait_until(launched, 300, f"a new run of partition {key} after its worker was killed", poll_s=1)
    return found[0]
