"""Stopping a process group we started (``start_new_session=True``), by its leader's PID.

Servers we start (``dagster dev``, a Spark Connect server) have children of their own and may
ignore SIGTERM while work is in flight, so stopping escalates to SIGKILL of the group after a grace
period.
"""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process_group(process: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM the process group we started, SIGKILL it if it is still there after ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
