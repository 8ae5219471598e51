"""What the kill tests' child processes share: a lake step that stops dead after a mirror or history table commits."""

import time
from pathlib import Path
from typing import Any, Callable


def stopping_after(write: Callable, marker: Path, when: Callable[[Any], str | None] = lambda table: "") -> Callable:
    """``write(spark, mirror, ...)`` that, once it has committed, writes ``marker`` and waits for
    SIGKILL (the test kills the process group there); only once ``when(mirror)`` is not None, and
    then with what it returned after the mirror's URI."""

    def write_then_stop(spark, mirror, *args):
        written = write(spark, mirror, *args)
        found = when(mirror)
        if found is not None:
            marker.write_text(f"{mirror.uri}\n{found}")
            time.sleep(3600)
        return written

    return write_then_stop
