"""The launcher and the worker on their own, with a real Redis and a real instance: which runs go to
the workers, what run monitoring reads of a worker's task, and a worker refusing an instance whose
runs would never reach it. What runs on the workers keeps (termination, a killed worker process,
restarts) is proven on live runs of the production stack (``test_production_stack``)."""

import os
import subprocess
import sys
import time

import pytest
import sqlalchemy
from dagster import DagsterEvent, DagsterEventType, DagsterInstance, DagsterRunStatus, EventLogEntry, job, reconstructable
from dagster._core.errors import DagsterInvalidConfigError
from dagster._core.launcher import LaunchRunContext, WorkerStatus
from dagster._core.test_utils import create_run_for_test
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

from cs_platform.defs.tags import READER_TAG
from cs_platform.dev.embedded import instance_yaml
from cs_platform.dev.postgres import postgres_server
from cs_platform.dev.redis import redis_server
from cs_platform.dev.run_workers import BROKER_SETTING, use_run_workers
from cs_platform.dev.stack import dagster_yaml
from cs_platform.workers.launcher import QUEUE, ReaderRunLauncher, report_termination
from cs_platform.workers.worker import WorkerSetupError, process_instance, reader_launcher


@job
def a_job():
    pass


@pytest.fixture
def broker(tmp_path, monkeypatch):
    with redis_server(tmp_path / "redis.log") as url:
        monkeypatch.setenv(BROKER_SETTING, url)
        yield url


@pytest.fixture
def instance(tmp_path, broker):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_yaml(4))
    use_run_workers(home / "dagster.yaml")
    with DagsterInstance.from_config(str(home)) as instance:
        yield instance


def test_reader_runs_go_to_the_workers_queue_and_others_to_the_default_launcher(instance):
    launcher = instance.run_launcher
    assert isinstance(launcher, ReaderRunLauncher)
    origin = reconstructable(a_job).get_python_origin()  # what the task carries to the worker: where the job's code is
    reader = create_run_for_test(instance, job_name="a_job", tags={READER_TAG: "BankStream"}, job_code_origin=origin)
    launcher.launch_run(LaunchRunContext(dagster_run=reader, workspace=None))
    task_id = instance.get_run_by_id(reader.run_id).tags[DAGSTER_CELERY_TASK_ID_TAG]
    with launcher.celery.connection_for_read() as connection:  # the message waits in the workers' queue
        assert connection.default_channel.client.llen(QUEUE) == 1
    assert launcher.celery.AsyncResult(task_id).state == "PENDING"
    # Any other run goes to Dagster's default launcher, which starts it through a code server.
    lake = create_run_for_test(instance, job_name="bank_stream_lake")
    with pytest.raises(Exception, match="DefaultRunLauncher requires a workspace"):
        launcher.launch_run(LaunchRunContext(dagster_run=lake, workspace=None))
    assert DAGSTER_CELERY_TASK_ID_TAG not in instance.get_run_by_id(lake.run_id).tags


@pytest.mark.parametrize(
    "state, status",
    [("STARTED", WorkerStatus.RUNNING), ("REVOKED", WorkerStatus.RUNNING), ("SUCCESS", WorkerStatus.SUCCESS),
     ("FAILURE", WorkerStatus.FAILED), ("PENDING", WorkerStatus.UNKNOWN)],
)
def test_run_monitoring_reads_the_state_of_a_runs_task(instance, state, status):
    """REVOKED is a run still draining after its termination (its task is revoked at once)."""
    launcher = instance.run_launcher
    run = create_run_for_test(instance, job_name="bank_stream_read_partition", tags={READER_TAG: "BankStream", DAGSTER_CELERY_TASK_ID_TAG: f"task-{state}"})
    if state != "PENDING":
        result = RuntimeError("worker lost") if state == "FAILURE" else None
        launcher.celery.backend.store_result(f"task-{state}", result, state)
    assert launcher.check_run_worker_health(run).status is status
    other = create_run_for_test(instance, job_name="bank_stream_lake")
    assert launcher.check_run_worker_health(other).status is WorkerStatus.RUNNING  # the default launcher's: not checked


def test_a_termination_records_the_run_canceling_first_and_never_overwrites_its_end(instance):
    """Dagster ends an interrupted run CANCELED only if its status says a termination was asked
    for: the launcher records that before it signals, so a signal that meets a run after its read
    (no drain to record it) does not fail the run. A run that ended as it was terminated keeps its
    end: here its RUN_SUCCESS is stored but its status write is not yet seen, as when the
    launcher's read of the status came first."""
    live = create_run_for_test(instance, job_name="bank_stream_read_partition", status=DagsterRunStatus.STARTED)
    report_termination(instance, live, "asked to end")
    assert instance.get_run_by_id(live.run_id).status is DagsterRunStatus.CANCELING

    ending = create_run_for_test(instance, job_name="bank_stream_read_partition", status=DagsterRunStatus.STARTED)
    success = DagsterEvent(event_type_value=DagsterEventType.RUN_SUCCESS.value, job_name=ending.job_name, message="ended")
    instance.event_log_storage.store_event(
        EventLogEntry(error_info=None, level="DEBUG", user_message="", run_id=ending.run_id, timestamp=time.time(), dagster_event=success)
    )
    report_termination(instance, ending, "asked to end")
    assert instance.get_run_by_id(ending.run_id).status is DagsterRunStatus.SUCCESS

    ended = create_run_for_test(instance, job_name="bank_stream_read_partition", status=DagsterRunStatus.SUCCESS)
    report_termination(instance, ended, "asked to end")
    assert instance.get_run_by_id(ended.run_id).status is DagsterRunStatus.SUCCESS


