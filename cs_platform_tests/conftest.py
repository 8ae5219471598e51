"""Shared fixtures: one real Spanner emulator per test session, fresh databases per test.

The emulator churns partitions every 6-12 s (``--override_change_stream_partition_token_alive_seconds=6``)
so tests cross real splits and merges quickly. If emulator_main is missing the session fails with
install instructions: nothing is skipped.
"""

from __future__ import annotations

import email
import email.policy
import http.server
import itertools
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Iterator

import pytest
from dagster import instance_for_test
from google.cloud import spanner
from google.cloud.spanner_v1.database import Database
from google.cloud.spanner_v1.instance import Instance

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.dev.emulator import SpannerEmulator, free_loopback_port
from cs_platform.dev.front.server import SpannerFront
from cs_platform.dev.gcs_emulator import create_bucket, gcs_emulator
from cs_platform.dev.spark_connect import spark_connect_server
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, create_database, create_instance
from cs_platform.storage.gcs import EMULATOR_SETTING, GcsAccess

# PySpark hands TIMESTAMPs back as naive datetimes in the local time zone: the whole suite runs
# west of UTC (and the cut tests east of it too, see ``local_time_zone``) so a UTC assumption fails.
SESSION_TIME_ZONE = "America/Los_Angeles"
os.environ["TZ"] = SESSION_TIME_ZONE
time.tzset()

# The test package is not installed with the product (pyproject.toml): the processes the tests start
# (``python -m cs_platform_tests.defs.processes``, run workers that unpickle a test's function) find
# it in the checkout, wherever they run.
CHECKOUT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join([CHECKOUT, *filter(None, [os.environ.get("PYTHONPATH")])])

PROJECT = "cs-platform-test"
INSTANCE = "test-instance"

_names = itertools.count(1)
# How long a test stream's reader run reads before it ends (production: an hour). A run still lands
# and persists its watermark every 2 s (the landing interval), so what a test waits on moves as
# often; a partition that ends (the emulator's churn, the front's re-partitioning) ends its run
# sooner. At 2 s, each live partition was a new run every 2 s: six heavy tests launched 268 runs,
# at 15 s 177, and used 840 CPU-s of the machine instead of 914 (docs/benchmarks.md, 2026-12-01).
SOFT_TIMEOUT_S = 15


@pytest.fixture(autouse=True)
def no_spawned_process_outlives_its_test() -> Iterator[None]:
    """The processes a test started with ``defs.processes.spawn`` end with it, passed or failed."""
    yield
    spawned = sys.modules.get("cs_platform_tests.defs.processes")  # not imported: nothing spawned
    if spawned is not None:
        spawned.end_spawned()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``heavy`` (minutes each) first: ``make test`` runs pytest-xdist workers that take
    tests in collection order, and a long test picked up last would leave the others idle."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


# Every JVM of the suite (its session, the runs', the cluster's, Spark Connect's) compiles with C2
# only what is ten times hotter than C2's default thresholds, and collects with the serial collector.
# - The JIT was a quarter of a session JVM's CPU: in five lakes of eight cuts, each read back, C2's
#   thread used 56 of the JVM's 224 CPU-s at the default thresholds, 20 of 181-189 at these; the
#   lakes after the first cost no more (28-34 CPU-s each, 27-39 at the defaults), so what C2 still
#   compiles is what pays. With C1 alone (the runs' JVMs before): 229, each lake after the first 42.
#   ``bench/spark_jit.py`` measures it again.
# - The serial collector: the maintenance test's work took 118.5 CPU-s with the default G1, 107.9
#   with it (106.2 with the parallel one), the same work in one run: G1's concurrent threads cost
#   more than they save on a heap of small tables.
# Spark's own place for such settings: spark-defaults.conf in SPARK_CONF_DIR, which the session's
# JVM reads as the runs' do (it passes no options of its own).
# The figures, and the product's own advice: docs/benchmarks.md, "The JIT of the suite's JVMs".
JVM_OPTIONS = (
    "-XX:+UseSerialGC -XX:Tier4InvocationThreshold=60000 -XX:Tier4MinInvocationThreshold=6000"
    " -XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000"
)
# Every Spark of the suite (its session, the runs', the cluster's, Spark Connect's) evaluates
# expressions interpreted, not through generated code: the tests' tables hold tens of rows, and a
# small cut's CPU went mostly to writing Java source per task and compiling it (in a profile of
# eight cuts, GenerateUnsafeProjection and Janino held over a quarter of the JVM's samples, mostly
# building the Delta log's row projections again in each task; the figures, with and without, are
# in docs/benchmarks.md, "Spark's generated code in small cuts"). It is the mode Spark's own tests
# run beside codegen (``spark.sql.codegen.factoryMode``); the product keeps Spark's default, which
# `make demo` runs.
INTERPRETED_SQL = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}


