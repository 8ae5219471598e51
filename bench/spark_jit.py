"""What the JIT costs a lake's Spark JVM, per set of JVM options: the test suite's options against
C2's defaults and C1 alone.

Each case starts a fresh process with one local Spark session (local[2], interpreted SQL as the
suite runs it, the given ``spark.driver.extraJavaOptions``) that builds ``--lakes`` lakes of
``--cuts`` cuts of the suite's small bank (``cs_platform_tests.lake.bank_landing``), history on,
reading every third cut of each back. Per case: the JVM's and this process's CPU in all, for the
first lake (the JVM's warm-up) and the median of the later ones, and what the C2 and C1 compiler
threads alive at the end used (``jcmd Thread.print``; a compiler thread that ended is not counted).
Then each case's CPU over C2's defaults, and the load average. Prints ``name: value`` lines.

    .venv/bin/python -m bench.spark_jit [--lakes 5 --cuts 8] [--only suite --only c2_defaults]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.suite_cpu import process_stats
from cs_platform_tests.conftest import INTERPRETED_SQL, JVM_OPTIONS  # the suite's own: run from the repository's root, with -m

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "c2_defaults": "-XX:+UseSerialGC",
    "suite": JVM_OPTIONS,  # C2 with thresholds ten times its defaults
    "c1_only": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def children_cpu_s() -> tuple[float, list[int]]:
    """CPU of this process and its children (the Spark JVM, and the launcher JVM it reaped), and the
    PIDs of the children alive."""
    times = os.times()
    children = [(pid, cpu) for pid, (parent, _, cpu, _) in process_stats().items() if parent == os.getpid()]
    reaped = times.children_user + times.children_system
    return times.user + times.system + reaped + sum(cpu for _, cpu in children), [pid for pid, _ in children]


def compiler_threads_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of each JIT compiler kind's threads alive in JVM ``pid``."""
    dump = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True, text=True, timeout=60).stdout
    found: dict[str, float] = {}
    for kind, millis in re.findall(r'"(C[12]) CompilerThread\d+".*?cpu=([\d.]+)ms', dump):
        found[kind] = found.get(kind, 0.0) + float(millis) / 1000
    return found


def run_case(options: str, lakes: int, cuts: int) -> dict:
    """The workload in this process (a case's own), returning its figures."""
    from cs_platform.lake.history_schema import HistoryPolicy
    from cs_platform.lake.spark import delta_spark_session
    from cs_platform.lake.stream_lake import Lake
    from cs_platform.landing.store import LandingStore
    from cs_platform_tests.lake.bank_landing import land_bank

    began, _ = children_cpu_s()
    spark = delta_spark_session("spark_jit", master="local[2]", extra={"spark.driver.extraJavaOptions": options, **INTERPRETED_SQL})
    per_lake = []
    for _ in range(lakes):
        before, _ = children_cpu_s()
        work = Path(tempfile.mkdtemp(prefix="spark_jit_"))
        landing = LandingStore(str(work / "landing"))
        stamps = land_bank(landing, files=cuts)
        files = landing.files("Bank")
        lake = Lake(spark, str(work / "lake"), history=HistoryPolicy())
        for i, cut in enumerate(stamps):
            lake.changelog.ingest(files[: i + 1])
            lake.apply_cut(cut)
        for cut in stamps[::3]:
            for frame in lake.mirrors_at_cut(cut).values():
                frame.collect()
        per_lake.append(children_cpu_s()[0] - before)
    total, jvms = children_cpu_s()
    compilers = compiler_threads_cpu_s(jvms[0]) if jvms else {}
    spark.stop()
    return {"cpu_s": total - began, "lakes": per_lake, "compilers": compilers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lakes", type=int, default=5)
    parser.add_argument("--cuts", type=int, default=8)
    parser.add_argument("--only", choices=tuple(CASES), action="append", help="measure this case (repeatable)")
    parser.add_argument("--case", choices=tuple(CASES), help=argparse.SUPPRESS)  # a case's own process
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(CASES[args.case], args.lakes, args.cuts)))
        return
    results = {}
    for name in args.only or CASES:
        command = [sys.executable, "-m", "bench.spark_jit", "--case", name, "--lakes", str(args.lakes), "--cuts", str(args.cuts)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"case {name} failed ({done.returncode}):\n" + "\n".join(done.stderr.splitlines()[-20:]))
        result = results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        later = statistics.median(result["lakes"][1:]) if len(result["lakes"]) > 1 else float("nan")
        print(f"{name}_cpu_s: {result['cpu_s']:.1f}")
        print(f"{name}_first_lake_cpu_s: {result['lakes'][0]:.1f}")
        print(f"{name}_later_lake_cpu_s: {later:.1f} (median)")
        for kind, seconds in sorted(result["compilers"].items()):
            print(f"{name}_{kind.lower()}_compiler_cpu_s: {seconds:.1f}")
    if "c2_defaults" in results:
        for name in results.keys() - {"c2_defaults"}:
            print(f"{name}_over_c2_defaults: {results[name]['cpu_s'] / results['c2_defaults']['cpu_s']:.2f}")
    print(f"load_average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


if __name__ == "__main__":
    main()
