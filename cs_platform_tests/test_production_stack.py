"""`make stack` end to end: the production shape, every part real, only configuration changed.

The bank on the Spanner emulator (accounts and transfers before the stream's start, partitions that
split and merge every 20-40 s, as in `make stack`), transfers for 20 seconds and until the stream
has split and merged, landing and lake on gs:// through a GCS emulator, lake runs whose tasks run on a Spark
standalone cluster's executors, and every run launched by dagster-daemon from an instance on
PostgreSQL (the run queue with its tag concurrency limits). Then:

- no committed mod is lost, in landing or in the changelog, and the changelog holds each change once;
- every published cut, the snapshot at the start included, is a consistent bank equal to the source;
- every lake run's Spark tasks ran in executor processes (Spark's event logs), and the runs are the
  daemon's, recorded in PostgreSQL;
- a Prometheus scrape of the stack's exporter, while the stream runs, reports the stream as its
  metadata table, its manifest and its landing directory on gs:// stand;
- reader runs execute on warm run workers, and keep every guarantee while the stream is written
  (``workers/warm_runs.py``): terminated from the UI or past ``dagster/max_runtime``, a run drains
  and ends CANCELED; a worker process SIGKILLed mid-read leaves its run FAILED by run monitoring
  and its partition relaunched; a run goes on through a daemon restart and a code location reload.
  The checks above then prove that none of this lost or repeated a change.
"""

import json
import os
import threading
import time
import urllib.request
from datetime import datetime, timedelta

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG
from dagster_postgres import PostgresRunStorage
from dagster_postgres.utils import DagsterPostgresException
from prometheus_client.parser import text_string_to_metric_families

from cs_platform.changestream.metadata import PartitionMetadataStore, lineage, utc_now
from cs_platform.defs.resources import change_stream_resource_key, configured_resources
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.embedded import STREAM
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.oracle import changelog_mods, check_bank_cut, committed, landed, spread
from cs_platform.dev.stack import Stack, dagster_yaml, production_stack
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform_tests.workers import warm_runs

# Partitions churn as in `make stack`: every 20-40 s. Each generation of partitions up to the last
# commit is a round of reader runs that the daemon launches (a run process of about 4 CPU-s each)
# before a cut can pass that commit, and the writer writes until the readers have met a split and a
# merge: the later the readers meet them, the more generations there are to catch up. At 4-8 s and
# then 8-16 s, in CI on 2026-11-29 at a load of 10 or so, the runs never caught up in 30 minutes (a
# fresh clone the day before: 932 s and 1,068 s).
WRITE_SECONDS = 20


def has_split_and_merged(store: PartitionMetadataStore) -> bool:
    if not store.table_exists():  # the partition sensor's first tick creates it
        return False
    crossed = lineage(store.all())
    return crossed.splits >= 1 and crossed.merges >= 1


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """One Prometheus scrape: each sample by name and labels."""
    with urllib.request.urlopen(url, timeout=60) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def check_scrape(scraped: dict, start: datetime, cut: datetime, after: datetime) -> None:
    """What the exporter says of a live stream that started at ``start``, scraped once ``cut`` was
    published and before ``after``."""
    stream = (("stream", STREAM),)

    def value(name: str, labels: tuple = stream) -> float:
        assert (f"cs_platform_{name}", labels) in scraped, f"no cs_platform_{name}{dict(labels)} in {sorted(scraped)}"
        return scraped[(f"cs_platform_{name}", labels)]

    assert value("scrape_error") == 0
    states = {state: value("partitions", (("state", state), *stream)) for state in ("CREATED", "SCHEDULED", "RUNNING", "FINISHED")}
    assert states["FINISHED"] >= 1 and sum(states.values()) > states["FINISHED"], states  # live, and it split and merged
    since_start = (after - start).total_seconds()
    assert 0 <= value("low_watermark_lag_seconds") <= since_start
    assert 0 <= value("latest_cut_age_seconds") <= (after - cut).total_seconds()  # that cut, or a later one
    assert value("latest_cut_apply_seconds") > 0
    assert value("landing_files_waiting") >= 0 and value("oldest_unread_partition_age_seconds") >= 0
    headroom = value("retention_headroom_seconds")  # the stream's retention_period is one day
    assert 86_400 - since_start <= headroom <= 86_400


def task_executors(event_logs) -> dict[str, set[str]]:
    """Per Spark application (one per lake run), the executors its tasks ran on."""
    found = {}
    for log in sorted(event_logs.iterdir()):
        name = log.name.removesuffix(".inprogress")
        try:
            text = log.read_text()
        except FileNotFoundError:  # the run ended since the listing: Spark renamed its log
            text = (event_logs / name).read_text()
        events = [json.loads(line) for line in text.splitlines() if line.strip()]
        found[name] = {e["Task Info"]["Executor ID"] for e in events if e["Event"] == "SparkListenerTaskEnd"}
    return found


