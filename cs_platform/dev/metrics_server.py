"""``cs-platform-metrics`` (``cs_platform/metrics.py``) as a server of its own, the way ``make dev``
and ``make stack`` start it beside Dagster: on loopback, reading the environment they set, stopped
by its PID."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cs_platform import settings
from cs_platform.dev.dagster_dev import REPO
from cs_platform.dev.process_group import await_listening, launch, stop_process_group


@contextmanager
def metrics_server(log_path: Path, port: int | None = None) -> Iterator[str]:
    """Start the exporter on 127.0.0.1:``port`` (default: CS_PLATFORM_METRICS_PORT) with the current
    environment, wait until it listens, and yield the URL Prometheus scrapes."""
    port = port or settings.value(os.environ, "CS_PLATFORM_METRICS_PORT")
    process = launch([sys.executable, "-m", "cs_platform.metrics", "--port", str(port)], log_path, cwd=REPO)
    try:
        await_listening(process, port, log_path, "cs-platform-metrics")
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        stop_process_group(process, grace_s=10)