@pytest.fixture(scope="session", autouse=True)
def _spark_defaults(tmp_path_factory) -> Iterator[None]:
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.driver.extraJavaOptions {JVM_OPTIONS}\nspark.executor.extraJavaOptions {JVM_OPTIONS}\n"
        + "".join(f"{key} {value}\n" for key, value in INTERPRETED_SQL.items())
    )
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("SPARK_CONF_DIR", str(conf_dir))  # inherited by every run process and Spark JVM
        yield


@pytest.fixture(scope="session")
def emulator(tmp_path_factory) -> SpannerEmulator:
    log_path = Path(tmp_path_factory.mktemp("emulator")) / "emulator.log"
    # One emulator serves the whole suite, which makes a fresh database per test: more than the 100 an
    # instance may hold on Cloud Spanner (and the emulator by default). Partitions live 6 s, not 3:
    # each ended partition is a reader run, and on a loaded machine (a run generation taking 10-15 s
    # at a load of 7-10 per core) the sensor-launched reads of a 3 s churn fell minutes behind the
    # stream, the test waiting on them while its writer and lake steps went on.
    emu = SpannerEmulator(partition_alive_seconds=6, log_path=log_path, extra_flags=("--override_max_databases_per_instance=400",))
    emu.start()  # raises EmulatorNotInstalledError with install instructions if missing
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def spanner_client(emulator) -> spanner.Client:
    return SpannerTarget(PROJECT, INSTANCE, "unused", emulator.host).client()


@pytest.fixture(scope="session")
def instance(spanner_client) -> Instance:
    return create_instance(spanner_client, INSTANCE)


@pytest.fixture(scope="session")
def make_database(instance) -> Callable[..., Database]:
    """Create a fresh database (GoogleSQL or PostgreSQL) with the given DDL; unique name per call."""

    def make(ddl: list[str], postgres: bool = False, proto_descriptors: bytes | None = None) -> Database:
        return create_database(instance, f"db-{next(_names)}", ddl, postgres=postgres, proto_descriptors=proto_descriptors)

    return make


@pytest.fixture
def metadata_database(make_database) -> Database:
    """A separate GoogleSQL database for partition metadata, as production should use."""
    return make_database([])


