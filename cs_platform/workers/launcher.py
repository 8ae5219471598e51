"""The instance's run launcher: reader runs on warm run workers, every other run by another
launcher (Dagster's default, or the one ``others`` names).

A reader run (tagged ``cs_platform/reader``, as every run of a stream's reader job is) goes to a
queue of the broker as a ``dagster-celery`` task; a worker process (``cs_platform.workers.worker``)
that imported Dagster and the code location before it forked executes it. The lake, rebuild,
maintenance and cleanup runs, rare and long, go to the other launcher: by default Dagster's own,
which starts them in the code server's new processes; on Kubernetes ``dagster_k8s``'s
``K8sRunLauncher``, a Job each, sized by its ``dagster-k8s/config`` tag (a Spark driver is not
something to keep in a shared worker, nor in the code location's pod). The same split dagster PR
#34152 proposes for routing runs by tag.

    run_launcher:
      module: cs_platform.workers.launcher
      class: ReaderRunLauncher
      config:
        broker: {env: CS_PLATFORM_RUN_BROKER}   # redis://… (with a password) or redis+socket://…
        others:                                 # optional: the launcher of every other run
          module: dagster_k8s
          class: K8sRunLauncher
          config: {instance_config_map: dagster-instance, ...}

Termination (the UI, ``dagster/max_runtime``, a worker's stop) first records the run CANCELING, then
revokes the task with SIGTERM: the reader drains as it does under the default launcher's interrupt
(``defs.runs.drain_on_interrupt``), lands, persists its watermark and ends CANCELED; a run signalled
after its read ended, while Dagster ends its step, ends CANCELED too (``report_termination``). Run monitoring asks the broker's result store for each reader run's
task: a worker process that died mid-run (SIGKILL, out of memory) leaves its task FAILURE, and the
run is marked FAILED at the next pass, so the partition sensor relaunches its partition.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Mapping

import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DagsterRunStatus, Field, Permissive, Shape, StringSource
from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, LaunchRunContext, RunLauncher, WorkerStatus
from dagster._serdes import ConfigurableClass, ConfigurableClassData
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

from cs_platform.defs.tags import READER_TAG

QUEUE = "cs_platform_readers"
# A run that is still draining after its task was revoked (a SIGTERM): its task says REVOKED at
# once, the run ends itself, and a run that hangs is ended by run monitoring's cancel timeout.
ALIVE_TASK_STATES = {"STARTED": WorkerStatus.RUNNING, "REVOKED": WorkerStatus.RUNNING, "SUCCESS": WorkerStatus.SUCCESS}


def celery_settings() -> dict[str, Any]:
    """The Celery settings of both sides: the launcher (which sends) and the workers (which take)."""
    return {
        "worker_prefetch_multiplier": 1,  # a worker process takes one run at a time, never holds a second
        "task_track_started": True,  # run monitoring tells a run that has started from one still queued
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,  # the runs log through Dagster, the worker through ours
        "worker_redirect_stdouts": False,  # a run's console lines as they are, not as Celery warnings
        "result_expires": 7 * 24 * 3600,  # run monitoring reads a task's state as long as its run is live
    }


class ReaderRunLauncher(RunLauncher, ConfigurableClass):
    """Reader runs to warm workers through ``broker``; other runs to ``others`` (by default
    :class:`DefaultRunLauncher`)."""

    def __init__(
        self, broker: str, queue: str = QUEUE, drain_wait_seconds: float = 60, others: Mapping[str, Any] | None = None,
        inst_data: ConfigurableClassData | None = None,
    ):
        self._inst_data = inst_data
        self.queue = queue
        self.drain_wait_seconds = drain_wait_seconds
        self.readers = CeleryRunLauncher(default_queue=queue, broker=broker, backend=broker, config_source=celery_settings())
        self.others = other_launcher(others) if others else DefaultRunLauncher()
        super().__init__()

    @property
    def celery(self):
        """The Celery app runs are sent with: the workers take them from the same one."""
        return self.readers.celery

    def register_instance(self, instance: DagsterInstance) -> None:
        super().register_instance(instance)
        self.readers.register_instance(instance)
        self.others.register_instance(instance)

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {
            "broker": Field(StringSource, description="The broker's URL (Redis), also its result store: redis://:password@host:port/0 or redis+socket:///path"),
            "queue": Field(StringSource, is_required=False, default_value=QUEUE, description="The queue reader runs go to; the workers take from it"),
            "drain_wait_seconds": Field(
                float, is_required=False, default_value=60.0,
                description="How long run monitoring waits for a reader run past its dagster/max_runtime to drain before it is marked FAILED",
            ),
            "others": Field(
                Shape({"module": str, "class": str, "config": Field(Permissive(), is_required=False, default_value={})}),
                is_required=False,
                description=(
                    "The launcher of every run but reader runs (lake, rebuild, maintenance, cleanup), named as dagster.yaml's "
                    "run_launcher names one; Dagster's DefaultRunLauncher when unset. On Kubernetes: dagster_k8s's K8sRunLauncher"
                ),
            ),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> "ReaderRunLauncher":
        return cls(inst_data=inst_data, **config_value)

    def launch_run(self, context: LaunchRunContext) -> None:
        if READER_TAG in context.dagster_run.tags:
            self.readers.launch_run(context)
        else:
            self.others.launch_run(context)

    def terminate(self, run_id: str) -> bool:
        """Ask a reader run to drain: record it CANCELING (``report_termination``), then SIGTERM to
        its worker process (its task revoked). From the UI this returns at once. From run
        monitoring past ``dagster/max_runtime`` (which reports the run CANCELING itself first) it
        waits up to ``drain_wait_seconds`` for the drain: False once the run ended by itself
        (landed, persisted, CANCELED), which Dagster then leaves as it is; True if it did not end,
        which Dagster then marks FAILED, as it should a hung run (its partition is relaunched; the
        metadata table's owner check fences the hung one)."""
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        if DAGSTER_CELERY_TASK_ID_TAG not in run.tags:
            return self.others.terminate(run_id)
        from_run_monitoring = run.status is DagsterRunStatus.CANCELING
        report_termination(self._instance, run, "Sending a termination request to the run's worker process: it drains.")
        self.readers.terminate(run_id)
        if not from_run_monitoring:
            return True
        deadline = time.monotonic() + self.drain_wait_seconds
        while time.monotonic() < deadline:
            run = self._instance.get_run_by_id(run_id)
            if run is None or run.is_finished:
                return False
            time.sleep(0.5)
        return True

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        """A reader run's worker by its task's state; any other run as its launcher checks it (a
        K8sRunLauncher's Job), or not at all if it cannot (the default launcher), as without this
        launcher."""
        task_id = run.tags.get(DAGSTER_CELERY_TASK_ID_TAG)
        if task_id is None:
            if self.others.supports_check_run_worker_health:  # K8sRunLauncher: the Job's state
                return self.others.check_run_worker_health(run)
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"started by {type(self.others).__name__}, which cannot tell: not checked")
        state = self.celery.AsyncResult(task_id).state
        if state in ALIVE_TASK_STATES:
            return CheckRunHealthResult(ALIVE_TASK_STATES[state])
        if state == "FAILURE":
            return CheckRunHealthResult(WorkerStatus.FAILED, "its run worker's task failed: the worker process died (SIGKILL, out of memory) or the task raised")
        return CheckRunHealthResult(WorkerStatus.UNKNOWN, f"its run worker's task is {state}")

    def get_run_worker_debug_info(self, run: DagsterRun, include_container_logs: bool | None = True) -> str | None:
        if DAGSTER_CELERY_TASK_ID_TAG in run.tags:
            return self.readers.get_run_worker_debug_info(run, include_container_logs)
        return self.others.get_run_worker_debug_info(run, include_container_logs)

    def dispose(self) -> None:
        self.readers.dispose()
        self.others.dispose()

    def join(self, timeout: int = 30) -> None:
        self.others.join(timeout)


