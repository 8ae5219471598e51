"""Processes the crash and restart tests kill with SIGKILL, and how they signal where they are.

``python -m cs_platform_tests.defs.processes loop``: the sensor loop with its run workers, forever.
``python -m cs_platform_tests.defs.processes run KEY POINT MARKER``: one run of the reader job for
partition KEY that stops dead at POINT (``before_landing``; ``after_landing``: after a landing
write that wrote rows (or the partition's last, or any 20 s after its first) and before the watermark
update; ``between_chunks``: after N chunks that wrote rows (or any 20 s after the first) landed and
their watermarks were persisted, as the next chunk, read, is about to land), writes MARKER and waits
to be killed; or, for ``presumed_dead``, writes MARKER once its first chunk is read, waits for MARKER.go, then goes on
(the run checks whether it was given up before landing) and writes MARKER.late if it lands at all;
or, for ``paused``, stops itself with SIGSTOP between that check and the landing of its first chunk
whose rows hold N commit timestamps or more, writing MARKER first; resumed (SIGCONT), it lands the
chunk, writes MARKER.late, and goes on to persist its watermark. A ``paused`` run whose partition
gets no such chunk before it ends or yields never pauses: it ends as any run does, and writes no
MARKER. N is an optional last argument, 1 if not given. A ``before_children`` run stops itself
(SIGSTOP) as it is about to record the first child partitions its partition announces, writing MARKER
(its pid, the partition, the children) first; resumed, it goes on to record them.
``python -m cs_platform_tests.defs.processes drained KEY MARKER``: one run of the reader job for
partition KEY, unchanged but for writing MARKER (its pid and the watermark persisted) once its first
chunk landed and its watermark was persisted; the test then terminates it (SIGTERM), and the run drains.
``python -m cs_platform_tests.defs.processes lake_drained MARKER``: a run of the lake job as the lake
sensor launches it (it keeps cutting), unchanged but for writing MARKER (its pid) once it published
a cut and MARKER.ended (its run's status) at its end; the test terminates or kills it.
``python -m cs_platform_tests.defs.processes cleanup STEP MARKER``: one cleanup pass that stops
dead right after the first deletion of STEP (``metadata``, ``keys``, ``runs`` or ``landing``).
``python -m cs_platform_tests.defs.processes lake CUTS MARKER [mirror|history] [kill|pause]``: a lake
run as the lake sensor launches it (it keeps cutting) that, in the cut after it published CUTS, stops
dead right after the first mirror's MERGE committed (or, with ``history``, once the first history
table's and its table's mirror's have: the cut writes them side by side), before the manifest; MARKER
holds that table's URI and the cut. With ``pause`` it writes the cut's tables one at a time and stops
itself with SIGSTOP after the Accounts mirror's MERGE (the first write of a cut that has one; its
Spark JVM goes on): resumed, it goes on with the cut's other writes and its manifest append.

Both read their configuration from the environment (``cs_platform.definitions``) and use the
Dagster instance in DAGSTER_HOME, like processes launched by Dagster's run launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dagster import AssetKey, DagsterInstance, materialize
from google.cloud.spanner_v1.batch import Batch

from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.definitions import build_definitions
from cs_platform.defs import reading
from cs_platform.dev.deadline import Deadline
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.landing.store import LandingStore
from cs_platform.storage.location import Location
from cs_platform_tests.lake.killed import stopping_after, write_marker

SENSOR = "bank_stream_partition_sensor"
JOB = "bank_stream_read_partition"


_spawned: list[subprocess.Popen] = []


def spawn(*args: str, **settings: str) -> subprocess.Popen:
    """Start this module in a new session (its own process group, so killpg reaches its workers),
    with ``settings`` over this process's environment."""
    env = {**os.environ, **settings}
    process = subprocess.Popen([sys.executable, "-m", __name__, *args], start_new_session=True, stdout=subprocess.DEVNULL, env=env)
    _spawned.append(process)
    return process


def end_spawned() -> None:
    """SIGKILL the process group of each process :func:`spawn` started that is still running. A
    test kills its victims itself; one that failed first (a marker never written) left them
    waiting to be killed, for the rest of the suite: two such runs were found idle 20 minutes later."""
    while _spawned:
        process = _spawned.pop()
        if process.poll() is None:  # not reaped, so its pid is still its own
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def wait_for(path: Path, timeout_s: float = 90) -> dict:
    deadline = Deadline(timeout_s)
    while not path.exists():
        if deadline.expired():
            raise TimeoutError(f"{path} not written ({deadline.describe()})")
        time.sleep(0.1)
    return json.loads(path.read_text())  # whole: the processes write markers with write_marker


PATIENCE_S = 20  # an after_landing or between_chunks run waits this long after its first chunk for one with rows


def _run_until_killed() -> None:
    with DagsterInstance.get() as instance, SensorLoop(build_definitions, instance, SENSOR) as loop:
        loop.run_until(lambda: False, timeout_s=3600)


def _crashing_run(partition_key: str, point: str, marker: Path, n: int = 1) -> None:
    land, persist, check = LandingStore.write, PartitionMetadataStore.record_progress, reading.stop_if_presumed_dead
    announce = PartitionMetadataStore.add_children
    last: dict = {"with_rows": []}  # the landings that wrote rows, in order

    def stop_dead(landed, **more) -> None:
        found = {"pid": os.getpid(), "landed": landed.path if landed else None, "rows": landed.rows if landed else 0, **more}
        write_marker(marker, json.dumps(found))
        time.sleep(3600)

    def write(self, stream, key, batch):
        if point == "before_landing":
            stop_dead(None)
        # Patience counts from the first chunk, not from the process's start: on a loaded machine
        # importing Dagster and starting the run alone can take longer than the patience.
        patience_over = time.monotonic() - last.setdefault("first_chunk", time.monotonic()) > PATIENCE_S
        # Stop between two chunks once one of them landed rows (or, for a partition that gets none,
        # after a while): a first chunk of heartbeats alone says nothing about a landed file.
        if point == "between_chunks" and "watermark" in last and (len(last["with_rows"]) >= n or patience_over):
            stop_dead(last["landed"], watermark=last["watermark"], with_rows=last["with_rows"])
        timestamps = len({r.commit_timestamp for r in batch.records})
        if point == "paused" and "paused" not in last and batch.records and timestamps >= n:
            last["paused"] = {"pid": os.getpid(), "rows": batch.mod_count, "timestamps": timestamps, "watermark": batch.watermark.isoformat()}
            write_marker(marker, json.dumps(last["paused"]))
            os.kill(os.getpid(), signal.SIGSTOP)  # the whole process, until the test sends SIGCONT
            last["resumed"] = True
        if last.get("resumed"):
            write_marker(marker.with_suffix(".late"), key)
        last["landed"] = land(self, stream, key, batch)
        last["with_rows"] += [last["landed"].path] if last["landed"] else []
        # Runs land every few seconds, heartbeats alone included (nothing to land, the watermark
        # persisted): stop at the first landing that wrote rows, at the partition's last (it ended:
        # a split or a merge), or at any after a while for a partition that gets no rows. The
        # marker says which watermark the run persisted before.
        if point == "after_landing" and (last["landed"] is not None or batch.finished or patience_over):
            stop_dead(last["landed"], watermark=last.get("watermark"))
        return last["landed"]

    def record_progress(self, token, watermark, finished, owner):
        persist(self, token, watermark, finished, owner)
        if not finished:  # a chunk landed, its watermark persisted, more to read
            last["watermark"] = watermark.isoformat()

    def stop_if_presumed_dead(instance, run_id, stopping):  # the first chunk is read: wait for the verdict, then check
        if point == "presumed_dead" and not last.get("resumed"):
            write_marker(marker, json.dumps({"pid": os.getpid()}))
            go, deadline = marker.with_suffix(".go"), Deadline(120)
            while not go.exists() and not deadline.expired():
                time.sleep(0.05)
            last["resumed"] = True
        return check(instance, run_id, stopping)

    def add_children(self, record, end, heartbeat_millis, owner=None):
        if point == "before_children" and "paused" not in last:
            last["paused"] = {"pid": os.getpid(), "partition": record.partition_token, "children": [c.token for c in record.child_partitions]}
            write_marker(marker, json.dumps(last["paused"]))
            os.kill(os.getpid(), signal.SIGSTOP)  # until the test sends SIGCONT
        return announce(self, record, end, heartbeat_millis, owner)

    LandingStore.write = write
    reading.stop_if_presumed_dead = stop_if_presumed_dead
    PartitionMetadataStore.add_children = add_children
    PartitionMetadataStore.record_progress = record_progress
    job = build_definitions().resolve_job_def(JOB)
    with DagsterInstance.get() as instance:
        job.execute_in_process(instance=instance, partition_key=partition_key)


def _drained_run(partition_key: str, marker: Path) -> None:
    persist = PartitionMetadataStore.record_progress

    def record_progress(self, token, watermark, finished, owner):
        persist(self, token, watermark, finished, owner)
        if not marker.exists():
            write_marker(marker, json.dumps({"pid": os.getpid(), "watermark": watermark.isoformat(), "run_id": owner}))

    PartitionMetadataStore.record_progress = record_progress
    job = build_definitions().resolve_job_def(JOB)
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(instance=instance, partition_key=partition_key, raise_on_error=False)
    write_marker(marker.with_suffix(".ended"), json.dumps({"status": instance.get_run_by_id(result.run_id).status.value}))


