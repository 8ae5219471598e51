"""`make dev`: ``dagster dev -w workspace.yaml`` on the embedded default.

Starts a private emulator with the bank database and change stream, a Spark Connect server for the
lake runs (a warm JVM: a lake run starts none), warm run workers for the reader runs (a private
Redis their broker: ``dev.run_workers``), the Prometheus exporter (``cs-platform-metrics``,
on CS_PLATFORM_METRICS_PORT), keeps a paced writer committing transfers, and runs ``dagster dev``
(webserver + daemon) pointed at them through the environment. The
sensor is on: it initializes the metadata table and launches one run per partition token. Ctrl-C
stops dagster dev, the writer, the exporter, the run workers, Redis, the Spark Connect server and
the emulator.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.embedded import embedded_bank
from cs_platform.dev.metrics_server import metrics_server
from cs_platform.dev.run_workers import run_workers
from cs_platform.dev.spark_connect import spark_connect_server
from cs_platform.dev.workload import BankWorkload

log = logging.getLogger("cs_platform.serve")

# make dev's cadence (and the UI test's): short reads, frequent ticks, a cut whenever the low
# watermark moved in the last 10 s, and runs that show their progress in the UI every 5 s.
DEV_SETTINGS = {
    "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "15",
    "CS_PLATFORM_REPORT_INTERVAL_SECONDS": "5",
    "CS_PLATFORM_SENSOR_INTERVAL_SECONDS": "5",
    "CS_PLATFORM_LAKE_INTERVAL_SECONDS": "10",
    "CS_PLATFORM_STALE_RUN_SECONDS": "120",
    "CS_PLATFORM_HEARTBEAT_MILLIS": "1000",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--writes-per-second", type=float, default=10)
    parser.add_argument("--workdir", type=Path, default=Path(".dev"))  # never make demo's .demo: one source per lake
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("google").setLevel(logging.WARNING)

    with ExitStack() as stack:
        bank = stack.enter_context(embedded_bank(args.workdir, partition_alive_seconds=20))
        remote = stack.enter_context(spark_connect_server(args.workdir / "spark-connect.log"))
        os.environ.update(
            CS_PLATFORM_SPARK_REMOTE=remote, CS_PLATFORM_START_TIMESTAMP=utc_now().isoformat(), **DEV_SETTINGS
        )
        metrics = stack.enter_context(metrics_server(args.workdir / "metrics.log"))
        stack.enter_context(run_workers(args.workdir, bank.dagster_home))
        workload = BankWorkload(bank.bank)
        writer = threading.Thread(
            target=workload.run_until, args=(utc_now() + timedelta(days=1), args.writes_per_second), daemon=True
        )
        writer.start()
        command = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(args.port)]
        log.info(
            "emulator on %s; Spark Connect on %s; DAGSTER_HOME=%s; metrics at %s; open http://127.0.0.1:%d",
            bank.emulator.host, remote, bank.dagster_home, metrics, args.port,
        )
        dagster = subprocess.Popen(command)
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill PID` stops every part too, as Ctrl-C does
        try:
            dagster.wait()
        except KeyboardInterrupt:
            dagster.terminate()
            dagster.wait(timeout=30)


if __name__ == "__main__":
    main()
