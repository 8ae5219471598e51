"""What the kill tests' child processes share: markers written whole, and a lake step that stops dead after a mirror or history table commits."""

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable


def write_marker(path: Path, text: str) -> None:
    """Write a marker whole or not at all (a file beside it, then renamed over it): the test polls
    for the marker's path and reads it as soon as it exists, and a file created but not yet written
    read as empty once (seen in a loaded suite: a JSONDecodeError at its first character)."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def stopping_after(write: Callable, marker: Path, when: Callable[[Any], str | None] = lambda table: "", pause: bool = False) -> Callable:
    """``write(spark, mirror, ...)`` that, once it has committed, writes ``marker`` and waits for
    SIGKILL (the test kills the process group there), or with ``pause`` stops itself with SIGSTOP
    (this Python process only: its Spark JVM goes on) and, once resumed, goes on as if nothing
    happened; only once ``when(mirror)`` is not None, and then with what it returned after the
    mirror's URI."""

    def write_then_stop(spark, mirror, *args):
        written = write(spark, mirror, *args)
        found = when(mirror)
        if found is not None:
            write_marker(marker, f"{mirror.uri}\n{found}")
            if pause:
                os.kill(os.getpid(), signal.SIGSTOP)
                return written
            time.sleep(3600)
        return written

    return write_then_stop
