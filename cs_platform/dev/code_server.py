"""The code location served by a code server of its own, which the daemon and the webserver share
through a ``grpc_server`` workspace: the production shape (the Helm chart's user deployment, the
third service docs/production.md advises), used by ``make stack``, its test and the benchmarks.

With the repository's ``workspace.yaml`` (a ``python_module``) each of them would start a code
server of its own, and the daemon replaces its own every minute, importing Dagster, the Spanner
client and the code location again (docs/benchmarks.md, "The daemon's code server").
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml

from cs_platform.dev.dagster_dev import REPO
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import start_server, stop_process_group


def served_location() -> tuple[str, str]:
    """The module and the location name the repository's workspace.yaml loads, served as they are."""
    [entry] = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    return entry["python_module"]["module_name"], entry["python_module"]["location_name"]


@dataclass(frozen=True)
class CodeServer:
    process: subprocess.Popen  # the server; the code location loads in a process it starts
    workspace: Path  # a workspace file naming it, for ``-w``


@contextmanager
def code_server(workdir: Path) -> Iterator[CodeServer]:
    """Start ``dagster code-server start`` on a free loopback port (in this process's environment:
    its runs under the default launcher inherit it), and yield it with a workspace file that names
    it; stop it by its PID on exit."""
    port = free_loopback_port()
    module, location = served_location()
    command = [sys.executable, "-m", "dagster", "code-server", "start", "-m", module, "--location-name", location,
               "-h", "127.0.0.1", "-p", str(port)]
    process = start_server(command, port, workdir / "code-server.log", "dagster code-server", timeout_s=180, cwd=REPO)
    try:
        workspace = workdir / "workspace.yaml"
        workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {"host": "127.0.0.1", "port": port, "location_name": location}}]}))
        yield CodeServer(process, workspace)
    finally:
        stop_process_group(process)
