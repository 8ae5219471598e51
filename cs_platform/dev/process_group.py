"""Servers we start (the emulator, ``dagster dev``, a Spark Connect server), each in a session of
its own: waiting until one listens, and stopping its process group by its leader's PID.

Servers have children of their own and may ignore SIGTERM while work is in flight, so stopping
escalates to SIGKILL of the group after a grace period.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from cs_platform.dev.deadline import Deadline


class ServerStartError(RuntimeError):
    """A server we started exited, or did not listen in time; the message carries the end of its log."""


PARENT_GUARD = Path(__file__).with_name("parent_guard.py")


def start_in_own_session(
    command: Sequence[str], env: Mapping[str, str] | None = None, user: int | None = None, group: int | None = None, **popen: Any
) -> subprocess.Popen:
    """Start ``command`` in a session of its own, as ``user`` and ``group`` (IDs) if given, that
    gets SIGTERM if the thread that started it ends first (Linux), so a killed test or tool leaves
    no server behind; ``popen`` goes to Popen.

    Through :mod:`parent_guard`, not a ``preexec_fn``: subprocess then spawns with vfork and runs no
    Python between fork and exec (see parent_guard for what that prevents). An executable that is
    not on ``env``'s PATH raises FileNotFoundError here, as Popen would."""
    search_path = (env if env is not None else os.environ).get("PATH", os.defpath)
    executable = shutil.which(command[0], path=search_path)
    if executable is None:
        raise FileNotFoundError(f"{command[0]}: not found on PATH ({search_path})")
    account = ["-" if user is None else str(user), "-" if group is None else str(group)]
    guarded = [sys.executable, "-I", "-S", str(PARENT_GUARD), str(os.getpid()), *account, executable, *command]
    return subprocess.Popen(guarded, env=env, start_new_session=True, **popen)


def launch(command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """Start ``command`` (:func:`start_in_own_session`), its output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return start_in_own_session(command, env, stdout=log, stderr=subprocess.STDOUT, **popen)


def await_listening(process: subprocess.Popen, port: int, log_path: Path, what: str, timeout_s: float = 60) -> None:
    """Return once ``process`` listens on 127.0.0.1:``port`` (a deadline scaled by the machine's
    load); stop it and raise :class:`ServerStartError` naming ``what`` otherwise."""
    deadline = Deadline(timeout_s)
    if wait_until_listening(process, port, deadline.expired):
        return
    if process.poll() is not None:
        raise ServerStartError(f"{what} exited with {process.returncode} while starting:\n{tail(log_path)}")
    stop_process_group(process, grace_s=5)
    raise ServerStartError(f"{what} did not listen on port {port} within {deadline.describe()}:\n{tail(log_path)}")


def start_server(
    command: Sequence[str], port: int, log_path: Path, what: str, timeout_s: float = 60,
    env: Mapping[str, str] | None = None, **popen: Any,
) -> subprocess.Popen:
    """:func:`launch` ``command``, then :func:`await_listening` on ``port``."""
    process = launch(command, log_path, env, **popen)
    await_listening(process, port, log_path, what, timeout_s)
    return process


def tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


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
    """SIGTERM the process group we started, SIGKILL it if it is still there after ``grace_s``;
    then SIGKILL whatever it had started in sessions of their own (Dagster's code servers) and
    left behind."""
    if process.poll() is not None:
        return
    started = _descendants(process.pid)
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for pid, start_time in started.items():
        if _start_time(pid) == start_time:  # the same process, not a new one with its PID
            os.kill(pid, signal.SIGKILL)


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> dict[int, str]:
    """Every live descendant of ``root``: PID -> start time (from /proc, Linux only)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                start_time = _start_time(pid)
                if start_time is not None:
                    found[pid] = start_time
                    frontier.append(pid)
    return found
