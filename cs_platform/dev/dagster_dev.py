"""`dagster dev -w workspace.yaml` as a child process group we start, and stop by its PID.

The webserver, daemon and code servers are children of `dagster dev`: stop them all with
``process_group.stop_process_group``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO

from cs_platform.dev.process_group import start_in_own_session

REPO = Path(__file__).resolve().parents[2]


def start_dagster_dev(port: int, log: IO[bytes]) -> subprocess.Popen:
    """Start `dagster dev` on 127.0.0.1:``port`` in its own session, output to ``log``; it gets
    SIGTERM if the thread that started it ends first (a benchmark killed, a test's worker lost)."""
    return start_in_own_session(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )
