"""The lake's fence: only the newest writer of a stream's lake can change it.

A lake run, a rebuild and a maintenance pass each write the lake; Dagster runs them one at a time
(the lake tag's concurrency limit), but a run presumed dead (paused past the stale limit: a VM
pause, a long GC, slow storage) is only *marked* failed: it may wake up holding an old cut, and its
Spark JVM may go on committing what it was handed. Such a writer must not change the lake after
its successor has, whatever it was doing (docs/design.md, invariant 13).

How, with Delta's own transaction identifiers (the Delta protocol's "Transaction Identifiers";
delta-spark takes them from the writer options ``txnAppId``/``txnVersion`` or, for SQL commands
such as MERGE and DELETE, from the session confs below):

1. **An epoch.** A writer's first write takes one: a commit of one row to the lake's ``_fence`` table,
   whose Delta version is the epoch. Delta commits each version once (put-if-absent on the log, on
   a local disk and on GCS alike), so epochs are unique and increase in the order they were taken.
2. **A claim.** It then commits, to every table of the lake, an empty append carrying
   ``txnVersion = epoch << 32``. From then on Delta skips any write of an older epoch to that table
   (its ``txnVersion`` is lower), and a write of an older epoch that was already under way when the
   claim committed fails at its commit with a ``ConcurrentTransactionException`` (it read the
   identifier, the claim changed it). So every decision the new writer makes from a table's state
   (which mirror may be appended to, the history before the cut, the ingest marks) is made after
   the last write any older writer could make to it.
3. **Every write** carries ``epoch << 32 | n``, a new ``n`` for each group of writes in which no
   table is written twice (``writing``). A table created later by the new writer is claimed by its
   first write.
4. **Before and after publishing** a cut the writer reads the ``_fence`` log: if a newer epoch was
   taken, it stops with :class:`LakeFencedError` and publishes nothing more. A writer whose check
   passed and which then publishes finished every write of its cut before the newer writer took
   its epoch, so what it publishes is a cut, and the newer writer starts from it.

Schema changes (``ALTER TABLE``) carry no identifier in delta-spark, so the lake's writes evolve a
table's schema by a fenced empty append with ``mergeSchema`` instead (``mirrors.ensure_columns``).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cs_platform.errors import TerminalError
from cs_platform.lake.delta import DeltaPath, session_conf
from cs_platform.lake.delta_log import CLAIM

log = logging.getLogger(__name__)

APP_ID = "cs_platform.lake"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
FENCE_TABLE = "_fence"
EPOCH_BITS = 32  # a txnVersion is epoch << EPOCH_BITS | the writer's write group
CLAIMS_AT_ONCE = 4
CONCURRENT = ("ConcurrentTransactionException", "ConcurrentAppendException", "ConcurrentDeleteReadException", "ConcurrentDeleteDeleteException")


class LakeFencedError(TerminalError):
    """A newer writer took this stream's lake: this one wrote nothing after it, and stops."""


class Fence:
    """One writer's epoch of a lake: taken, and claimed on every table ``tables()`` lists, on first use."""

    def __init__(self, spark: SparkSession, table: DeltaPath, holder: str, tables: Callable[[], list[DeltaPath]]) -> None:
        self.spark = spark
        self.table = table  # the lake's _fence table
        self.holder = holder  # who writes: named in the fence's log and in errors
        self.tables = tables
        self._epoch: int | None = None
        self._writes = 0
        self._lock = threading.Lock()

    @property
    def epoch(self) -> int:
        with self._lock:
            if self._epoch is None:
                epoch = self._take()
                self._claim(epoch, self.tables())
                self._epoch = epoch
            return self._epoch

    def _take(self) -> int:
        """Commit one row to the fence table (an empty append commits nothing) and return the
        commit's version, found by a token."""
        token = uuid.uuid4().hex
        recorded = json.dumps({CLAIM: self.holder, "token": token})
        row = self.spark.range(1).select(F.lit(self.holder).alias("holder"), F.current_timestamp().alias("taken_at"))  # an empty append commits nothing
        for attempt in range(3):  # two writers creating the fence table at once: one of them tries again
            try:
                row.write.format("delta").mode("append").option("userMetadata", recorded).save(self.table.uri)
                break
            except (PySparkException, Py4JJavaError) as e:
                if attempt == 2 or not _conflict(e, "ProtocolChangedException", "MetadataChangedException"):
                    raise
        for version, metadata in self.table.recorded(claims=True):
            if metadata.get("token") == token:
                log.info("%s took epoch %d of the lake", self.holder, version)
                return version
        raise RuntimeError(f"the lake's fence table {self.table.uri} has no commit with token {token}: it was rewritten meanwhile")

    def _claim(self, epoch: int, tables: list[DeltaPath]) -> None:
        """Commit ``epoch`` to each of ``tables`` (module docstring, 2)."""
        version = epoch << EPOCH_BITS

        # Its own userMetadata, given: a writer's first write may be taken inside a session conf that names a cut.
        recorded = json.dumps({CLAIM: self.holder, "epoch": epoch})

        def claim(table: DeltaPath) -> None:
            writer = table.read(self.spark).limit(0).write.format("delta").mode("append").option("userMetadata", recorded)
            writer.option("txnAppId", APP_ID).option("txnVersion", version).save(table.uri)

        with self._guarded(epoch, "claiming the lake's tables"), ThreadPoolExecutor(min(len(tables), CLAIMS_AT_ONCE) or 1, "claim") as pool:
            list(pool.map(claim, tables))
        self._check(epoch, "claiming the lake's tables")

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Writes inside carry this writer's next transaction version: no table may be written
        twice inside (Delta would skip the second write, its version no higher)."""
        epoch = self.epoch
        with self._lock:
            self._writes += 1
            version = epoch << EPOCH_BITS | self._writes
        with session_conf(self.spark, {TXN_APP_ID: APP_ID, TXN_VERSION: str(version)}), self._guarded(epoch, "writing"):
            yield

    @contextmanager
    def _guarded(self, epoch: int, doing: str) -> Iterator[None]:
        """A Delta conflict inside is a fence if a newer epoch was taken (module docstring, 2)."""
        try:
            yield
        except (PySparkException, Py4JJavaError) as e:  # a JVM error PySpark does not map stays a Py4JJavaError
            if _conflict(e):
                self._check(epoch, doing)
            raise

    def check(self, doing: str) -> None:
        """Raise :class:`LakeFencedError` if a newer writer took the lake (module docstring, 4)."""
        self._check(self.epoch, doing)

    def _check(self, epoch: int, doing: str) -> None:
        newest = self.table.version()
        if newest is not None and newest > epoch:
            message = (
                f"{self.holder} was fenced while {doing}: a newer writer took the lake (epoch {newest}, this writer's {epoch}); "
                "it wrote nothing after that and stops: its successor carries on from the last published cut"
            )
            raise LakeFencedError(message)


def _conflict(error: Exception, *also: str) -> bool:
    """Whether ``error`` is a Delta commit conflict (one of ``CONCURRENT``, or of ``also``), by the
    exception class Delta names in it: PySpark maps none of them to a Python class of its own."""
    return any(name in str(error) for name in (*CONCURRENT, *also))