def test_a_worker_refuses_an_instance_that_does_not_send_it_runs(tmp_path):
    (tmp_path / "dagster.yaml").write_text(instance_yaml(4))
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        with pytest.raises(WorkerSetupError, match="set run_launcher in its dagster.yaml to module cs_platform.workers.launcher"):
            reader_launcher(instance)


def test_other_runs_go_to_the_launcher_others_names_checked_at_load(tmp_path, broker):
    """On Kubernetes every run but reader runs is a Job (dagster_k8s's K8sRunLauncher); here Dagster's
    in-memory launcher stands for it, which runs the job as it is launched."""
    home = tmp_path / "home"
    home.mkdir()
    others = "\n    others: {module: dagster._core.launcher.sync_in_memory_run_launcher, class: SyncInMemoryRunLauncher}\n"
    (home / "dagster.yaml").write_text(instance_yaml(4))
    use_run_workers(home / "dagster.yaml")
    (home / "dagster.yaml").write_text((home / "dagster.yaml").read_text().rstrip("\n") + others)
    with DagsterInstance.from_config(str(home)) as instance:
        origin = reconstructable(a_job).get_python_origin()
        lake = create_run_for_test(instance, job_name="a_job", job_code_origin=origin)
        instance.run_launcher.launch_run(LaunchRunContext(dagster_run=lake, workspace=None))
        assert instance.get_run_by_id(lake.run_id).status is DagsterRunStatus.SUCCESS
        assert DAGSTER_CELERY_TASK_ID_TAG not in instance.get_run_by_id(lake.run_id).tags
    # A wrong config of the other launcher fails the instance's load, naming what is missing.
    k8s = "\n    others: {module: dagster_k8s, class: K8sRunLauncher, config: {job_namespace: dagster}}\n"
    (home / "dagster.yaml").write_text((home / "dagster.yaml").read_text().replace(others, k8s))
    with DagsterInstance.from_config(str(home)) as instance, pytest.raises(DagsterInvalidConfigError, match="instance_config_map"):
        instance.run_launcher  # noqa: B018 (the launcher is built on first use)


@pytest.mark.parametrize("landing_root, preloaded", [("gs://a-bucket/landing", True), ("file:///srv/landing", False)])
def test_the_warm_parent_imports_the_filesystem_its_runs_land_through(landing_root, preloaded):
    """Imported in the parent before the fork, pyarrow's filesystem (about 38 MB) is shared by every
    worker process; imported by each run on first use, it was copied into each. A local root needs
    none of it."""
    code = "import sys; from cs_platform.workers.worker import warm_up; warm_up('cs_platform.definitions'); print('pyarrow.fs' in sys.modules)"
    env = {**os.environ, "CS_PLATFORM_LANDING_ROOT": landing_root, "CS_PLATFORM_LAKE_ROOT": "gs://a-bucket/lake"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.split()[-1] == str(preloaded), done.stderr[-2000:]


def test_the_warm_parent_freezes_what_it_holds_before_each_fork():
    """What the parent imports after warm_up (Celery's worker machinery, as the worker starts) is
    frozen too: the pool announces each fork (``worker_before_create_process``, sent by Celery's
    prefork pool in the parent right before it creates a worker process), and then every object
    the parent holds is out of the collector's reach, so a worker process's collections copy none
    of its pages."""
    code = (
        "import gc; from celery.signals import worker_before_create_process; from cs_platform.workers.worker import freeze_before_each_fork\n"
        "freeze_before_each_fork(); before = gc.get_freeze_count()\n"
        "import xml.dom.minidom  # imported after warm_up, as Celery's worker machinery is\n"
        "held = [xml.dom.minidom.parseString(f'<a n=\"{i}\"/>') for i in range(1000)]\n"
        "worker_before_create_process.send(sender=None)\n"
        "print(gc.get_freeze_count() - before, sum(gc.get_count()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    frozen, left_to_the_collector = map(int, done.stdout.split())
    assert frozen > 1000 and left_to_the_collector < 10, done.stdout


def test_a_worker_process_holds_its_storage_connections_on_postgres_unless_told_not_to(tmp_path, monkeypatch):
    """On dagster-postgres's own storage (what Dagster's Helm chart writes), a worker process's
    instance keeps one connection to its event storage between a run's events, where
    dagster-postgres connects anew for each; with ``--connections per-statement`` it connects for
    each, as Dagster does by default. (cs_platform's storage holds them itself: test_postgres_storage.py.)"""
    home = tmp_path / "home"
    home.mkdir()
    with postgres_server(tmp_path) as url:
        (home / "dagster.yaml").write_text(dagster_yaml(url, held_connections=None))
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        opened = {}
        for hold in (True, False):
            process_instance.cache_clear()
            instance = process_instance(hold)
            try:
                connects = []
                sqlalchemy.event.listen(instance.event_log_storage._engine, "connect", lambda *_: connects.append(1))
                run = create_run_for_test(instance, job_name=a_job.name)
                for n in range(20):
                    instance.report_engine_event(f"event {n}", run)
                opened[hold] = len(connects)
            finally:
                instance.dispose()
        process_instance.cache_clear()
    assert opened == {True: 1, False: 20}