@pytest.fixture(params=["Europe/Berlin"])
def local_time_zone(request, monkeypatch):
    """Run a test east of UTC (with daylight saving time), or in the zone it names (``indirect``
    parametrization): the rest of the suite runs west of it, in SESSION_TIME_ZONE. Both sides once
    each, not every cut test twice: the second run of each proved nothing the suite's zone did not."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.setenv("TZ", SESSION_TIME_ZONE)
    time.tzset()


@pytest.fixture(autouse=True)
def _quiet_grpc_logs():
    logging.getLogger("google").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory) -> Iterator[str]:
    """One GCS emulator (fake-gcs-server) for the test session; tests make buckets of their own."""
    with gcs_emulator(tmp_path_factory.mktemp("gcs")) as endpoint:
        yield endpoint


@dataclass(frozen=True)
class ConnectServer:
    remote: str  # sc://127.0.0.1:<port>
    log: Path  # its JVM's output


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory) -> Iterator[ConnectServer]:
    """One Spark Connect server, as ``make dev`` starts it, for the tests that are its clients: they
    share the xdist group ``processes``, so one worker starts it once (a server's start and warm-up
    cost about as much CPU as the cuts a test then runs on it)."""
    log = tmp_path_factory.mktemp("spark-connect") / "spark-connect.log"
    with spark_connect_server(log) as remote:
        yield ConnectServer(remote, log)


@pytest.fixture
def gcs_bucket(gcs_endpoint, monkeypatch) -> str:
    """A new bucket on the session's GCS emulator, as ``gs://<bucket>``, with STORAGE_EMULATOR_HOST
    pointing at the emulator for this test."""
    bucket = f"bucket-{os.getpid()}-{next(_names)}"
    create_bucket(gcs_endpoint, bucket)
    monkeypatch.setenv(EMULATOR_SETTING, gcs_endpoint)
    return f"gs://{bucket}"


@pytest.fixture(scope="session")
def spark(gcs_endpoint):
    """One Spark session with Delta for the whole test session: local (it takes ~10 s to start; the
    first start on a machine downloads delta-spark's jars and the GCS connector from Maven Central
    into ~/.ivy2.5.2) with gs:// served by the session's GCS emulator, or a client of the Spark
    Connect server at CS_PLATFORM_SPARK_REMOTE when that is set (one process is either: PySpark's
    functions follow the session kind; see test_spark_connect)."""
    from cs_platform.lake.spark import REMOTE_SETTING, delta_spark_session, lake_spark_config

    if os.environ.get(REMOTE_SETTING):
        from dagster_pyspark.resources import spark_session_from_config  # what the lake runs' resource calls

        session = spark_session_from_config(lake_spark_config("", os.environ[REMOTE_SETTING]))
    else:
        session = delta_spark_session("cs_platform_tests", master="local[2]", storage=GcsAccess(gcs_endpoint))
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _spark_forgets_the_test(request) -> Iterator[None]:
    """After a test that used the session's Spark: Delta's cache of table logs and every persisted
    RDD (Delta caches each snapshot's state) are dropped. A test's tables are never read again, but
    each cached log held its snapshot's state, plans and shuffle outputs: the session's driver grew
    8-10 MB per lake test after GC and ran out of its 1 GB heap in CI, failing every later test."""
    yield
    from cs_platform.lake.spark import REMOTE_SETTING

    if "spark" not in request.fixturenames or os.environ.get(REMOTE_SETTING):
        return
    spark = request.getfixturevalue("spark")
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    for rdd in spark.sparkContext._jsc.getPersistentRDDs().values():
        rdd.unpersist(False)
    spark.catalog.clearCache()


# The tests' instances capture no step's stdout and stderr: Dagster's default compute log manager
# starts a `tail -F` and a Python watcher process for each stream of each step, about 1,000 Python
# processes in a run of the suite (0.05 CPU-s a step); the tests read a run's events, never its
# captured output, and a step's output still reaches pytest's own capture.
TEST_INSTANCE_OVERRIDES = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}}


@pytest.fixture
def dagster_instance():
    """A real Dagster instance (sqlite in a temp dir; DAGSTER_HOME points at it for subprocesses)."""
    with instance_for_test(overrides=TEST_INSTANCE_OVERRIDES) as instance:
        yield instance


def end_run(instance, job, failed: bool, tags: dict | None = None) -> str:
    """A run of ``job`` (a job definition), ended the way Dagster's run monitoring ends a run it
    finds dead (``report_run_failed``), or with the success event a finished run records; its id."""
    from dagster import DagsterEvent, DagsterEventType

    run = instance.create_run_for_job(job, tags=tags or {})
    if failed:
        instance.report_run_failed(run, message="the run worker exited")
    else:
        instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, job_name=job.name), run_id=run.run_id)
    return run.run_id


@dataclass
class Received:
    """What the local alert receivers got: JSON bodies by URL path, and e-mails."""

    posts: dict[str, list[dict]] = field(default_factory=dict)
    mails: list[email.message.EmailMessage] = field(default_factory=list)
    url: str = ""  # the HTTP server's

    def posts_url(self, path: str) -> str:
        return f"{self.url}{path}"


SMTP_USER, SMTP_PASSWORD = "cs-platform", "s3cret-from-the-environment"


@pytest.fixture(scope="session")
def loopback_tls(tmp_path_factory) -> tuple[Path, Path]:
    """(certificate, key) of the tests' TLS servers on 127.0.0.1."""
    from cs_platform_tests.tls import loopback_certificate

    return loopback_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def alert_receivers(monkeypatch, loopback_tls) -> Iterator[Received]:
    """A real HTTP server (Slack's incoming webhook at /slack, a JSON webhook at /hook) and a real
    SMTP server on loopback that requires STARTTLS and a login, as a real relay does, with the
    CS_PLATFORM_ALERT_* settings pointing at them (the password from the environment, the server's
    certificate trusted through SSL_CERT_FILE)."""
    import ssl

    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword

    received = Received()

    class Hooks(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.posts.setdefault(self.path, []).append(body)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:  # the console shows the tests' progress, not each request
            pass

    class Mailbox:
        async def handle_DATA(self, server, session, envelope) -> str:
            received.mails.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
            return "250 OK"

    def login(server, session, envelope, mechanism, auth_data) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (SMTP_USER.encode(), SMTP_PASSWORD.encode())
        return AuthResult(success=ok, handled=False)  # handled=False: the server answers a refusal (535) itself

    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(*loopback_tls)
    http_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    smtp_port = free_loopback_port()
    mailbox = Controller(
        Mailbox(), hostname="127.0.0.1", port=smtp_port, tls_context=tls, require_starttls=True, authenticator=login, auth_required=True
    )
    mailbox.start()
    received.url = url = f"http://127.0.0.1:{http_server.server_port}"
    for name, value in {
        "CS_PLATFORM_ALERT_SLACK_WEBHOOK": f"{url}/slack",
        "CS_PLATFORM_ALERT_WEBHOOK": f"{url}/hook",
        "CS_PLATFORM_ALERT_EMAIL_TO": "oncall@example.com",
        "CS_PLATFORM_ALERT_SMTP": f"127.0.0.1:{smtp_port}",
        "CS_PLATFORM_ALERT_SMTP_USER": SMTP_USER,
        "CS_PLATFORM_ALERT_SMTP_PASSWORD": SMTP_PASSWORD,
        "SSL_CERT_FILE": str(loopback_tls[0]),
        "CS_PLATFORM_DAGSTER_URL": "http://dagster.example:3000",
    }.items():
        monkeypatch.setenv(name, value)
    try:
        yield received
    finally:
        mailbox.stop()
        http_server.shutdown()
        http_server.server_close()


@pytest.fixture
def spanner_front(emulator) -> Iterator[SpannerFront]:
    """The Cloud Spanner front (``dev/front/server.py``) on a free loopback port before the
    session's emulator: what a test reads through to take Cloud Spanner's path (streaming reads),
    and where it injects faults."""
    with SpannerFront(emulator.host) as front:
        yield front


@pytest.fixture
def stream_setup(make_database, metadata_database, spanner_front, tmp_path, monkeypatch) -> Callable[..., "StreamSetup"]:
    """A source database with the given DDL and change stream, and the environment
    ``cs_platform.definitions`` reads, pointing at it (landing and lake under the test's temp
    directory); call ``configure`` on the result to set the time window and timing knobs.

    Spanner is reached the way production reaches Cloud Spanner: through the front, read in
    streaming mode (``CS_PLATFORM_READ_MODE=streaming``); the front serves the live end from
    settled reads of the emulator, so nothing is lost on the emulator's scan boundaries."""

    def make(ddl: list[str], stream: str, proto_descriptors: bytes | None = None) -> StreamSetup:
        source = make_database(ddl, proto_descriptors=proto_descriptors)
        setup = StreamSetup(source, metadata_database, tmp_path / "landing", monkeypatch, spanner_front.host, stream)
        for name, value in {
            "CS_PLATFORM_SPANNER_PROJECT": PROJECT,
            "CS_PLATFORM_SPANNER_INSTANCE": INSTANCE,
            "CS_PLATFORM_SPANNER_DATABASE": source.database_id,
            "CS_PLATFORM_METADATA_DATABASE": metadata_database.database_id,
            "SPANNER_EMULATOR_HOST": spanner_front.host,
            "CS_PLATFORM_READ_MODE": "streaming",
            "CS_PLATFORM_LANDING_ROOT": str(setup.landing_root),
            "CS_PLATFORM_LAKE_ROOT": str(tmp_path / "lake"),
            "CS_PLATFORM_SPARK_MASTER": "local[2]",
            "CS_PLATFORM_CHANGE_STREAMS": stream,
        }.items():
            monkeypatch.setenv(name, value)
        return setup

    return make


@pytest.fixture
def bank_stream(stream_setup) -> "StreamSetup":
    """A bank database with stream BankStream (see ``stream_setup``)."""
    return stream_setup(BANK_TABLES_DDL + [bank_stream_ddl("BankStream")], "BankStream")


@dataclass
class StreamSetup:
    bank: Database  # the source database (the bank, for bank_stream)
    metadata: Database
    landing_root: Path
    monkeypatch: pytest.MonkeyPatch
    emulator_host: str
    stream: str = "BankStream"

    @property
    def target(self) -> SpannerTarget:
        return SpannerTarget(PROJECT, INSTANCE, self.bank.database_id, self.emulator_host)

    @property
    def store(self) -> PartitionMetadataStore:
        return PartitionMetadataStore(self.metadata, f"{self.stream}Metadata")

    @property
    def sensor(self) -> str:
        from cs_platform.defs.resources import stream_slug

        return f"{stream_slug(self.stream)}_partition_sensor"

    def read_until_finished(self, instance, timeout_s: float) -> None:
        """The real sensor and its runs (``SensorLoop``) until every partition is FINISHED."""
        from cs_platform.definitions import build_definitions
        from cs_platform.dev.sensor_loop import SensorLoop

        with SensorLoop(build_definitions, instance, self.sensor) as loop:
            loop.run_until(self.finished, timeout_s=timeout_s)

    def configure(
        self, start: datetime, end: datetime, soft_timeout_s: float = SOFT_TIMEOUT_S, stale_run_s: float = 20, heartbeat_ms: int = 1000
    ) -> None:
        for name, value in {
            "CS_PLATFORM_START_TIMESTAMP": start.isoformat(),
            "CS_PLATFORM_END_TIMESTAMP": end.isoformat(),
            "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": str(soft_timeout_s),
            "CS_PLATFORM_STALE_RUN_SECONDS": str(stale_run_s),
            "CS_PLATFORM_HEARTBEAT_MILLIS": str(heartbeat_ms),
            "CS_PLATFORM_MAX_PARALLEL_READS": "4",
        }.items():
            self.monkeypatch.setenv(name, value)

    def read_short_window(
        self, instance, seconds: float = 15, alongside: Callable[[], object] | None = None, write_seconds: float | None = None
    ) -> tuple[BankWorkload, datetime]:
        """Commit transfers for ``seconds`` (or the first ``write_seconds`` of them) while the sensor
        loop reads the stream to its end, and ``alongside`` (if given) runs in a thread from the
        start, joined at the end."""
        start = utc_now()
        end = start + timedelta(seconds=seconds)
        self.configure(start, end)
        writes_end = min(end - timedelta(seconds=4), start + timedelta(seconds=write_seconds or seconds))
        workload = BankWorkload(self.bank, seed=next(_names))  # new accounts each call: ids never collide
        threads = [threading.Thread(target=workload.run_until, args=(writes_end, 30), daemon=True)]
        threads += [threading.Thread(target=alongside, daemon=True)] if alongside else []
        for thread in threads:
            thread.start()
        self.read_until_finished(instance, timeout_s=seconds + 120)
        for thread in threads:
            thread.join()
        return workload, end

    def start_open_stream(
        self, stale_run_s: float = 20, per_second: float = 10, recycle_every: int = 0
    ) -> tuple[BankWorkload, threading.Thread, threading.Event]:
        """A stream with no end in sight and a writer that commits about ``per_second`` transfers
        until told to stop (``set()`` the event), deleting or re-inserting an audit event every
        ``recycle_every`` transfers if given: a test stages what it checks on events, never
        against a window that a slow machine can outrun. Ten a second by default: what a test
        checks (splits, merges, landings, kills between them) comes with any rate, while what a
        loaded machine must read, land and cut grows with it for as long as the test waits."""
        start = utc_now()
        self.configure(start, start + timedelta(hours=1), stale_run_s=stale_run_s)
        workload, stop = BankWorkload(self.bank, seed=next(_names)), threading.Event()
        writer = threading.Thread(
            target=workload.run_until, args=(start + timedelta(hours=1), per_second), kwargs={"stop": stop, "recycle_every": recycle_every}, daemon=True
        )
        writer.start()
        return workload, writer, stop

    def caught_up(self, writer: threading.Thread, workload: BankWorkload) -> Callable[[], bool]:
        """True once the writer is done and the low watermark is past its last commit: from then on,
        everything it committed must be in landing."""

        def done() -> bool:
            low = self.store.low_watermark()
            return not writer.is_alive() and low is not None and low >= workload.committed[-1].commit_timestamp

        return done

    def finished(self) -> bool:
        """Every partition FINISHED (the stream reached its end timestamp)."""
        rows = self.store.all()
        return bool(rows) and all(r.state is PartitionState.FINISHED for r in rows)
