"""A Spark Connect server with Delta for `make dev` and the tests that run `dagster dev` as it does.

Started from the installed pyspark (its ``spark-submit`` and the ``spark-connect`` jar it ships), on
a free loopback port, with the lake's Delta settings and jars (``delta_spark_config``); stopped by
the PID we started (``spark-submit`` execs the JVM, in a session of its own). Lake runs connect to
it through ``CS_PLATFORM_SPARK_REMOTE``: its JVM stays up and warm across runs.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pyspark

from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import start_server, stop_process_group
from cs_platform.dev.spark_cluster import spark_env
from cs_platform.lake.spark import delta_spark_config, resolution_lock, warm_delta
from cs_platform.storage.gcs import GcsAccess

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def server_conf(port: int, master: str, storage: GcsAccess | None = None) -> dict[str, str]:
    return {
        **delta_spark_config(master, "cs_platform_spark_connect", storage=storage),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        # Warnings and errors only: at INFO the server logs each request of each client, with its
        # plan, and each job, stage and task it runs (28 MB in 8 minutes of the lake's tests), in a
        # log that `make dev` keeps for as long as it runs. Its first lines, before the level is
        # set, stay at INFO (the Spark version, the JVM's).
        "spark.log.level": "WARN",
    }


def server_command(conf: dict[str, str]) -> list[str]:
    spark_home = Path(pyspark.__file__).parent
    return [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]]


@contextmanager
def spark_connect_server(
    log_path: Path, master: str = "local[*]", start_timeout_s: float = 180, storage: GcsAccess | None = None
) -> Iterator[str]:
    """Run a Spark Connect server until exit; yields its ``sc://127.0.0.1:<port>`` address. The first
    start may resolve Delta's jars from Maven Central (then cached in ~/.ivy2.5.2)."""
    port = free_loopback_port()
    conf = server_conf(port, master, storage)  # (it may resolve the GCS connector, under the lock itself)
    # A server that resolves Delta's jars into the Ivy cache does so before it listens: it holds the
    # cache's lock until then, or a Spark session starting beside it can lose its gateway (seen in
    # the suite). One on jars resolved by an earlier start resolves nothing and needs no lock.
    with resolution_lock(conf):
        process = start_server(server_command(conf), port, log_path, "the Spark Connect server", start_timeout_s, spark_env())
    warm_up = None
    try:
        remote = f"sc://127.0.0.1:{port}"
        # A cold JVM runs its first Delta MERGE several times slower: warm it while the first
        # partitions are still being read (in a process of its own: one process is either a
        # Connect client or a local driver).
        warm_up = subprocess.Popen(
            [sys.executable, "-m", __name__, remote, str(log_path.parent / "spark-connect-warm-up")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        yield remote
    finally:
        if warm_up is not None:
            stop_process_group(warm_up)
        stop_process_group(process)


def warm(remote: str, directory: str) -> None:
    """Warm the server at ``remote`` (``lake.spark.warm_delta``) through a session of its own."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config("spark.remote", remote).getOrCreate()
    try:
        warm_delta(spark, directory)
    finally:
        spark.stop()


if __name__ == "__main__":
    warm(sys.argv[1], sys.argv[2])
