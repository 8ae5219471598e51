"""``cs-platform-run-worker``: the processes that execute reader runs, forked warm from one parent.

The parent imports Dagster, the instance's storage, the Spanner client and the code location, and
builds the code location's definitions, before Celery's prefork pool forks ``--concurrency``
worker processes from it. A reader run then costs its worker no interpreter start and no import:
what Dagster's default launcher pays for each run in a fresh ``spawn`` interpreter. Each worker
process executes one run at a time (Dagster configures logging per run, so two in one process
would collide) and is replaced after ``--max-runs-per-process`` runs, by a new fork of the warm
parent, so what a run leaves behind (memory, a module's state) does not pile up.

The broker and queue come from the instance's ``dagster.yaml`` (``run_launcher``: the
:class:`~cs_platform.workers.launcher.ReaderRunLauncher` there), so the launcher and its workers
cannot disagree; DAGSTER_HOME names it, as for the daemon. The code location is built from this
process's environment once: a worker serves the code it started with, so after changing the
code or its settings, restart the workers with the code location (a Kubernetes Deployment rolls
them; docs/production.md).

    cs-platform-run-worker [--concurrency N] [--code-location cs_platform.definitions] [--connections held|per-statement]
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import logging
import os
import signal
import sys
from typing import Sequence

from billiard.process import active_children
from celery import Celery
from celery.signals import worker_before_create_process, worker_shutting_down
from celery.worker.state import active_requests
from dagster import DagsterInstance
from dagster._cli.api import _execute_run_command_body
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import unpack_value
from dagster._utils.interrupts import capture_interrupts
from dagster_celery.config import TASK_EXECUTE_JOB_NAME
from sqlalchemy.exc import SQLAlchemyError

from cs_platform import settings
from cs_platform.storage.location import is_local
from cs_platform.workers.connection_budget import TooManyConnectionsError, check_connection_budget
from cs_platform.workers.launcher import ReaderRunLauncher, report_termination

log = logging.getLogger("cs_platform.workers")


class WorkerSetupError(RuntimeError):
    """The worker cannot serve this instance; the message names the setting and the fix."""


def reader_launcher(instance: DagsterInstance) -> ReaderRunLauncher:
    launcher = instance.run_launcher
    if not isinstance(launcher, ReaderRunLauncher):
        raise WorkerSetupError(
            f"the instance at DAGSTER_HOME={os.environ.get('DAGSTER_HOME')} launches runs with {type(launcher).__name__}, "
            "so no reader run would reach this worker: set run_launcher in its dagster.yaml to "
            "module cs_platform.workers.launcher, class ReaderRunLauncher (docs/production.md, \"Warm run workers\")"
        )
    return launcher


def register_run_task(app: Celery, hold_connections: bool = True) -> None:
    """The task the launcher sends (``dagster-celery``'s name and arguments), executed as
    ``dagster api execute_run`` executes a run: inside ``capture_interrupts``, which takes SIGTERM
    and SIGINT for an interruption of the run. A termination that comes before the reader's step
    (which drains on either signal itself) then ends the run CANCELED, not the process."""

    @app.task(bind=True, name=TASK_EXECUTE_JOB_NAME, track_started=True)
    def execute_job(_task: object, execute_job_args_packed: dict) -> int:
        args = unpack_value(execute_job_args_packed, as_type=ExecuteRunArgs)
        with capture_interrupts():
            return _execute_run_command_body(
                instance=process_instance(hold_connections), run_id=args.run_id, write_stream_fn=lambda _event: None, set_exit_code_on_failure=True
            )


# How a worker process holds its storage's connections when asked to (dagster-webserver's defaults,
# but no statement timeout: a run's writes get none by default either).
HELD = {"statement_timeout": 0, "pool_recycle": 3600, "max_overflow": 20}


@functools.cache
def process_instance(hold_connections: bool = True) -> DagsterInstance:
    """The worker process's instance, made at its first run and kept for the next ones, as the
    daemon and the webserver keep theirs: made per run, it cost a tenth of a run's CPU (and on
    SQLite, make dev's storage, a fifth more: each new instance checks the storage's schema).
    Made after the fork, never in the parent, so no worker process shares another's connections;
    the process's end closes it.

    ``hold_connections``: its run and event storages keep one open connection each between
    statements, as dagster-webserver's do (``optimize_for_webserver``; a no-op on SQLite).
    dagster-postgres otherwise connects anew for every statement: in a profile of warm reader runs
    on PostgreSQL, a quarter of a worker process's CPU was psycopg2 connecting, and the server
    started a backend each time (docs/benchmarks.md, "Warm run workers"). The price is two
    connections per worker process that stay open (``--connections per-statement`` for a server
    with few to spare). On cs_platform's own storage (:mod:`cs_platform.workers.postgres_storage`,
    ``make stack``'s) its ``held_connections`` decides instead, for every process alike: this is
    for dagster-postgres's own storage, which Dagster's Helm chart writes."""
    instance = DagsterInstance.get()
    # By module, not isinstance: importing dagster-postgres (35 MB) into every parent, on SQLite too, to ask.
    if hold_connections and type(instance.run_storage).__module__.startswith("dagster_postgres."):
        instance.event_log_storage.optimize_for_webserver(**HELD)
        instance.run_storage.optimize_for_webserver(**HELD)
    return instance


def warm_up(code_location: str) -> None:
    """Import and build what every run needs, in the parent, before the pool forks: the code
    location's definitions (the module's ``defs``, as Dagster's loader finds it) and their
    repository, which a run's reconstruction then finds built."""
    module = importlib.import_module(code_location)
    module.defs.get_repository_def()
    if not is_local(settings.value(os.environ, "CS_PLATFORM_LANDING_ROOT")):
        # A run lands on an object store through pyarrow's filesystem, which it imports on first
        # use: here its pages (about 38 MB) are shared by every worker process, not copied into each.
        importlib.import_module("pyarrow.fs")


