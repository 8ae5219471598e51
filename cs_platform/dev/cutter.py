"""Consistent cuts on a timer while a stream is being read, for the demo and tests: each one is
``pipeline.advance_lake``, exactly what the lake asset runs on each materialization."""

from __future__ import annotations

import logging
import threading

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.lake.cuts import CutResult, Lake
from cs_platform.lake.snapshot import SnapshotResult
from cs_platform.landing.store import LandingStore
from cs_platform.pipeline import advance_lake

log = logging.getLogger(__name__)


class Cutter:
    def __init__(
        self, lake: Lake, landing: LandingStore, store: PartitionMetadataStore, target: SpannerTarget, stream: str, interval_s: float = 3
    ) -> None:
        self.lake, self.landing, self.store, self.target, self.stream = lake, landing, store, target, stream
        self.interval_s = interval_s
        self.results: list[CutResult] = []
        self.snapshot: SnapshotResult | None = None  # the lake's start, once a cut took it
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cutter", daemon=True)

    def cut_now(self) -> CutResult | None:
        advance = advance_lake(self.lake, self.landing, self.store, self.target, self.stream)
        if advance is None:
            return None
        if advance.snapshot is not None:
            self.snapshot = advance.snapshot
        if advance.result.applied:
            self.results.append(advance.result)
            log.info("cut %s: %d transactions, %d mods", advance.cut.isoformat(), advance.result.transactions, advance.result.mods)
        return advance.result

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cut_now()
            except BaseException as e:  # re-raised by stop(): a failed cut must not pass silently
                self._error = e
                return
            self._stop.wait(self.interval_s)

    def start(self) -> "Cutter":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, re-raise a failure of the background cuts, then cut once more."""
        self._stop.set()
        self._thread.join()
        if self._error:
            raise self._error
        self.cut_now()
