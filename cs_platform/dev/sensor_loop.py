"""Run a stream's sensor and the runs it requests, the way the Dagster daemon does, without one.

For tests, the demo and benchmarks on a real Dagster instance: each tick evaluates the real sensor
with its cursor, adds the dynamic partitions it asks for, skips run keys that were already
launched, and executes each requested run in a worker process (``execute_in_process`` against the
same instance, as Dagster's default run launcher gives each run its own process). Runs therefore
appear in the instance exactly like daemon-launched ones, and the sensor sees them live.

Worker processes, not threads: Dagster reconfigures ``logging`` when a run starts, which deadlocks
runs executing concurrently in one process. Workers rebuild the definitions with
``definitions_factory`` (a module-level function such as
``cs_platform.definitions.build_definitions``), from this process's environment at the loop's start.

Workers are forked from a ``forkserver`` that imported Dagster and the code location once: a worker
only builds the definitions and opens the instance (about 0.5 CPU-s), where ``spawn`` re-imported
everything in each (1.5-2 s of CPU per worker; the test suite starts over a hundred). Not a plain
``fork``: this process has threads (gRPC's, Spark's gateway) that a fork would copy mid-lock. The
server keeps the environment it started with, so each worker takes this process's environment as
its own first.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from dagster import (
    DagsterInstance,
    Definitions,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    build_sensor_context,
    partition_loading_context,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData
from dagster._core.instance.ref import InstanceRef
from google.api_core import exceptions as gexc

from cs_platform.dev.deadline import Deadline
from cs_platform.errors import TransientError

log = logging.getLogger(__name__)

DefinitionsFactory = Callable[[], Definitions]
T = TypeVar("T")
TRANSIENT = (TransientError, gexc.Aborted, gexc.ServiceUnavailable, gexc.DeadlineExceeded)


@dataclass
class LoopStats:
    ticks: int = 0
    launched: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped_run_keys: int = 0
    failed_ticks: int = 0  # ticks that raised a transient error (the daemon evaluates the sensor again next interval)
    launch_times: dict[str, float] = field(default_factory=dict)  # run key -> wall clock of launch


# What every worker imports anyway, loaded once by the fork server. Dagster's SQLite storage too: a
# worker's DagsterInstance.from_ref imports it (SQLAlchemy and Alembic with it), which was two thirds
# of a worker's start (1.43 CPU-s of it before, 0.49 after, profiled in the worker). Not
# ``cs_platform.definitions``, which builds its definitions on import from the server's environment
# (a bad setting there would stop the server); not PySpark, which a reader run never loads.
PRELOADED = (
    "dagster",
    "dagster._core.storage.sqlite_storage",
    "google.cloud.spanner",
    "cs_platform.defs.change_stream",
    "cs_platform.defs.resources",
)

_worker_definitions: Definitions | None = None
_worker_instance: DagsterInstance | None = None


def _worker_context() -> multiprocessing.context.BaseContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))  # taken when the server starts: this process's first loop
    return context


def _init_worker(
    factory: DefinitionsFactory, instance_ref: InstanceRef, log_level: int, environ: dict[str, str], cwd: str
) -> None:
    global _worker_definitions, _worker_instance
    os.environ.clear()
    os.environ.update(environ)
    time.tzset()  # TZ may differ from the server's
    os.chdir(cwd)
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("google", "alembic"):
        logging.getLogger(noisy).setLevel(max(log_level, logging.WARNING))
    _worker_definitions = factory()
    _worker_instance = DagsterInstance.from_ref(instance_ref)


def _execute_run(job_name: str, partition_key: str, tags: dict) -> tuple[str, bool]:
    job = _worker_definitions.resolve_job_def(job_name)
    result = job.execute_in_process(
        instance=_worker_instance,
        partition_key=partition_key,
        tags=tags,
        raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},  # events still go to the instance
    )
    return result.run_id, result.success


def evaluate_sensor(
    definitions: Definitions, instance: DagsterInstance, sensor: SensorDefinition, cursor: str | None
) -> SensorExecutionData:
    """One evaluation of the real sensor, with what the daemon gives it; launches nothing."""
    with (
        partition_loading_context(dynamic_partitions_store=instance),
        build_sensor_context(
            instance=instance,
            instance_ref=instance.get_ref(),  # lets run requests name partitions added this tick
            cursor=cursor,
            sensor_name=sensor.name,
            # Only what the sensor requires, as the daemon does (not a Spark session per tick).
            resources={k: v for k, v in definitions.resources.items() if k in sensor.required_resource_keys},
            definitions=definitions,
        ) as context,
    ):
        return sensor.evaluate_tick(context)


# A tick every second, where the daemon evaluates a sensor every 5 s (dev settings) or 30 s
# (Dagster's default). A tick (the sensor's queries of the metadata table and of the instance, and
# the caller's ``done()``) costs about 0.03 CPU-s here, and more in the emulator; the test suite,
# short of CPU, spends about half an hour in sensor loops: at two ticks a second that was about 50
# CPU-s more, for runs launched at most half a second sooner.
TICK_INTERVAL_S = 1.0


class SensorLoop:
    def __init__(
        self,
        definitions_factory: DefinitionsFactory,
        instance: DagsterInstance,
        sensor_name: str,
        max_workers: int = 4,
        worker_log_level: int = logging.INFO,
        tick_interval_s: float = TICK_INTERVAL_S,
        cursor: str | None = None,
    ) -> None:
        self.definitions = definitions_factory()
        self.instance = instance
        self.sensor = self.definitions.resolve_sensor_def(sensor_name)
        self.cursor = cursor
        self.tick_interval_s = tick_interval_s
        self.stats = LoopStats()
        self._pool = ProcessPoolExecutor(
            max_workers=max_workers,
            mp_context=_worker_context(),
            initializer=_init_worker,
            initargs=(definitions_factory, instance.get_ref(), worker_log_level, dict(os.environ), os.getcwd()),
        )
        self._runs: list[Future] = []

    def tick(self) -> SensorExecutionData | None:
        """One evaluation of the sensor and the runs it requests. A tick that fails with a transient
        error (``TransientError``, Spanner's ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED) returns None and
        keeps the cursor, as the daemon logs a failed tick and evaluates the sensor again at the next
        interval; any other error is raised: it would fail every tick."""
        try:
            result = evaluate_sensor(self.definitions, self.instance, self.sensor, self.cursor)
        except TRANSIENT as e:
            self.stats.failed_ticks += 1
            log.warning("sensor tick failed, evaluated again next tick: %s", e)
            return None
        self.stats.ticks += 1
        if result.cursor is not None:
            self.cursor = result.cursor
        for request in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for run_request in result.run_requests or []:
            self._launch(run_request)
        return result

    def _launch(self, request: RunRequest) -> None:
        tags = {**request.tags, "dagster/sensor_name": self.sensor.name, "dagster/run_key": request.run_key}
        already = RunsFilter(tags={"dagster/sensor_name": self.sensor.name, "dagster/run_key": request.run_key})
        if self.instance.get_runs_count(already):
            self.stats.skipped_run_keys += 1  # the daemon never launches a run key twice
            return
        self.stats.launched += 1
        self.stats.launch_times[request.run_key] = time.time()
        future = self._pool.submit(_execute_run, self.sensor.job_name, request.partition_key, tags)
        future.add_done_callback(self._count)
        self._runs.append(future)

    def _count(self, future: Future) -> None:
        if future.cancelled():
            return
        if (error := future.exception()) is not None:  # the worker itself died or was ended (``close``)
            self.stats.failed += 1
            log.warning("a run's worker process failed: %r", error)
            return
        run_id, success = future.result()
        if success:
            self.stats.succeeded += 1
        else:
            self.stats.failed += 1
            log.warning("run %s failed; the sensor will re-launch its partition", run_id)

    def pending_runs(self) -> int:
        self._runs = [f for f in self._runs if not f.done()]
        return len(self._runs)

    def run_until(self, done: Callable[[], bool], timeout_s: float, drain: bool = True) -> None:
        """Tick until ``done()`` holds and (with ``drain``) no run is executing; fail when
        ``timeout_s`` (scaled by the machine's load, see ``deadline``) is spent. A stream without an
        end always has runs in flight: pass ``drain=False`` (they finish when the loop closes)."""
        deadline = Deadline(timeout_s)
        while not deadline.expired():
            self.tick()
            finished = done()  # called every tick: callers use it for progress too
            if finished and not (drain and self.pending_runs()):
                return
            time.sleep(self.tick_interval_s)
        raise TimeoutError(f"sensor loop not done ({deadline.describe()}): {self.stats}")

    def run_beside(self, work: Callable[[], T], timeout_s: float) -> T:
        """``work()`` in a thread while the loop ticks, as the daemon goes on launching reads while
        a lake run cuts; its result (or its error). A lake step run between ticks instead stopped
        the reads for as long as it took (8 minutes at a load of 8 per core), and the partitions
        created meanwhile were then read one generation at a time, minutes behind."""
        pool = ThreadPoolExecutor(1, "beside-the-loop")
        try:
            done = pool.submit(work)
            self.run_until(done.done, timeout_s, drain=False)
            return done.result()
        finally:
            pool.shutdown(wait=False)  # past the deadline, the TimeoutError, not a wait for the work

    def run_for(self, seconds: float) -> None:
        """Tick for ``seconds``, then stop launching and let the runs in flight finish."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(self.tick_interval_s)
        self.wait_for_runs()

    def wait_for_runs(self, timeout_s: float = 120) -> None:
        deadline = Deadline(timeout_s)
        while self.pending_runs():
            if deadline.expired():
                raise TimeoutError(f"{len(self._runs)} runs still executing ({deadline.describe()})")
            time.sleep(0.1)

    def close(self, timeout_s: float = 120) -> None:
        """Launch nothing more, let the runs in flight end (they read until their soft timeout),
        and end the worker processes of any still running after ``timeout_s`` (scaled by the load,
        ``deadline``): a stuck run must not outlive its loop. One did: waiting on it forever, a
        test ran into its timeout and left four workers spinning for the rest of the session."""
        for future in self._runs:
            future.cancel()  # those not started yet
        deadline = Deadline(timeout_s)
        while self.pending_runs() and not deadline.expired():
            time.sleep(0.1)
        if self.pending_runs():
            log.warning("%d runs still executing after %s: ending their worker processes", len(self._runs), deadline.describe())
            for process in list(self._pool._processes.values()):  # no public way before Python 3.14's terminate_workers
                process.kill()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "SensorLoop":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # Leaving on an error (a wait that timed out, a failed check), the runs in flight are not
        # waited for: at a load of 8 per core the scaled wait took the rest of a test's time, and
        # pytest's timeout then hid the error that ended the block.
        self.close(timeout_s=120 if exc_type is None else 5)
