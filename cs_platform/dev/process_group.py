"""Servers we start (the emulator, ``dagster dev``, a Spark Connect server), each in a session of
its own: waiting until one listens, and stopping its process group by its leader's PID.

Servers have children of their own and may ignore SIGTERM while work is in flight, so stopping
escalates to SIGKILL of the group after a grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import Callable


def wait_until_listening(process: subprocess.Popen, port: int, expired: Callable[[], bool]) -> bool:
    """Wait until something accepts connections on 127.0.0.1:``port``: True then; False as soon as
    ``process`` exits (its ``returncode`` is then set) or ``expired()`` says the wait is over."""
    while process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            if expired():
                return False
            time.sleep(0.1)
    return False


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