def _drained_lake_run(marker: Path) -> None:
    from cs_platform.defs.lake_assets import KEEP_CUTTING_TAG
    from cs_platform.defs.tags import LAKE_TAG
    from cs_platform.lake import stream_lake

    apply_cut = stream_lake.Lake.apply_cut

    def noted(self, cut, **options):
        result = apply_cut(self, cut, **options)
        if result.applied and not marker.exists():
            write_marker(marker, json.dumps({"pid": os.getpid(), "cut": cut.isoformat()}))
        return result

    stream_lake.Lake.apply_cut = noted
    job = build_definitions().resolve_job_def("bank_stream_lake")  # the lake sensor's job: it sees this run in flight
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(instance=instance, tags={LAKE_TAG: "BankStream", KEEP_CUTTING_TAG: "true"}, raise_on_error=False)
        write_marker(marker.with_suffix(".ended"), json.dumps({"status": instance.get_run_by_id(result.run_id).status.value}))


def _stop_after_first(owner: type, method: str, marker: Path) -> None:
    """Patch ``owner.method`` to do its work once, then write ``marker`` and wait to be killed."""
    original = getattr(owner, method)

    def once_then_stop(*args, **kwargs):
        done = original(*args, **kwargs)
        write_marker(marker, json.dumps({"pid": os.getpid(), "step": method}))
        time.sleep(3600)
        return done

    setattr(owner, method, once_then_stop)


def _crashing_cleanup(step: str, marker: Path) -> None:
    if step == "metadata":  # one row per commit, so the kill falls between two of its commits
        delete_finished = PartitionMetadataStore.delete_finished
        PartitionMetadataStore.delete_finished = lambda self, older_than: delete_finished(self, older_than, batch_rows=1)
    owner, method = {
        "metadata": (Batch, "commit"),
        "keys": (DagsterInstance, "delete_dynamic_partition"),
        "runs": (DagsterInstance, "delete_run"),
        "landing": (Location, "delete_file"),
    }[step]
    _stop_after_first(owner, method, marker)
    defs = build_definitions()
    cleanup = [a for a in defs.assets if AssetKey(["bank_stream", "cleanup"]) in a.keys]
    with DagsterInstance.get() as instance:
        materialize(cleanup, resources=defs.resources, instance=instance)


def _crashing_lake_run(after_cuts: int, marker: Path, table: str = "mirror", how: str = "kill") -> None:
    from cs_platform.defs.lake_assets import KEEP_CUTTING_TAG
    from cs_platform.defs.tags import LAKE_TAG
    from cs_platform.lake import stream_lake

    applying, published = [], []
    apply_cut = stream_lake.Lake.apply_cut

    def counted(self, cut, **options):
        applying.append(cut)
        result = apply_cut(self, cut, **options)
        published.extend([cut] if result.applied else [])
        return result

    stream_lake.Lake.apply_cut = counted
    mirrored: set[tuple[int, str]] = set()  # (cut, table) whose mirror committed
    apply_changes = stream_lake.apply_changes

    def mirror_then_note(spark, mirror, *args):
        version = apply_changes(spark, mirror, *args)
        mirrored.add((len(applying), mirror.path.rsplit("/", 1)[-1]))
        return version

    def the_killed_cut(written):
        if len(published) < after_cuts or (how == "pause" and not written.path.endswith("/Accounts")):
            return None
        while (len(applying), written.path.rsplit("/", 1)[-1]) not in mirrored:
            time.sleep(0.05)  # a history's mirror, written beside it, commits too before the kill
        return applying[-1].isoformat()

    stream_lake.apply_changes = mirror_then_note
    if how == "pause":  # one write at a time: the cut's other writes all come after the pause
        stream_lake.PARALLEL_WRITES = 1
    write = {"mirror": "apply_changes", "history": "apply_history"}[table]
    setattr(stream_lake, write, stopping_after(getattr(stream_lake, write), marker, the_killed_cut, pause=how == "pause"))
    job = build_definitions().resolve_job_def("bank_stream_lake")  # the lake sensor's job: it sees this run in flight
    with DagsterInstance.get() as instance:
        job.execute_in_process(instance=instance, tags={LAKE_TAG: "BankStream", KEEP_CUTTING_TAG: "true"})


if __name__ == "__main__":
    if sys.argv[1] == "loop":
        _run_until_killed()
    elif sys.argv[1] == "cleanup":
        _crashing_cleanup(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1] == "drained":
        _drained_run(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1] == "lake_drained":
        _drained_lake_run(Path(sys.argv[2]))
    elif sys.argv[1] == "lake":
        _crashing_lake_run(int(sys.argv[2]), Path(sys.argv[3]), *sys.argv[4:])
    else:
        _crashing_run(sys.argv[2], sys.argv[3], Path(sys.argv[4]), *map(int, sys.argv[5:]))