def other_launcher(named: Mapping[str, Any]) -> RunLauncher:
    """The launcher ``others`` names, built and its config checked as Dagster builds the instance's
    own (a wrong config fails the instance's load, naming the field)."""
    return ConfigurableClassData(named["module"], named["class"], yaml.safe_dump(dict(named.get("config") or {}))).rehydrate(as_type=RunLauncher)


RUN_ENDS = {DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}


def report_termination(instance: DagsterInstance, run: DagsterRun, why: str) -> None:
    """Record a STARTED run CANCELING before its process is signalled, as Dagster's default
    launcher does: Dagster ends an interrupted run CANCELED only if its status says a termination
    was asked for, else FAILED ("interrupted unexpectedly"). The reader's drain records it too, but
    a signal that meets a run after its read ended, while Dagster ends its step, finds no drain to
    record it: without this, a termination from the UI or a worker's stop then failed a run that had
    landed and persisted everything (and alerted on it).

    ``run`` is the run as the caller just read it. A run that ends between that read and the write
    of CANCELING has its end overwritten (the status is the last write): its end is in its event
    log, so it is put back."""
    if run.status is not DagsterRunStatus.STARTED:
        return
    instance.report_run_canceling(run, message=why)
    ends = instance.get_records_for_run(run.run_id, of_type=RUN_ENDS).records
    if ends:
        entry = ends[-1].event_log_entry
        instance.run_storage.handle_run_event(run.run_id, entry.dagster_event, datetime.fromtimestamp(entry.timestamp, timezone.utc))
