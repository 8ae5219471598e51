"""Start and stop a private Cloud Spanner Emulator for tests and the demo.

The emulator is a real Spanner server (change streams, partition churn included), so the
project runs it instead of mocking Spanner. We start it on a free loopback port, wait until it
answers gRPC, and stop it by the PID we started: never any other process.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cs_platform.dev.process_group import start_in_own_session, wait_until_listening

log = logging.getLogger(__name__)

_SDK_RELATIVE = Path("bin") / "cloud_spanner_emulator" / "emulator_main"
_SDK_ROOTS = (
    Path("/usr/lib/google-cloud-sdk"),
    Path("/usr/share/google-cloud-sdk"),
    Path("/opt/google-cloud-sdk"),
    Path.home() / "google-cloud-sdk",
)

INSTALL_HINT = (
    "The Cloud Spanner Emulator (emulator_main) was not found. Install it with "
    "'apt-get install google-cloud-cli-spanner-emulator' (Debian package from the Google Cloud SDK "
    "repository) or 'gcloud components install cloud-spanner-emulator', or point "
    "CS_PLATFORM_EMULATOR_BIN at the emulator_main binary."
)


class EmulatorNotInstalledError(RuntimeError):
    """Raised when no emulator_main binary can be found; the message says how to install it."""


class EmulatorStartError(RuntimeError):
    """Raised when emulator_main was found but did not start serving."""


def find_emulator_binary() -> Path:
    """Locate emulator_main: $CS_PLATFORM_EMULATOR_BIN, then the usual Cloud SDK roots, then PATH."""
    configured = os.environ.get("CS_PLATFORM_EMULATOR_BIN")
    candidates = [Path(configured)] if configured else []
    gcloud = shutil.which("gcloud")
    if gcloud:
        candidates.append(Path(gcloud).resolve().parent.parent / _SDK_RELATIVE)
    candidates += [root / _SDK_RELATIVE for root in _SDK_ROOTS]
    on_path = shutil.which("emulator_main")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise EmulatorNotInstalledError(INSTALL_HINT)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SpannerEmulator:
    """One emulator_main process that we own.

    ``partition_alive_seconds`` maps to ``--override_change_stream_partition_token_alive_seconds``:
    a small value makes partitions split and merge every few seconds, so tests cross real churn fast.
    """

    partition_alive_seconds: int | None = None
    churn: bool = True
    log_path: Path | None = None
    extra_flags: tuple[str, ...] = ()
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> "SpannerEmulator":
        binary = find_emulator_binary()
        self.port = self.port or free_loopback_port()
        args = [str(binary), "--host_port", self.host]
        if self.partition_alive_seconds:
            args.append(f"--override_change_stream_partition_token_alive_seconds={self.partition_alive_seconds}")
        if not self.churn:
            args.append("--enable_change_stream_churning=false")
        args += list(self.extra_flags)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.process = start_in_own_session(args, stdout=out, stderr=subprocess.STDOUT)
        finally:
            if self.log_path:
                out.close()
        self._wait_until_serving(timeout_s)
        log.info("Spanner emulator pid %s serving on %s", self.process.pid, self.host)
        return self

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        if wait_until_listening(self.process, self.port, lambda: time.monotonic() >= deadline):
            return
        if self.process.poll() is not None:
            raise EmulatorStartError(
                f"emulator_main exited with code {self.process.returncode} while starting on {self.host}"
                + (f"; see {self.log_path}" if self.log_path else "")
            )
        self.stop()
        raise EmulatorStartError(f"emulator_main did not listen on {self.host} within {timeout_s:.0f}s")

    def stop(self) -> None:
        """Stop the process we started (by its PID only) and reap it."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> "SpannerEmulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