@pytest.mark.heavy
@pytest.mark.xdist_group("processes")
def test_the_production_stack_lands_and_cuts_every_transaction_exactly_once(tmp_path, spark, gcs_endpoint):
    with production_stack(
        tmp_path, accounts=10, before_start=100, gcs=gcs_endpoint, metrics_port=free_loopback_port()
    ) as stack:
        store = configured_resources(os.environ)[change_stream_resource_key(STREAM)].metadata_store()
        stop_writing = threading.Event()
        writer = threading.Thread(target=stack.workload.run_until, args=(utc_now() + timedelta(hours=1), 10), kwargs={"accounts": 0, "stop": stop_writing})
        writer.start()
        try:
            time.sleep(WRITE_SECONDS)
            stack.await_webserver()  # it loads while the writer writes
            with DagsterInstance.get() as instance:
                check_warm_runs(stack, instance, store)
            wait_until(lambda: has_split_and_merged(store), 300, "a split and a merge", poll_s=2)
        finally:
            stop_writing.set()
            writer.join()
        last_commit = stack.workload.committed[-1].commit_timestamp
        lake = Lake(spark, f"{stack.lake_root}/{STREAM}")
        wait_until(lambda: (lake.last_cut() or stack.start) >= last_commit, 600, "a cut past the last commit", poll_s=5)
        cuts = lake.cuts()
        check_scrape(scrape(stack.metrics), stack.start, cuts[-1], utc_now())
        crossed = lineage(store.all())
        with DagsterInstance.get() as instance:
            assert isinstance(instance.run_storage, PostgresRunStorage)
            # A lake run keeps cutting for CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS: the one that cut
            # past the last commit is still running.
            runs = instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.STARTED]))
            # Reader and lake runs, launched by their sensors (the hourly schedules may add a cleanup
            # or maintenance run of their own while the test runs).
            streamed = [r for r in runs if r.dagster_run.job_name in ("bank_stream_read_partition", "bank_stream_lake")]
            by_sensor = {r.dagster_run.tags.get("dagster/sensor_name") for r in streamed}
            lake_runs = sorted(round((r.end_time or time.time()) - r.start_time) for r in runs if r.dagster_run.job_name == "bank_stream_lake")
        landing = landed(LandingStore(stack.landing_root), STREAM)
        in_changelog, repeated = changelog_mods(lake, cuts[-1])
        expected = committed(stack.workload, cuts[-1], stack.start)
        executors = task_executors(stack.spark_events)
        print(f"{len(stack.workload.committed)} transactions, {len(cuts)} cuts, {crossed}, {len(runs)} runs, executors {executors}")
        print(f"lake runs on the cluster and GCS: run seconds {lake_runs}")

        assert by_sensor == {"bank_stream_partition_sensor", "bank_stream_lake_sensor"}
        assert crossed.splits >= 1 and crossed.merges >= 1
        assert not expected - landing.mods, f"{len(expected - landing.mods)} committed mods never landed"
        assert not expected - in_changelog, f"{len(expected - in_changelog)} committed mods missing from the changelog"
        assert repeated == 0, f"{repeated} changes appear more than once in the changelog"
        assert cuts[0] == stack.start and len(cuts) >= 2  # the snapshot, then at least one cut of the writes
        for cut in spread(cuts):
            check_bank_cut(lake, stack.bank.bank, cut)
        # Every lake run's tasks ran in executor processes, none in the driver (one Spark application
        # per run; the first run's are the snapshot's mirror writes: its small tables are read by the
        # driver). An application may have run no task at all (in a fresh clone, the first of two).
        assert any(executors.values()) and not any("driver" in ids for ids in executors.values()), executors


def check_warm_runs(stack: Stack, instance: DagsterInstance, store: PartitionMetadataStore) -> None:
    """Each guarantee of a reader run on a warm worker, on the stack's live runs (warm_runs.py)."""
    started = warm_runs.reader_runs(instance, DagsterRunStatus.STARTED, DagsterRunStatus.SUCCESS)
    assert started and all(r.dagster_run.tags.get(DAGSTER_CELERY_TASK_ID_TAG) for r in started), "a reader run not on a run worker"
    killed, killed_at, besides = warm_runs.kill_a_worker_process(instance, stack.workers.process.pid, store)
    ui = warm_runs.terminate_from_the_ui(stack.webserver, instance, besides)
    assert warm_runs.ended_as_asked(ui), ui
    over = warm_runs.terminate_past_max_runtime(instance, besides)
    print(f"terminated from the UI: {ui}; past its max runtime: {over}")
    assert warm_runs.ended_as_asked(over), over
    reading = warm_runs.a_live_reader_run(instance, besides)
    reload = warm_runs.graphql(stack.webserver, 'mutation { reloadRepositoryLocation(repositoryLocationName: "cs_platform") { __typename } }')
    assert reload["reloadRepositoryLocation"]["__typename"] == "WorkspaceLocationEntry", reload
    stack.daemon.restart()
    assert warm_runs.ended(instance, reading.dagster_run.run_id) is DagsterRunStatus.SUCCESS
    # A deploy rolls the workers: SIGTERM to their parent alone, as Kubernetes stops a pod.
    rolled = warm_runs.terminated(instance, 5, lambda _record: stack.workers.restart(), besides)
    assert warm_runs.ended_as_asked(rolled), rolled
    # The killed run: FAILED by run monitoring (its task's state), not presumed dead by the sensor
    # much later; then the sensor launched its partition again.
    assert warm_runs.ended(instance, killed.dagster_run.run_id) is DagsterRunStatus.FAILURE
    failure = [m for m in warm_runs.messages(instance, killed.dagster_run.run_id) if "Detected run worker status" in m]
    assert failure and "run worker's task failed" in failure[0], warm_runs.messages(instance, killed.dagster_run.run_id)[-5:]
    warm_runs.relaunched(instance, killed, killed_at)


def test_an_unreachable_postgres_fails_with_dagsters_own_error(tmp_path):
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{free_loopback_port()}/dagster"  # nothing listens there
    (tmp_path / "dagster.yaml").write_text(dagster_yaml(url))
    with pytest.raises(DagsterPostgresException, match="too many retries for DB connection"):
        DagsterInstance.from_config(str(tmp_path))
