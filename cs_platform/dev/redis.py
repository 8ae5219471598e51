"""A private Redis server, the broker of the warm run workers (``make dev``, ``make stack``, their
tests and benchmarks): Debian's ``redis-server``, listening on a Unix socket in a directory only we
can open (mode 0700: no other user of the machine reaches it, and no TCP port at all), nothing saved
to disk, stopped by the PID we started.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cs_platform.dev.deadline import Deadline
from cs_platform.dev.process_group import ServerStartError, launch, stop_process_group, tail

INSTALL_HINT = "redis-server was not found: install it with 'apt-get install redis-server' (make dev, make stack and make test do when they can)"


class RedisNotInstalledError(RuntimeError):
    """Raised when ``redis-server`` is missing; the message says how to install it."""


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RedisNotInstalledError(INSTALL_HINT)
    return found


@contextmanager
def redis_server(log_path: Path) -> Iterator[str]:
    """Run Redis until exit; yields the broker URL (``redis+socket://…``) of its socket."""
    home = Path(tempfile.mkdtemp(prefix="cs_platform-redis-"))  # 0700; short, as a socket path must be
    sock = home / "redis.sock"
    command = [
        redis_server_binary(), "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
        "--save", "", "--appendonly", "no", "--dir", str(home),
    ]
    server = launch(command, log_path)
    try:
        _await_ping(server, sock, log_path)
        yield f"redis+socket://{sock}"
    finally:
        stop_process_group(server, grace_s=10)
        shutil.rmtree(home, ignore_errors=True)


def _await_ping(server, sock: Path, log_path: Path) -> None:
    deadline = Deadline(30)
    while server.poll() is None:
        try:
            with socket.socket(socket.AF_UNIX) as client:
                client.settimeout(2)
                client.connect(str(sock))
                client.sendall(b"PING\r\n")
                if client.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        if deadline.expired():
            stop_process_group(server, grace_s=5)
            raise ServerStartError(f"Redis did not answer on {sock} within {deadline.describe()}:\n{tail(log_path)}")
        time.sleep(0.1)
    raise ServerStartError(f"Redis exited with {server.returncode} while starting:\n{tail(log_path)}")
