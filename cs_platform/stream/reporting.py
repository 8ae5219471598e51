"""How often a live run writes its progress to Dagster's storage.

A reader run lands every couple of seconds and a lake run cuts every few. With an event for each
(an observation and a log line per landing, two materializations, four check evaluations and a log
line per cut), Dagster's run storage grew with landings, not with work: 46-49 MB per long-lived
partition-day, about 0.6 GB per stream-day of cuts. So a run reports at most once per
CS_PLATFORM_REPORT_INTERVAL_SECONDS, one report covering everything since the last, and at once
only what a user must see at once (the run's first landing or cut, a check whose outcome changed, a
table joining or leaving). What is not reported is not lost: every landed file is in the landing
directory, every published cut in the manifest, and each report names how many it covers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Cadence:
    """Says when a report is due: the first time, when urgent, and then every ``every_s`` seconds.

    ``every_s`` of 0 reports every time (one event per landing or cut, as before this existed)."""

    every_s: float
    clock: Callable[[], float] = time.monotonic
    _last: float | None = field(default=None, init=False)

    def due(self, urgent: bool = False) -> bool:
        """True if a report is due now; the wait for the next starts from this answer."""
        now = self.clock()
        if urgent or self._last is None or now - self._last >= self.every_s:
            self._last = now
            return True
        return False


def liveness_beat_seconds(stale_run_seconds: float) -> float:
    """How often a run marks itself alive (a run tag, an update in the run storage): often enough that
    a live run is never ``stale_run_seconds`` quiet, at most every 10 s, never more than twice a second."""
    return max(0.5, min(10.0, stale_run_seconds / 4))
