"""Spark with Delta Lake: in this process by default (``CS_PLATFORM_SPARK_MASTER``, local or any
cluster), or a Spark Connect server (``CS_PLATFORM_SPARK_REMOTE=sc://host:port``) whose JVM outlives
the runs, so a lake run starts no JVM of its own and finds Spark already warm.

``configure_spark_with_delta_pip`` decides which Maven artifact matches the installed packages
(``io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark version>``, cached in ~/.ivy2.5.2);
:func:`delta_spark_config` turns its choice into a plain config dict, so the same settings feed
dagster-pyspark's ``PySparkResource`` and :func:`delta_spark_session` (tests, demo).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Mapping

from delta import configure_spark_with_delta_pip
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from cs_platform.lake.gcs_connector import gcs_spark_config
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.ivy import ivy_lock, remember_resolved, resolved_jars
from cs_platform.storage.gcs import GcsAccess

log = logging.getLogger(__name__)

REMOTE_SETTING = "CS_PLATFORM_SPARK_REMOTE"
MASTER_SETTING = "CS_PLATFORM_SPARK_MASTER"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # The JVMs themselves in UTC, whatever the host's zone (PySpark still hands Python naive local
    # datetimes: that conversion is Python's). Delta 4 checks every commit's incrementally computed
    # file list by rebuilding the new version's state whole when the session, the JVM's default or
    # `user.timezone` is not UTC (`allFilesInCrc.verificationMode.forceOnNonUTC`): 7 of a warm cut's
    # 40-43 Spark jobs. `defaultJavaOptions`, so a deployment's own `extraJavaOptions` still apply.
    "spark.driver.defaultJavaOptions": "-Duser.timezone=UTC",
    "spark.executor.defaultJavaOptions": "-Duser.timezone=UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.showConsoleProgress": "false",  # no stage bars over our own progress lines
    # One cut's plans (ingest, summary, MERGEs, Delta's own log queries) generate ~150 distinct
    # classes; with Spark's default cache of 100 every cut compiled all of them again with Janino
    # (and the JIT compiled them again): ~160 compilations per cut, 11 with 1,000 entries; a
    # one-table 10-mod cut 3.07 -> 2.51 s (docs/tuning.md, "Where the seconds go").
    "spark.sql.codegen.cache.maxEntries": "1000",
    # The lake's files hold whole rows: on a local disk, readable by the service's user only (Hadoop
    # applies this umask to every file and directory it creates: data, Delta log, checkpoints).
    "spark.hadoop.fs.permissions.umask-mode": "077",
    # With the UI off nobody reads Spark's status store, but it keeps 1,000 jobs, stages and SQL
    # executions (plans, metrics, task indices) by default, in the heap of a driver that lives
    # long (a lake run that keeps cutting). The test session's driver ran out of its 1 GB heap in
    # CI; most of its growth was Delta's cached table logs (the tests drop them), this the rest.
    # The last few are kept, for what an error message cites.
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.dagGraph.retainedRootRDDs": "50",
}


def delta_packages() -> str:
    """The Maven coordinates of Delta's jars for the installed delta-spark: what its pip helper asks
    Spark to resolve (``spark.jars.packages``)."""
    return configure_spark_with_delta_pip(SparkSession.builder)._options["spark.jars.packages"]


def delta_spark_config(
    master: str = "local[*]", app_name: str = "cs_platform", extra: Mapping[str, str] | None = None, storage: GcsAccess | None = None
) -> dict[str, str]:
    """Delta's jars and settings, plus the GCS connector when ``storage`` says gs:// is used."""
    packages = delta_packages()
    resolved = resolved_jars(packages)  # by an earlier start on this machine: nothing to resolve
    jars = {"spark.jars": ",".join(resolved)} if resolved else {"spark.jars.packages": packages}
    if master.startswith("local") or _master_host(master) in LOOPBACK_HOSTS:
        # A driver of a local session or of a cluster on this machine binds to loopback only (the
        # machine's other addresses are not ours to use).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python tasks (the snapshot's reads) run in this interpreter's environment, which has the
        # Spanner client; Spark would otherwise start whatever "python3" is on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    gcs = gcs_spark_config(storage) if storage is not None else {}
    return {"spark.master": master, "spark.app.name": app_name, **jars, **DELTA_CONF, **gcs, **(extra or {})}


def resolves_jars(spark_config: Mapping[str, str]) -> bool:
    """True if a JVM started with these settings resolves jars into the Ivy cache as it starts."""
    return "spark.jars.packages" in spark_config


def resolution_lock(spark_config: Mapping[str, str]) -> ContextManager[object]:
    """What a JVM starting with these settings holds until it has started: the Ivy cache's lock if
    it resolves jars into the cache (a gateway starting beside a resolver can exit), else nothing."""
    return ivy_lock() if resolves_jars(spark_config) else nullcontext()


