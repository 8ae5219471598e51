"""Apply consistent cuts on a timer while a stream is being read: what the mirrors asset does on
each materialization, for the demo and tests. Reads the low watermark first, then ingests the
landing files, then cuts (see cs_platform.lake.cuts)."""

from __future__ import annotations

import logging
import threading

from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.defs.lake_assets import stream_cut
from cs_platform.lake.cuts import CutResult, Lake
from cs_platform.landing.store import LandingStore

log = logging.getLogger(__name__)


class Cutter:
    def __init__(self, lake: Lake, landing: LandingStore, stream: str, store: PartitionMetadataStore, interval_s: float = 3) -> None:
        self.lake, self.landing, self.stream, self.store = lake, landing, stream, store
        self.interval_s = interval_s
        self.results: list[CutResult] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cutter", daemon=True)

    def cut_now(self) -> CutResult | None:
        cut = stream_cut(self.store)  # the watermark first, then the files
        files = self.landing.files(self.stream)
        if cut is None or not files:
            return None
        self.lake.changelog.ingest(files)
        result = self.lake.apply_cut(cut)
        if result.applied:
            self.results.append(result)
            log.info("cut %s: %d transactions, %d mods", cut.isoformat(), result.transactions, result.mods)
        return result

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
