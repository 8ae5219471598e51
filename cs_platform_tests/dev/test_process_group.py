"""Servers we start: they die with their starter, and starting one runs no Python in a forked copy
of a threaded process (what hung and crashed a test worker before)."""

import os
import pwd
import signal
import subprocess
import sys
import textwrap

import pytest

from cs_platform.dev.deadline import wait_until
from cs_platform.dev.process_group import PARENT_GUARD, start_in_own_session


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().decode().split("\0")[:-1]


def python(code: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, **popen)


def test_a_server_dies_with_the_process_that_started_it():
    starter = python(
        """
        import time
        from cs_platform.dev.process_group import start_in_own_session
        server = start_in_own_session(["sleep", "600"])
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    server = int(starter.stdout.readline())
    assert not gone(server)
    starter.kill()  # SIGKILL: no cleanup of its own runs
    starter.wait(timeout=30)
    wait_until(lambda: gone(server), 30, f"the server (PID {server}) ending after its starter was killed", poll_s=0.1)


def test_starting_a_server_runs_no_python_in_a_forked_copy():
    """A preexec_fn would run the interpreter's fork hooks (and Python) in the copy."""
    starter = python(
        """
        import os
        from cs_platform.dev.process_group import start_in_own_session
        os.register_at_fork(before=lambda: print("forked", flush=True))
        assert start_in_own_session(["true"]).wait(timeout=30) == 0
        print("started", flush=True)
        """
    )
    out, _ = starter.communicate(timeout=60)
    assert starter.returncode == 0 and out.split() == ["started"], out


def test_the_guard_does_not_start_a_server_whose_starter_is_already_gone(tmp_path):
    """The signal is asked for after the spawn: a starter that died in between is caught by PID."""
    marker = tmp_path / "started"
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(PARENT_GUARD), "1", "-", "-", "/usr/bin/touch", "touch", str(marker)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and "(PID 1) is gone" in done.stderr and not marker.exists()


def test_a_missing_program_is_named_at_once():
    with pytest.raises(FileNotFoundError, match="no-such-server"):
        start_in_own_session(["no-such-server", "--port", "1"], env={**os.environ, "PATH": "/nonexistent"})


def test_a_server_is_the_leader_of_a_session_of_its_own():
    server = start_in_own_session(["sleep", "60"])
    try:
        assert os.getsid(server.pid) == server.pid and os.getpgid(server.pid) == server.pid
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def test_a_server_started_as_another_account_runs_as_it_and_dies_with_its_starter():
    """PostgreSQL refuses root. Its account may not reach this interpreter (root's home is private),
    and Linux forgets the parent-death signal when the account changes: the guard takes the account
    first, then asks for the signal. Under root the account is ``nobody``; any other user may only
    take its own, which still goes through the same setgid and setuid."""
    account = pwd.getpwnam("nobody") if os.geteuid() == 0 else pwd.getpwuid(os.geteuid())
    starter = python(
        f"""
        import time
        from cs_platform.dev.process_group import start_in_own_session
        server = start_in_own_session(["sleep", "600"], user={account.pw_uid}, group={account.pw_gid})
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    server = int(starter.stdout.readline())
    wait_until(lambda: command_line(server) == ["sleep", "600"], 30, "the guard becoming the server", poll_s=0.05)
    with open(f"/proc/{server}/status") as status:
        ids = {line.split(":")[0]: line.split()[1:] for line in status if line.startswith(("Uid", "Gid"))}
    assert ids["Uid"][0] == str(account.pw_uid) and ids["Gid"][0] == str(account.pw_gid), ids
    starter.kill()
    starter.wait(timeout=30)
    wait_until(lambda: gone(server), 30, f"the server (PID {server}) ending after its starter was killed", poll_s=0.1)
