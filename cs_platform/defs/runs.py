"""Which reader runs are alive, from the Dagster instance's run storage.

One query for all unfinished runs; a run belongs to a stream's reader if it is a run of the
stream's job (sensor runs) or selects the stream's asset (UI materializations and backfills).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterable, Iterator

from dagster import (
    AssetKey,
    DagsterExecutionInterruptedError,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    Failure,
    RunRecord,
    RunsFilter,
)
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

LIVE_RUN_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
CANCELLED = (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)  # a run asked to end: it drains
ENDED_RUN_STATUSES = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
PARTITION_TAG = "dagster/partition"
# Set by the sensor on live reader runs when partitions wait for a slot: the run lands, persists its
# watermark and ends at its next landing once it has read for yield_after_seconds.
YIELD_TAG = "cs_platform/yield_slot"
# Set by a reader run after each landing: the wall clock (epoch seconds) at which it last showed it is alive.
PROGRESS_TAG = "cs_platform/progress_at"


def live_runs_by_partition(instance: DagsterInstance, job_name: str, asset_key: AssetKey) -> dict[str, list[RunRecord]]:
    live: dict[str, list[RunRecord]] = defaultdict(list)
    for record in instance.get_run_records(RunsFilter(statuses=LIVE_RUN_STATUSES)):
        run = record.dagster_run
        key = run.tags.get(PARTITION_TAG)
        if key is not None and (run.job_name == job_name or asset_key in (run.asset_selection or ())):
            live[key].append(record)
    return dict(live)


def seconds_since_progress(record: RunRecord, now: float | None = None) -> float | None:
    """Seconds since the run last showed it is alive: its last landing (``mark_progress``), else its
    start (or creation, if it never started). None while QUEUED, because a queued run waits on
    concurrency limits, not on a worker that may have died.

    Progress, not age: a healthy run lands every landing interval however long it reads, so a long
    run is never presumed dead, and a dead one is noticed stale_run_seconds after its last landing
    rather than after its whole soft timeout."""
    run = record.dagster_run
    if run.status is DagsterRunStatus.QUEUED:
        return None
    since = max(record.start_time or record.create_timestamp.timestamp(), float(run.tags.get(PROGRESS_TAG, 0)))
    return (now or time.time()) - since


def mark_progress(instance: DagsterInstance, run_id: str) -> None:
    """Record that the run is alive: call after each landing (the sensor reads it, ``seconds_since_progress``)."""
    instance.add_run_tags(run_id, {PROGRESS_TAG: f"{time.time():.3f}"})


def ask_to_yield(instance: DagsterInstance, live: Iterable[RunRecord]) -> int:
    """Tag every live reader run that is not yet asked to yield its slot; returns how many were asked.

    A tag rather than a cancel: the run ends on its own between two landings, with its last chunk
    durable and its watermark persisted, so a yield costs one run start and never a re-read."""
    asked = 0
    for record in live:
        run = record.dagster_run
        if YIELD_TAG not in run.tags and run.status is not DagsterRunStatus.CANCELING:
            instance.add_run_tags(run.run_id, {YIELD_TAG: "true"})
            asked += 1
    return asked


def queued_runs_allowed(instance: DagsterInstance, tag: str) -> int | None:
    """How many runs tagged ``tag`` the instance's run queue starts at once: the lower of its limit
    for that tag (any value) and ``max_concurrent_runs``; None if it sets neither (or has no queue)."""
    config = instance.get_concurrency_config().run_queue_config
    if config is None:
        return None
    limits = [limit["limit"] for limit in config.tag_concurrency_limits or () if limit.get("key") == tag and "value" not in limit]
    if config.max_concurrent_runs is not None and config.max_concurrent_runs >= 0:
        limits.append(config.max_concurrent_runs)
    return min(limits, default=None)


@contextmanager
def drain_on_interrupt(drain: threading.Event) -> Iterator[None]:
    """While a read runs, SIGINT (Dagster's termination of a run) and SIGTERM set ``drain`` instead
    of interrupting it mid-landing; the previous handlers come back after. Signals reach the main
    thread only, where a run's step executes; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, lambda *_: drain.set()) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def end_canceled(instance: DagsterInstance, run_id: str, why: str) -> None:
    """End a drained run CANCELED: Dagster calls an interrupted run failed unless a termination was
    requested, and a bare SIGTERM (a deploy, a scale-down) requests none, so the run records the
    request itself before it raises the interruption."""
    run = instance.get_run_by_id(run_id)
    if run is not None and run.status not in CANCELLED:
        instance.report_run_canceling(run, message=f"asked to end (a signal): {why}")
    raise DagsterExecutionInterruptedError(why)


@contextmanager
def marking_progress(instance: DagsterInstance, run_id: str, every_s: float) -> Iterator[None]:
    """Mark the run alive every ``every_s`` from a thread while it works (a lake run: a cut may take
    longer than the sensor waits, a snapshot of a large table minutes): the sensor then presumes it
    dead only once its process is gone or stopped (SIGKILL, a lost machine, SIGSTOP), not while a
    long cut runs."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            try:
                mark_progress(instance, run_id)
            except DBAPIError as e:  # a storage busy for a moment (SQLite locked): the next beat goes on
                log.warning("run %s: could not mark it alive (%s); trying again in %gs", run_id, e, every_s)

    mark_progress(instance, run_id)
    thread = threading.Thread(target=beat, name=f"progress-{run_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def stop_if_presumed_dead(instance: DagsterInstance, run_id: str, stopping: str) -> DagsterRun | None:
    """Raise if this run was marked failed while it worked, else return it as the storage has it
    now (its tags and status: asked to yield, cancelled). Called before a run's next durable step.

    A sensor marks a run FAILURE once it has not shown it is alive for stale_run_seconds, and
    launches another. If it was alive after all (a stalled machine, a paused VM), going on would
    race its successor; ``stopping`` says what it stops before, and what it keeps."""
    run = instance.get_run_by_id(run_id)
    if run is not None and run.status is DagsterRunStatus.FAILURE:
        raise Failure(
            description=(
                f"run {run_id} is {run.status.value}: presumed dead by its sensor after CS_PLATFORM_STALE_RUN_SECONDS without a "
                f"sign of life, but {stopping}. Raise CS_PLATFORM_STALE_RUN_SECONDS if live runs are presumed dead on this machine."
            ),
            allow_retries=False,
        )
    return run
