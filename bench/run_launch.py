"""What a reader run costs to launch and to hold: Dagster's default launcher against warm run workers.

For each launcher, on its own emulator and bank (``make dev``'s, partitions renewed every
``--partition-seconds``): ``dagster-daemon`` (its sensors, its run queue; no webserver) and the code
server it loads the code location from (``dev.code_server``, as ``make stack`` and production run
it), the lake sensor stopped (``dagster sensor stop``: no Spark in the figures), and reader
runs of ``CS_PLATFORM_SOFT_TIMEOUT_SECONDS=--soft-timeout`` on a stream with a paced writer. Once
the first reader run has succeeded, every process of the daemon's and the code server's trees
(under the default launcher the runs are the code server's) and of the workers' tree (their
parent, its worker processes) is
sampled every 0.2 s for ``--window`` seconds: its CPU (from its birth if it was born in the window,
from the first sample if not) and its PSS (``/proc/PID/smaps_rollup``: shared pages split between
the processes that share them, which RSS counts in each).

Prints per launcher ``launch_cpu_s_per_run_<launcher>``: the CPU of all those processes over the
window divided by the reader runs that ended in it (the daemon's ticks, a run's start, its read and
its end: what grows with runs; the reads themselves are a small part on this idle-ish stream),
``daemon_cpu_s_per_run_<launcher>`` and ``code_server_tree_cpu_s_per_run_<launcher>`` (of it, the
daemon's ticks and the code server's sensor evaluations, which do not grow with runs, and under the
default launcher the runs),
With ``--storage postgres`` the instance keeps runs and events on a PostgreSQL server of its own
(``dev.stack.dagster_yaml``, as ``make stack`` and production do) instead of ``make dev``'s SQLite,
the server's processes are sampled too (``postgres_cpu_s_per_run_<launcher>``, also in the launch
figure), the connections it accepted are counted (``postgres_sessions_per_run_<launcher>``), and
each figure's name ends in ``_postgres``; ``--storage dagster-postgres`` does the same with
dagster-postgres's own storage (a connection per statement; what Dagster's Helm chart writes), its
figures ending in ``_dagster_postgres``.
``pss_mb_per_reader_run_<launcher>`` (the median of each run process's peak PSS; warm: of the
worker processes that ran a run) and ``rss_mb_per_reader_run_<launcher>`` (its RSS: what a run
holds with nothing shared, as in a pod of its own), ``workers_pss_mb`` (the warm parent and its worker processes
together, at their peak; ``workers_parent_pss_mb`` the parent alone), and ``launch_cpu_warm_over_default``, with the load average.

    .venv/bin/python bench/run_launch.py [--window 120 --soft-timeout 5 --only default|warm --storage sqlite|postgres|dagster-postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.code_server import code_server
from cs_platform.dev.dagster_dev import REPO
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.embedded import embedded_bank
from cs_platform.dev.postgres import postgres_server, query
from cs_platform.dev.process_group import launch, stop_process_group
from cs_platform.dev.run_workers import run_workers
from cs_platform.dev.serve import DEV_SETTINGS
from cs_platform.dev.stack import dagster_yaml
from cs_platform.dev.workload import BankWorkload
from cs_platform.workers.postgres_storage import DEFAULT_HELD_CONNECTIONS
from process_tree import TreeSampler  # its sibling: this runs as a script from bench/
from suite_cpu import command_line, process_stats

READER_JOB = "bank_stream_read_partition"
LAKE_SENSOR = "bank_stream_lake_sensor"
STORAGE_SUFFIX = {"sqlite": "", "postgres": "_postgres", "dagster-postgres": "_dagster_postgres"}  # what each figure's name ends in
# PostgreSQL with cs_platform's storage (connections held) or dagster-postgres's own (one a statement)
HELD_CONNECTIONS = {"postgres": DEFAULT_HELD_CONNECTIONS, "dagster-postgres": None}


def ended_reader_runs(instance: DagsterInstance) -> int:
    return instance.get_runs_count(RunsFilter(job_name=READER_JOB, statuses=[DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]))


def postmaster_pid(url: str) -> int:
    """The PID of the PostgreSQL server listening on ``url``'s port (its backends are its children)."""
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    for pid, (_parent, name, _cpu, _start) in process_stats().items():
        if name == "postgres" and f" -p {port} " in f"{command_line(pid)} ":  # backends rename themselves
            return pid
    raise RuntimeError(f"no PostgreSQL server listens on port {port}")


