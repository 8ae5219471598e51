"""The Ivy cache Spark resolves jars into (Delta's, Google's GCS connector), one resolver at a time,
and what each resolution gave, so that later JVMs start on the resolved jars without resolving.

Ivy's cache is not safe for two resolvers at once: two JVMs that resolve into it together (the
test suite's parallel workers on a fresh machine, a run starting beside another) can leave a
half-written file, or one gateway exits before it reports its port. Everything here that resolves
into the cache holds :func:`ivy_lock` meanwhile, an advisory file lock beside the cache.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
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


def resolved_jars(packages: str, ivy_home: Path = IVY_HOME) -> list[str] | None:
    """The jars Spark resolved for ``packages`` (its ``spark.jars.packages``) on an earlier start on
    this machine, in Spark's order, or None if none did or one of the jars has gone since.

    A JVM started with ``spark.jars.packages`` resolves them again at every start even when all are
    cached (3-13 s of Ivy, seen in the suite's lake runs) and holds :func:`ivy_lock` meanwhile, so
    JVMs start one at a time; one started with the resolved jars as ``spark.jars`` does neither."""
    try:
        jars = _record(packages, ivy_home).read_text().split()
    except FileNotFoundError:
        return None
    return jars if jars and all(Path(jar.removeprefix("file://")).is_file() for jar in jars) else None


def remember_resolved(packages: str, spark_jars: str, ivy_home: Path = IVY_HOME) -> None:
    """Record what a JVM started with ``packages`` resolved them to (its ``spark.jars``: the cached
    jars' ``file://`` URLs), written whole or not at all."""
    jars = [jar for jar in spark_jars.split(",") if jar]
    if not jars:
        return
    record = _record(packages, ivy_home)
    record.parent.mkdir(parents=True, exist_ok=True)
    partial = record.with_name(f".{record.name}.{os.getpid()}")
    partial.write_text("\n".join(jars) + "\n")
    partial.replace(record)


def _record(packages: str, ivy_home: Path) -> Path:
    return ivy_home / "cs_platform-resolved" / f"{hashlib.sha256(packages.encode()).hexdigest()[:16]}.txt"