def freeze_before_each_fork() -> None:
    """Right before the pool forks a worker process (each of the first ones, and each replacement),
    everything the parent holds is put out of the collector's reach (CPython's ``gc.freeze``, for
    exactly this: fork after preloading). A worker process's collections would otherwise write to
    every object it shares with the parent, copying its pages. Before each fork, not once after
    :func:`warm_up`: Celery's worker machinery (its command line, the pool, the broker's transport,
    about 330 modules) is imported after it, as the worker starts, and was left to the collector.
    ``bench/run_launch.py``: 79 -> 72 MB of PSS a reader run, 8 worker processes and their parent
    522 -> 439 MB (docs/benchmarks.md, "Warm run workers")."""

    @worker_before_create_process.connect(weak=False)
    def _freeze(**_: object) -> None:
        gc.freeze()


def drain_on_shutdown() -> None:
    """When the parent is asked to stop (SIGTERM: a deploy, a scale-down, a pod's end; Ctrl-C), it
    records each of its runs CANCELING (``report_termination``: so that a run met after its read,
    while Dagster ends it, ends CANCELED and not FAILED) and passes SIGTERM on to its worker
    processes at once: each reader run drains (lands, persists its watermark, ends CANCELED) in
    seconds, and the parent waits for them, as Celery's warm shutdown does. Without it the parent
    would wait for every run's soft timeout (an hour by default), and Kubernetes would SIGKILL the
    pod first."""

    @worker_shutting_down.connect(weak=False)
    def _pass_on(**_: object) -> None:
        children = [child.pid for child in active_children() if child.pid]
        try:
            with DagsterInstance.get() as instance:
                for run_id in runs_in(children):
                    run = instance.get_run_by_id(run_id)
                    if run is not None:
                        report_termination(instance, run, "The run worker is stopping (a deploy, a scale-down): the run drains.")
        except SQLAlchemyError as e:  # the storage out of reach: the runs drain all the same
            log.warning("could not record the runs of the stopping workers as canceling (%s)", e)
        finally:
            for pid in children:
                os.kill(pid, signal.SIGTERM)


def runs_in(worker_pids: list[int]) -> list[str]:
    """The runs these worker processes execute, as Celery's parent knows its accepted tasks."""
    return [
        unpack_value(request.kwargs["execute_job_args_packed"], as_type=ExecuteRunArgs).run_id
        for request in list(active_requests) if request.worker_pid in worker_pids
    ]


def worker_argv(queue: str, concurrency: int, max_runs_per_process: int) -> list[str]:
    return [
        "worker", "--queues", queue, "--concurrency", str(concurrency), "--pool", "prefork",
        "--max-tasks-per-child", str(max_runs_per_process), "--optimization", "fair",
        # Nothing between workers to gossip or synchronize: each takes runs from the broker alone.
        "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel", "INFO",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return serve(argv)
    except (WorkerSetupError, TooManyConnectionsError) as e:
        sys.exit(f"cs-platform-run-worker: {e}")


def serve(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="worker processes, each one run at a time (default: CS_PLATFORM_MAX_PARALLEL_READS)")
    parser.add_argument("--code-location", default="cs_platform.definitions", help="the module the code location loads from")
    parser.add_argument("--max-runs-per-process", type=int, default=100)
    parser.add_argument("--connections", choices=("held", "per-statement"), default="held",
                        help="each worker process keeps one open connection to the run and to the event storage (held), "
                        "or connects for each statement as Dagster does by default (per-statement: fewer connections, more CPU)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # each run's instance checks its schema: not news
    concurrency = args.concurrency or settings.value(os.environ, "CS_PLATFORM_MAX_PARALLEL_READS")
    with DagsterInstance.get() as instance:  # imports the instance's storage here, once
        launcher = reader_launcher(instance)
        app, queue = launcher.celery, launcher.queue
        check_connection_budget(instance, concurrency, hold_connections=args.connections == "held")
    register_run_task(app, hold_connections=args.connections == "held")
    drain_on_shutdown()
    warm_up(args.code_location)
    freeze_before_each_fork()
    log.info("run workers: %d processes on queue %s, code location %s", concurrency, queue, args.code_location)
    app.worker_main(worker_argv(queue, concurrency, args.max_runs_per_process))
    return 0


if __name__ == "__main__":
    sys.exit(main())
