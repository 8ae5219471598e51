"""`dagster dev -w workspace.yaml` as a child process group we start, and stop by its PID.

The webserver, daemon and code servers are children of `dagster dev`; with runs still in flight it
may ignore SIGTERM, so stopping escalates to SIGKILL of the group after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]


def start_dagster_dev(port: int, log: IO[bytes]) -> subprocess.Popen:
    """Start `dagster dev` on 127.0.0.1:``port`` in its own session, output to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_dagster_dev(process: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group we started, SIGKILL it if it is still there after ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
