"""Where a machine's CPU goes, process by process, while something runs beside it (the test suite).

``bench/suite_cpu.py`` attributes CPU to tests from the pytest workers' process trees, and cannot see
a process that lived and died under another parent: the runs a sensor loop's fork server forks, a
Spark JVM started through ``spark-class``. This samples every process on the machine once a second
(its CPU so far, keyed by pid and start time, so a reused pid is another process) and, stopped with
SIGTERM or SIGINT, writes one line per process it saw; ``report`` sums them by kind. A process that
lived less than a second between two samples is missed, and one already running at the start counts
from the first sample: compare the total with the machine's (``/proc/stat``) over the same run.

    .venv/bin/python bench/process_cpu.py sample .bench/process_cpu.tsv &   # then run the suite; kill %1
    .venv/bin/python bench/process_cpu.py report .bench/process_cpu.tsv
"""

from __future__ import annotations

import argparse
import signal
import time
from collections import defaultdict
from pathlib import Path

from suite_cpu import CLOCK_TICKS, command_line, process_stats  # its sibling: this runs as a script from bench/

# What a process is, by its command line (a Spark JVM is first seen as the bash of spark-class).
KINDS = (
    ("spark.app.name=cs_platform_tests ", "Spark: the test session's JVM"),
    ("connect.service", "Spark: the Spark Connect server"),
    ("CoarseGrainedExecutorBackend", "Spark: a cluster's executor"),
    ("deploy.master", "Spark: a cluster's master or worker"),
    ("deploy.worker", "Spark: a cluster's master or worker"),
    ("SparkSubmit", "Spark: a lake run's or a test process's driver"),
    ("pyspark.daemon", "Spark: Python workers (the snapshot's reads)"),
    ("emulator_main", "the Spanner emulator"),
    ("forkserver", "a sensor loop's fork server, its workers and their runs"),
    ("watch_orphans", "Dagster's compute-log watchers"),
    ("cs_platform_tests.defs.processes", "the tests' own processes (runs, loops, lake runs, cleanup)"),
    ("import sys;exec(eval(sys.stdin.readline()))", "the pytest workers"),
    ("-m pytest", "pytest"),
    ("dagster", "Dagster's processes (dagster dev, daemon, code servers, webserver, their runs)"),
    ("postgres", "PostgreSQL"),
    ("chrom", "Chromium"),
    ("pip", "set-up (pip)"),
)


def kind(name: str, command: str) -> str:
    return next((label for marker, label in KINDS if marker in command or marker in name), f"other: {name}")


def sample(out: Path) -> None:
    started = float(Path("/proc/uptime").read_text().split()[0]) * CLOCK_TICKS
    seen: dict[tuple[int, int], list] = {}  # (pid, start) -> [name, first command, command, cpu at first sight, cpu now]
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        for pid, (_, name, cpu, start) in process_stats().items():
            command = command_line(pid)
            if command is None:  # ended since the listing
                continue
            known = seen.setdefault((pid, start), [name, command, command, cpu, cpu])
            # A process may exec another program (spark-class its JVM, a shell its command): the
            # name is the latest, the command line both the first and the latest.
            known[0], known[2], known[4] = name, command or known[2], cpu
        time.sleep(1)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as tsv:
        for (pid, start), (name, first_command, command, first, last) in seen.items():
            used = last if start > started else last - first  # started before the sampler: from its first sample
            commands = first_command if command == first_command else f"{first_command} {command}"
            tsv.write(f"{pid}\t{name}\t{used:.2f}\t{' '.join(commands.split())[:4000]}\n")


def report(tsv: Path, top: int) -> None:
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for line in tsv.read_text().splitlines():
        _, name, used, command = line.split("\t", 3)
        totals = by_kind[kind(name, command)]
        totals[0] += float(used)
        totals[1] += 1
    print(f"cpu_s_sampled: {sum(used for used, _ in by_kind.values()):.0f}")
    for label, (used, count) in sorted(by_kind.items(), key=lambda item: -item[1][0])[:top]:
        print(f"cpu_s {label}: {used:.0f} ({count} processes)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("sample", "report"))
    parser.add_argument("tsv", type=Path, nargs="?", default=Path(".bench/process_cpu.tsv"))
    parser.add_argument("--top", type=int, default=20)
    arguments = parser.parse_args()
    sample(arguments.tsv) if arguments.mode == "sample" else report(arguments.tsv, arguments.top)
