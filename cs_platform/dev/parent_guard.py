"""Exec a command that Linux sends SIGTERM when the process that started it dies.

``process_group.launch`` runs servers through this script instead of a ``preexec_fn``: a
``preexec_fn`` makes ``subprocess`` fork (not vfork) a process that has gRPC's, Spark's and
Dagster's threads, then run Python in the copy before exec. A lock another thread held at the fork
stays held forever in the copy, so the copy can hang before exec, and the starter with it (Popen
waits for the exec); fork handlers run in the starter too. Started as
``python -I -S parent_guard.py <starter pid> <uid|-> <gid|-> <executable> <command ...>``: a fresh interpreter
that imports only the standard library takes the given group and user (here, not in Popen: the
server's account may not reach this interpreter, and Linux forgets the signal when they change),
asks for the signal, checks that the starter is still its parent (it may have died before the
request, and then nobody would send it), and becomes the command (its ``argv[0]`` as given).
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    starter, uid, gid, executable, command = int(argv[1]), argv[2], argv[3], argv[4], argv[5:]
    if gid != "-":
        os.setgid(int(gid))
    if uid != "-":
        os.setuid(int(uid))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != starter:
            sys.exit(f"parent_guard: the process that started {command[0]} (PID {starter}) is gone; not starting it")
    os.execv(executable, command)


if __name__ == "__main__":
    main(sys.argv)
