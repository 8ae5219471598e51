"""Warm run workers on this machine: a private Redis (``dev.redis``) as their broker, the instance's
``dagster.yaml`` pointed at it (``ReaderRunLauncher``), and ``cs-platform-run-worker`` started in a
session of its own, stopped by its PID. ``make dev``, ``make stack``, their tests and the
benchmarks run reader runs this way.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from cs_platform.dev.dagster_dev import REPO
from cs_platform.dev.deadline import Deadline
from cs_platform.dev.environment import environment_set
from cs_platform.dev.process_group import ServerStartError, launch, stop_process_group, tail
from cs_platform.dev.redis import redis_server

BROKER_SETTING = "CS_PLATFORM_RUN_BROKER"
RUN_LAUNCHER_YAML = f"""\
run_launcher:
  module: cs_platform.workers.launcher
  class: ReaderRunLauncher
  config:
    broker:
      env: {BROKER_SETTING}
"""
READY = b" ready."  # what Celery logs once its pool is up and it consumes


class RunWorkers:
    """``cs-platform-run-worker`` as a process of our own; ``process`` is the warm parent, its
    worker processes are its children. A test may restart it mid-run, as a deploy rolls workers."""

    def __init__(self, broker: str, log: Path, concurrency: int | None) -> None:
        self.broker, self.log = broker, log
        self.command = [sys.executable, "-m", "cs_platform.workers.worker"] + (["--concurrency", str(concurrency)] if concurrency else [])
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        process = launch(self.command, self.log, cwd=REPO)
        try:
            _await_ready(process, self.log, self.log.stat().st_size if self.log.exists() else 0)
        except ServerStartError:
            stop_process_group(process)
            raise
        return process

    def restart(self, grace_s: float = 60) -> None:
        """Stop the workers as Kubernetes stops a pod, SIGTERM to the parent alone (which passes it
        on: their runs drain), then start them again."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass  # stopped below, and the test that restarted them sees its run did not drain
        stop_process_group(self.process)
        self.process = self._start()

    def stop(self) -> None:
        stop_process_group(self.process)


def use_run_workers(dagster_yaml: Path) -> None:
    """Launch the instance's reader runs on the run workers (its other runs as before)."""
    with open(dagster_yaml, "a") as settings:
        settings.write(RUN_LAUNCHER_YAML)


@contextmanager
def run_workers(workdir: Path, dagster_home: Path, concurrency: int | None = None) -> Iterator[RunWorkers]:
    """Start Redis, point ``dagster_home``'s instance and the environment at it, and start the run
    workers (``concurrency`` processes; default CS_PLATFORM_MAX_PARALLEL_READS) from this process's
    environment; stop both on exit. Returns once the workers take runs."""
    with ExitStack() as stack:
        broker = stack.enter_context(redis_server(workdir / "redis.log"))
        use_run_workers(dagster_home / "dagster.yaml")
        stack.enter_context(environment_set({BROKER_SETTING: broker}))
        workers = RunWorkers(broker, workdir / "run-workers.log", concurrency)
        stack.callback(workers.stop)
        yield workers


def _await_ready(process: subprocess.Popen, log: Path, offset: int) -> None:
    """Until Celery logs that it consumes (after ``offset``: a restart appends to the same log)."""
    deadline = Deadline(120)
    while process.poll() is None:
        with open(log, "rb") as text:
            text.seek(offset)
            if READY in text.read():
                return
        if deadline.expired():
            raise ServerStartError(f"the run workers did not start within {deadline.describe()}:\n{tail(log)}")
        time.sleep(0.2)
    raise ServerStartError(f"the run workers exited with {process.returncode} while starting:\n{tail(log)}")
