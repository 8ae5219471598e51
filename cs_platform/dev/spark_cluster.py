"""A Spark standalone cluster on this machine: one master and its workers, started from the
installed pyspark (``bin/spark-class``) on free loopback ports, each stopped by the PID we started.

Lake runs reach it with ``CS_PLATFORM_SPARK_MASTER=spark://127.0.0.1:<port>``: each run's driver
stays in the run's process, its tasks (the snapshot's reads included) run in executor processes that
the workers start. Delta's jars and the GCS connector reach the executors the way they reach any
cluster's: the driver serves what ``spark.jars.packages`` and ``spark.jars`` name.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

import pyspark

from cs_platform.dev.deadline import wait_until
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import start_server, stop_process_group

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_env() -> dict[str, str]:
    """The environment of a Spark JVM we start: the installed pyspark as SPARK_HOME, loopback only,
    and Python workers in this interpreter's environment (which has the Spanner client)."""
    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }


def _spark_class(main_class: str, *args: str) -> list[str]:
    return [str(Path(pyspark.__file__).parent / "bin" / "spark-class"), main_class, *args]


def alive_workers(web_ui: str) -> int:
    with urllib.request.urlopen(f"{web_ui}/json/", timeout=5) as response:
        return int(json.load(response)["aliveworkers"])


@contextmanager
def spark_cluster(workdir: Path, workers: int = 1, cores_per_worker: int = 2, memory_per_worker: str = "3g") -> Iterator[str]:
    """Run a master and ``workers`` workers until exit; yields the ``spark://127.0.0.1:<port>`` URL
    once every worker has registered."""
    port, ui_port = free_loopback_port(), free_loopback_port()
    master_url, web_ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    env = spark_env()
    with ExitStack() as stack:
        master = start_server(
            _spark_class(MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
            port, workdir / "spark-master.log", "the Spark master", env=env,
        )
        stack.callback(stop_process_group, master, 10)
        for n in range(workers):
            worker_port = free_loopback_port()
            worker = start_server(
                _spark_class(
                    WORKER_CLASS, "--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_loopback_port()),
                    "--cores", str(cores_per_worker), "--memory", memory_per_worker, "--work-dir", str(workdir / f"spark-worker-{n}"),
                    master_url,
                ),
                worker_port, workdir / f"spark-worker-{n}.log", f"Spark worker {n}", env=env,
            )
            stack.callback(stop_process_group, worker, 10)
        wait_until(lambda: alive_workers(web_ui) >= workers, 60, f"{workers} Spark worker(s) registered with {master_url}")
        yield master_url
