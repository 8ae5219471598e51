"""The Ivy cache Spark resolves jars into (Delta's, Google's GCS connector), one resolver at a time.

Ivy's cache is not safe for two resolvers at once: two JVMs that resolve into it together (the
test suite's parallel workers on a fresh machine, a run starting beside another) can leave a
half-written file, or one gateway exits before it reports its port. Everything here that resolves
into the cache holds :func:`ivy_lock` meanwhile, an advisory file lock beside the cache.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

IVY_HOME = Path.home() / ".ivy2.5.2"


@contextmanager
def ivy_lock(ivy_home: Path = IVY_HOME) -> Iterator[None]:
    """Hold the cache's lock (waiting for another process's resolution to end)."""
    ivy_home.mkdir(parents=True, exist_ok=True)
    with open(ivy_home / ".cs_platform.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