def sessions(url: str) -> int:
    """The connections the server has accepted in its database since it started (PostgreSQL 14+)."""
    [(accepted,)] = query(url, "SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
    return accepted


def measure(launcher: str, args, work: Path) -> dict[str, float]:
    with contextlib.ExitStack() as stack:
        bank = stack.enter_context(embedded_bank(work / launcher, partition_alive_seconds=args.partition_seconds))
        postgres = None
        if args.storage in HELD_CONNECTIONS:
            url = stack.enter_context(postgres_server(work / launcher))
            (bank.dagster_home / "dagster.yaml").write_text(dagster_yaml(url, HELD_CONNECTIONS[args.storage]))
            postgres = postmaster_pid(url)
        os.environ.update(DEV_SETTINGS, CS_PLATFORM_SOFT_TIMEOUT_SECONDS=str(args.soft_timeout), CS_PLATFORM_START_TIMESTAMP=utc_now().isoformat())
        workload, stop_writing = BankWorkload(bank.bank), threading.Event()
        writer = threading.Thread(target=workload.run_until, args=(utc_now() + timedelta(hours=1), args.writes_per_second, 20, stop_writing), daemon=True)
        writer.start()
        stack.callback(writer.join)
        stack.callback(stop_writing.set)
        workers = stack.enter_context(run_workers(work / launcher, bank.dagster_home)) if launcher == "warm" else None
        server = stack.enter_context(code_server(work / launcher))  # the daemon's, as in production (docs/production.md)
        # The lake sensor is on by default; stopped before the daemon starts, it launches nothing.
        subprocess.run([sys.executable, "-m", "dagster", "sensor", "stop", LAKE_SENSOR, "-w", str(server.workspace)],
                       cwd=REPO, check=True, capture_output=True, timeout=300)
        daemon = launch([sys.executable, "-m", "dagster._daemon", "run", "-w", str(server.workspace)], work / launcher / "dagster-daemon.log", cwd=REPO)
        stack.callback(stop_process_group, daemon)
        with DagsterInstance.get() as instance:
            wait_until(lambda: ended_reader_runs(instance) >= 1, 300, f"{launcher}: a reader run's end", poll_s=0.5)
            roots = [daemon.pid, server.process.pid] + ([workers.process.pid] if workers else []) + ([postgres] if postgres else [])
            sampler = TreeSampler(roots)
            thread = threading.Thread(target=sampler.run, daemon=True)
            ended_before, sessions_before = ended_reader_runs(instance), sessions(url) if postgres else 0
            thread.start()
            time.sleep(args.window)
            sampler.stop.set()
            thread.join()
            runs = ended_reader_runs(instance) - ended_before
            opened = sessions(url) - sessions_before if postgres else 0
        if workers:  # the worker processes that ran a run: the warm parent's children that used CPU
            run_processes = [key for key, parent in sampler.parents.items() if parent == workers.process.pid and sampler.last[key] > 0.5]
        else:  # the runs the code server spawned: the children of the process it loads the code in
            long_lived = set(roots)
            run_processes = [key for key in sampler.parents if sampler.last[key] - sampler.first[key] > 0.5 and sampler.parents[key] not in long_lived]
        pss = [sampler.peak_pss[key] for key in run_processes if key in sampler.peak_pss]
        rss = [sampler.peak_rss[key] for key in run_processes if key in sampler.peak_rss]
        launcher += STORAGE_SUFFIX[args.storage]
        figures = {
            f"reader_runs_{launcher}": runs,
            f"launch_cpu_s_per_run_{launcher}": sampler.cpu_s() / max(runs, 1),
            # The daemon's ticks (sensors, queue, monitoring), whatever the runs.
            f"daemon_cpu_s_per_run_{launcher}": sampler.cpu_s(daemon.pid) / max(runs, 1),
            # The code server: its sensor evaluations; under the default launcher the runs it spawns too.
            f"code_server_tree_cpu_s_per_run_{launcher}": sampler.cpu_s(server.process.pid) / max(runs, 1),
            **({
                f"postgres_cpu_s_per_run_{launcher}": sampler.cpu_s(postgres) / max(runs, 1),
                # Connections the server accepted (a backend process each), from every process.
                f"postgres_sessions_per_run_{launcher}": opened / max(runs, 1),
            } if postgres else {}),
            f"pss_mb_per_reader_run_{launcher}": statistics.median(pss) if pss else float("nan"),
            # What a run process holds with nothing shared: what a pod of its own needs (K8sRunLauncher).
            f"rss_mb_per_reader_run_{launcher}": statistics.median(rss) if rss else float("nan"),
        }
        if workers:
            figures["workers_pss_mb"] = sampler.total_pss_peak[workers.process.pid]
            # The parent alone (Dagster and the code location imported, nothing run): a pod's base.
            figures["workers_parent_pss_mb"] = max(v for k, v in sampler.peak_pss.items() if k[0] == workers.process.pid)
        for name, value in figures.items():
            print(f"{name}: {value:.2f}" if isinstance(value, float) else f"{name}: {value}", flush=True)
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=120)
    parser.add_argument("--soft-timeout", type=int, default=5)
    parser.add_argument("--partition-seconds", type=int, default=20)
    parser.add_argument("--writes-per-second", type=float, default=5)
    parser.add_argument("--only", choices=("default", "warm"))
    parser.add_argument("--storage", choices=tuple(STORAGE_SUFFIX), default="sqlite",
                        help="the instance's storage: make dev's SQLite, or PostgreSQL as in production, with cs_platform's "
                        "storage (connections held, make stack's) or dagster-postgres's own (a connection per statement, the Helm chart's)")
    parser.add_argument("--workdir", type=Path, default=Path(".bench/run_launch"))
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped (timeout, kill), it stops what it started
    results: dict[str, float] = {}
    for launcher in ("default", "warm"):
        if args.only in (None, launcher):
            results.update(measure(launcher, args, args.workdir))
    if not args.only:
        suffix = STORAGE_SUFFIX[args.storage]
        print(f"launch_cpu_warm_over_default{suffix}: {results[f'launch_cpu_s_per_run_warm{suffix}'] / results[f'launch_cpu_s_per_run_default{suffix}']:.2f}")
    print(f"load_average: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