def start_session(spark_config: Mapping[str, str], start: Callable[[], SparkSession]) -> SparkSession:
    """``start()`` the session these settings describe. One that resolves Delta's jars holds the Ivy
    cache's lock meanwhile, and records what they resolved to, so that every later start on this
    machine skips resolving (seconds each) and starts beside the others, without the lock."""
    with resolution_lock(spark_config):
        session = start()
    if resolves_jars(spark_config):
        remember_resolved(spark_config["spark.jars.packages"], session.sparkContext.getConf().get("spark.jars", ""))
    return session


def _master_host(master: str) -> str:
    return _host_port(master, "spark")[0] if master.startswith("spark://") else ""


def _host_port(url: str, scheme: str) -> tuple[str, str]:
    """Host and port of ``scheme://host:port[,more hosts][/path][;params]`` (its first address)."""
    address = url.removeprefix(f"{scheme}://").split("/", 1)[0].split(";", 1)[0].split(",", 1)[0]
    host, _, port = address.rpartition(":")
    return host, port


class SparkUnreachableError(ConnectionError):
    """The configured Spark Connect server or cluster master does not answer (Spark itself would
    retry for minutes)."""


def lake_spark_config(master: str, remote: str = "", storage: GcsAccess | None = None) -> dict[str, str]:
    """The session settings of the lake: a Spark Connect client when ``remote`` is set (the server
    carries Delta's jars and settings, and the GCS connector's), else a driver in this process with
    Delta's jars, on ``master`` (local, or a cluster: ``spark://host:port``)."""
    if remote:
        return {"spark.remote": remote, "spark.sql.session.timeZone": "UTC"}
    return delta_spark_config(master, storage=storage)


def check_reachable(spark_config: Mapping[str, str], timeout_s: float = 10) -> None:
    """Fail within ``timeout_s``, naming the setting, if the Spark Connect server or the standalone
    master the session would use does not listen (``spark://`` masters of a cluster with several
    masters are checked at their first address)."""
    remote, master = spark_config.get("spark.remote", ""), spark_config.get("spark.master", "")
    if remote:
        setting, url, scheme, hint = REMOTE_SETTING, remote, "sc", "start it (make dev starts one), fix {setting}, or unset it to run Spark in process"
    elif master.startswith("spark://"):
        setting, url, scheme, hint = MASTER_SETTING, master, "spark", "start the cluster (make stack starts one), or fix {setting}"
    else:
        return
    host, port = _host_port(url, scheme)
    if not host or not port.isdigit():
        raise SparkUnreachableError(f"{setting}={url!r} is not {scheme}://host:port: fix the setting")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise SparkUnreachableError(f"nothing answers at {setting}={url} ({e}): {hint.format(setting=setting)}") from e


def delta_spark_session(
    app_name: str = "cs_platform",
    master: str = "local[*]",
    extra: Mapping[str, str] | None = None,
    jvm_log: Path | None = None,
    storage: GcsAccess | None = None,
) -> SparkSession:
    """A Spark session with Delta. ``jvm_log``: send the JVM's own output (Ivy resolution, log4j)
    there instead of the console, for tools whose console shows only their progress."""
    config = delta_spark_config(master, app_name, extra, storage)
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)

    def start() -> SparkSession:
        try:
            return builder.getOrCreate()
        except PySparkRuntimeError as e:
            # Seen when a JVM outside the Ivy lock (a cluster's submit) resolved the same Ivy cache
            # at the same moment: the gateway exits before reporting its port. One more attempt,
            # then the error stands.
            if "JAVA_GATEWAY_EXITED" not in str(e):
                raise
            log.warning("Spark's Java gateway exited while starting (%s); starting it once more", e)
            return builder.getOrCreate()

    with _output_to(jvm_log):
        session = start_session(config, start)
    if jvm_log is not None:
        session.sparkContext.setLogLevel("ERROR")
    return session


def warm_delta(spark: SparkSession, directory: str) -> None:
    """Create, MERGE into and read a small Delta table in ``directory`` (then remove it): a cold JVM
    runs its first Delta statements several times slower (class loading, code generation), so a
    tool that must cut soon after starting Spark pays that first."""
    try:
        spark.range(100).selectExpr("id", "CAST(id AS STRING) AS value").write.format("delta").mode("overwrite").save(directory)
        spark.range(50, 150).selectExpr("id", "'new' AS value").createOrReplaceTempView("warm_up_source")
        spark.sql(
            f"MERGE INTO delta.{quoted(directory)} t USING `warm_up_source` s ON t.`id` = s.`id` "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        spark.read.format("delta").load(directory).groupBy("value").count().collect()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _output_to(path: Path | None) -> Iterator[None]:
    """Point file descriptors 1 and 2 at ``path`` while the JVM starts: it inherits them and keeps
    writing there; this process gets its own console back afterwards."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as target:
        try:
            for fd in (1, 2):
                os.dup2(target.fileno(), fd)
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
