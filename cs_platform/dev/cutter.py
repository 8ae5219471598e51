"""A lake run in a thread while a stream is being read, for the demo and tests: it is
``lake_steps.keep_cutting``, exactly what the lake asset runs in a sensor-launched lake run."""

from __future__ import annotations

import logging
import math
import threading

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.lake.snapshot import SnapshotResult
from cs_platform.lake.stream_lake import CutResult, Lake
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import keep_cutting

log = logging.getLogger(__name__)


class Cutter:
    def __init__(
        self, lake: Lake, landing: LandingStore, store: PartitionMetadataStore, target: SpannerTarget, stream: str, interval_s: float
    ) -> None:
        self.lake, self.landing, self.store, self.target, self.stream = lake, landing, store, target, stream
        self.interval_s = interval_s
        self.results: list[CutResult] = []
        self.snapshot: SnapshotResult | None = None  # the lake's start, once a cut took it
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cutter", daemon=True)

    def _run(self) -> None:
        try:
            for taken in keep_cutting(self.lake, self.landing, self.store, self.target, self.stream, math.inf, self.interval_s, self._stop):
                advance = taken.advance
                self.snapshot = advance.snapshot or self.snapshot
                if advance.result.applied:
                    self.results.append(advance.result)
                    log.info(
                        "cut %s: %d transactions, %d mods, in %.1f s",
                        advance.cut.isoformat(), advance.result.transactions, advance.result.mods, advance.seconds,
                    )
        except BaseException as e:  # re-raised by stop(): a failed cut must not pass silently
            self._error = e

    def start(self) -> "Cutter":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after one more cut (none if the stream's end is already applied), and re-raise a
        failure of the cuts."""
        self._stop.set()
        self._thread.join()
        if self._error:
            raise self._error
