"""Deadlines that scale with how loaded the machine is, for tools and tests that wait on events.

The machines are shared: with a load average of 25 on 2 cores, work that takes 30 s on a quiet
machine takes minutes. A :class:`Deadline` charges each second of wall time at
``1 / max(1, load average per core)``, so it still ends a real hang, but a slow machine alone does
not make a wait fail.
"""

from __future__ import annotations

import os
import time
from typing import Callable


def load_per_core() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.left = seconds
        self.started = self.last = time.monotonic()

    def expired(self) -> bool:
        now = time.monotonic()
        self.left -= (now - self.last) / max(1.0, load_per_core())
        self.last = now
        return self.left <= 0

    def describe(self) -> str:
        return f"{self.seconds:.0f}s budget, {time.monotonic() - self.started:.0f}s of wall time at load {load_per_core():.1f} per core"


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, poll_s: float = 1.0) -> None:
    """Poll ``predicate`` until it is true; TimeoutError naming ``what`` after ``timeout_s``, scaled
    by the machine's load (:class:`Deadline`)."""
    deadline = Deadline(timeout_s)
    while not predicate():
        if deadline.expired():
            raise TimeoutError(f"{what} not within {deadline.describe()}")
        time.sleep(poll_s)
