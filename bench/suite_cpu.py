"""Where the test suite's CPU goes, test by test: a pytest plugin, and its report.

The suite is CPU-bound on two cores (both workers busy to the end), so its time is its CPU: a test
that waits costs the other worker nothing, a test that works costs both. Per test, the plugin adds
to a TSV what the pytest worker used itself, what its Spark JVMs used (its children named java:
the session's driver, and the Spark Connect server of the worker that started it), what its other
descendants alive at either end used (emulators, run processes, ``dagster dev``) and what the
children it reaped used. Processes that lived and died under another parent between the two ends
(runs forked by a sensor loop's fork server, a killed process tree) are not counted: compare the
sum with the machine's CPU over the same run. A process that ends during a test (a session's JVM at
the last test's teardown) shows its whole life under "reaped" and its earlier CPU as a negative
figure under its own part, so the sums stay right.

Fresh clones of the same code on one machine used up to a quarter more CPU one run than another,
every part of it, the workers' own Python too (docs/benchmarks.md, "The same tests, one machine,
four fresh clones a fifth apart"): the machine's own speed moves. So the controller also times a
fixed loop of Python on a thread of its own (``machine_probe_s``): idle before the workers start
(the fastest of three), then once a minute while they run (the median). The loop's CPU time, not
its wall time: waiting for a core does not count, a slower core does. Compare two suites' CPU with
their loaded probes beside it, knowing that the probe misses what slows memory-bound work (see
``machine_probe``).

    .venv/bin/python -m pytest cs_platform_tests -n 3 --dist loadgroup -p bench.suite_cpu   # writes .bench/suite_cpu.tsv (or $SUITE_CPU_TSV)
    .venv/bin/python bench/suite_cpu.py [.bench/suite_cpu.tsv] [--top 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

# Not a CS_PLATFORM_ name: every process of the suite would warn of it as an unknown setting.
TSV = Path(os.environ.get("SUITE_CPU_TSV", ".bench/suite_cpu.tsv"))
PARTS = ("python", "jvm", "descendants", "reaped")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROBE = "probe"  # the worker column of a machine probe's line: idle or loaded, then its seconds
PROBE_LOOPS = 5_000_000
PROBE_EVERY_S = 60.0


def machine_probe() -> float:
    """CPU seconds of the calling thread over a fixed loop of Python: how fast a core runs plain
    Python just now (a slower core raises it). A loop that stays in the core's cache does not see
    what slows the suite's memory-bound work: a clone that used 10 % more CPU read the same
    (docs/benchmarks.md, "Two more fresh clones, and what the probe misses")."""
    start, total = time.thread_time(), 0
    for i in range(PROBE_LOOPS):
        total += i * i
    return time.thread_time() - start


class LoadedProbe(threading.Thread):
    """``machine_probe`` once every ``PROBE_EVERY_S`` until stopped."""

    def __init__(self) -> None:
        super().__init__(name="machine-probe", daemon=True)
        self.seconds: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(PROBE_EVERY_S):
            self.seconds.append(machine_probe())


_loaded: LoadedProbe | None = None


def _write(line: str) -> None:
    TSV.parent.mkdir(parents=True, exist_ok=True)
    with TSV.open("a") as out:
        out.write(line + "\n")


def _controller(session: pytest.Session) -> bool:
    return not hasattr(session.config, "workerinput")  # pytest-xdist gives its workers one


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers
def pytest_sessionstart(session: pytest.Session) -> None:
    global _loaded
    if _controller(session):
        _write(f"{PROBE}\tidle\t{min(machine_probe() for _ in range(3)):.3f}")
        _loaded = LoadedProbe()
        _loaded.start()


@pytest.hookimpl(trylast=True)  # after pytest-xdist stopped them
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _loaded is not None:
        _loaded.stopped.set()
        _loaded.join()
        if _loaded.seconds:
            _write(f"{PROBE}\tloaded\t{statistics.median(_loaded.seconds):.3f}\t{len(_loaded.seconds)}")


def process_stats() -> dict[int, tuple[int, str, float, int]]:
    """pid -> (parent pid, command name, CPU seconds so far, start in clock ticks after boot) of
    every process, from /proc (``bench/process_cpu.py`` samples it too)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # ended since the listing
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry)] = (int(fields[1]), name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS, int(fields[19]))
    return found


def command_line(pid: int) -> str | None:
    """The process's command line, its arguments joined by spaces, or None once it has gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def descendants(processes: dict[int, tuple[int, str, float, int]], root: int) -> list[int]:
    children = defaultdict(list)
    for pid, (parent, *_) in processes.items():
        children[parent].append(pid)
    found, todo = [], [root]
    while todo:
        for child in children[todo.pop()]:
            found.append(child)
            todo.append(child)
    return found


def _sample() -> tuple[float, float, float, dict[int, float], float]:
    processes, me = process_stats(), os.getpid()
    jvm, others = 0.0, {}
    for pid in descendants(processes, me):
        parent, name, cpu, _ = processes[pid]
        if name == "java" and parent == me:
            jvm += cpu
        else:
            others[pid] = cpu
    times = os.times()
    return time.monotonic(), times.user + times.system, jvm, others, times.children_user + times.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    wall0, own0, jvm0, others0, reaped0 = _sample()
    yield
    wall1, own1, jvm1, others1, reaped1 = _sample()
    # A process that ended during the test: its whole life is in what the worker reaped, so what it
    # had used before the test comes off its part (a JVM's too: jvm1 no longer holds it).
    descendants = sum(cpu - others0.get(pid, 0.0) for pid, cpu in others1.items()) - sum(cpu for pid, cpu in others0.items() if pid not in others1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _write(f"{worker}\t{wall1 - wall0:.1f}\t{own1 - own0:.1f}\t{jvm1 - jvm0:.1f}\t{descendants:.1f}\t{reaped1 - reaped0:.1f}\t{item.nodeid}")


def report(path: Path, top: int) -> None:
    """``name: value`` lines: the suite's wall and CPU by part, then the tests that used the most."""
    rows, probes = [], {}
    for line in path.read_text().splitlines():
        if line.startswith(PROBE + "\t"):
            _, when, seconds, *times = line.split("\t")
            probes[when] = f"{seconds} s" + (f" (the median of {times[0]})" if times else "")
            continue
        worker, wall, *cpu, test = line.split("\t")
        rows.append((test, worker, float(wall), dict(zip(PARTS, map(float, cpu)))))
    if probes:
        print(f"machine_probe_s: {probes.get('idle', '?')} idle, {probes.get('loaded', '?')} while the tests ran ({PROBE_LOOPS:,} loops of Python, less is faster)")
    print(f"tests: {len(rows)}")
    print(f"worker_seconds: {sum(r[2] for r in rows):.0f}")
    for part in PARTS:
        print(f"cpu_{part}_s: {sum(r[3][part] for r in rows):.0f}")
    for test, worker, wall, cpu in sorted(rows, key=lambda r: -sum(r[3].values()))[:top]:
        parts = " ".join(f"{part} {cpu[part]:.0f}" for part in PARTS)
        print(f"cpu_s {test}: {sum(cpu.values()):.0f} ({parts}; wall {wall:.0f} s on {worker})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tsv", nargs="?", type=Path, default=TSV)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    report(args.tsv, args.top)
