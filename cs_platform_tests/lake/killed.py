"""What the kill tests' child processes share: a lake step that stops dead after a mirror commits."""

import time
from pathlib import Path
from typing import Callable


def stopping_after(write: Callable, marker: Path) -> Callable:
    """``write(spark, mirror, ...)`` that, once it has committed, writes ``marker`` and waits for
    SIGKILL (the test kills the process group there)."""

    def write_then_stop(spark, mirror, *args):
        written = write(spark, mirror, *args)
        marker.write_text(mirror.uri)
        time.sleep(3600)
        return written

    return write_then_stop
