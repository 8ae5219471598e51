"""How a read follows the live end of a partition: one streaming query, or polling past windows.

Cloud Spanner streams a query whose end timestamp is in the future: records arrive as they commit,
and the query ends at its end timestamp having returned everything up to it. That is the default.

The emulator cannot be read that way without loss. It serves a query in "chops": it scans
``[s, e)`` with ``e`` = the time the query arrived, then ``[e + 1 µs, e + 100 ms + 1 µs)`` and so
on until the end timestamp. The scans exclude their end and the next one starts 1 µs after it, so a
commit whose timestamp equals a chop boundary is never returned. With 100 ms chops that is about one
commit in 100,000 (seen once in this project's CI: a bank transfer missing from every landing file);
``python -m cs_platform.dev.chop_boundary_probe`` reproduces it with 1 ms chops, where about one commit
in 1,001 goes missing, each exactly on the boundary grid.

A query whose end timestamp is already past when it arrives is served by one scan that includes its
end, so on the emulator we poll: repeated queries ending ``settle`` before now, ``interval`` apart.
Records then arrive up to ``interval + settle`` later than a stream would deliver them; a read still
ends on the exact watermark of its soft deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class LiveTail:
    """``interval`` None: one query up to the deadline (Cloud Spanner). Otherwise poll (the emulator)."""

    interval: timedelta | None = None
    # How far behind this host's clock a polled window ends: the emulator must see the window's end
    # as already past, and it runs on loopback with the same clock, so a small margin suffices.
    settle: timedelta = timedelta(0)

    @property
    def polls(self) -> bool:
        return self.interval is not None

    def window_end(self, now: datetime, deadline: datetime) -> datetime:
        """The end timestamp of the next query of a read that must end at ``deadline``."""
        return min(deadline, now - self.settle) if self.polls else deadline

    def pause_s(self, now: datetime, deadline: datetime) -> float:
        """Seconds to wait before the next query: one interval, or less if the deadline settles
        sooner; none while streaming (a read narrowed into windows sends the next one at once)."""
        if not self.polls:
            return 0.0
        until_deadline = (deadline + self.settle - now).total_seconds()
        return max(0.0, min(self.interval.total_seconds(), until_deadline))


STREAMING = LiveTail()
POLLING = LiveTail(interval=timedelta(milliseconds=500), settle=timedelta(milliseconds=250))
