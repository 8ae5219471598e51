"""``cs-platform-metrics``: each configured stream's progress as Prometheus metrics.

Every scrape reads the stream's state where the product keeps it, not from Dagster: the partition
metadata table (the partitions by state, their watermarks), the lake's Delta logs (the latest
published cut, the changelog's ingest marks) and the landing directory. So the exporter needs no
Dagster process, survives any run's restart, and shows a stream whose runs have all stopped (a
stopped stream is exactly what an alert must see). A scrape costs three small reads per stream;
the retention period is read at most every ``RETENTION_READ_EVERY``.

Metrics, each with label ``stream`` (``docs/operations.md`` has the alert rules to write on them):

- ``cs_platform_low_watermark_lag_seconds``: now minus the low watermark (every record at or
  before it is landed); absent once every partition is FINISHED (the stream reached its end);
- ``cs_platform_latest_cut_age_seconds``: now minus the latest published cut (what readers see);
- ``cs_platform_latest_cut_apply_seconds``: how long the latest cut took to apply and publish;
- ``cs_platform_partitions{state}``: partitions CREATED, SCHEDULED, RUNNING and FINISHED (the
  finished ones cleanup has not removed yet);
- ``cs_platform_oldest_unread_partition_age_seconds``: how long the oldest partition no run has
  taken (CREATED or SCHEDULED) has waited since it was created; 0 when none waits;
- ``cs_platform_landing_files_waiting``: landing files the changelog has not ingested;
- ``cs_platform_retention_headroom_seconds``: how long until the oldest unread record leaves the
  change stream's retention (``retention_period`` minus the low watermark's age);
- ``cs_platform_scrape_error``: 1 when a read for the stream failed (its error in the log), else 0.

    cs-platform-metrics [--port 9464] [--host 127.0.0.1]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterator, Mapping

from google.api_core.exceptions import GoogleAPIError
from prometheus_client import start_http_server
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

from cs_platform import settings
from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.errors import CsPlatformError
from cs_platform.lake.layout import stream_root
from cs_platform.lake.published import ingested_landing, lake_location, latest_cut
from cs_platform.landing.store import LandingStore
from cs_platform.stream_source import StreamSource

log = logging.getLogger(__name__)

RETENTION_READ_EVERY = timedelta(minutes=10)  # a stream's retention_period changes by DDL only
PREFIX = "cs_platform_"


@dataclass(frozen=True)
class StreamMetrics:
    """One stream's figures at ``now``; None where there is nothing to say."""

    stream: str
    partitions: dict[PartitionState, int]
    low_watermark_lag_s: float | None
    oldest_unread_partition_age_s: float
    latest_cut_age_s: float | None
    latest_cut_apply_s: float | None
    landing_files_waiting: int
    retention_headroom_s: float | None


def waiting_files(landing: LandingStore, stream: str, marks: Mapping[str, str]) -> int:
    """Landing files of ``stream`` above their directory's ingest mark (``lake/changelog.py``)."""
    count = 0
    for path in landing.files(stream):
        directory, _, name = path.rpartition("/")
        count += name > marks.get(directory, "")
    return count


def stream_metrics(
    stream: str, store: PartitionMetadataStore, landing: LandingStore, lake_root: str, retention: Callable[[], timedelta], now: datetime
) -> StreamMetrics:
    unfinished = store.unfinished() if store.table_exists() else None
    partitions = {state: 0 for state in PartitionState}
    waiting_since: list[datetime] = []
    for partition in unfinished.partitions if unfinished else ():
        partitions[partition.state] += 1
        if partition.state in (PartitionState.CREATED, PartitionState.SCHEDULED):
            waiting_since.append(partition.created_at or partition.start_timestamp)
    partitions[PartitionState.FINISHED] = store.count_finished() if unfinished else 0
    low = unfinished.low_watermark if unfinished else None
    cut = latest_cut(lake_location(lake_root))
    marks = ingested_landing(lake_root)
    return StreamMetrics(
        stream=stream,
        partitions=partitions,
        low_watermark_lag_s=None if low is None else (now - low).total_seconds(),
        oldest_unread_partition_age_s=max(((now - t).total_seconds() for t in waiting_since), default=0.0),
        latest_cut_age_s=None if cut is None else (now - cut.cut).total_seconds(),
        latest_cut_apply_s=None if cut is None else cut.seconds,
        landing_files_waiting=waiting_files(landing, stream, marks),
        retention_headroom_s=None if low is None else (retention() - (now - low)).total_seconds(),
    )


class StreamsCollector(Collector):
    """Computes every stream's metrics when Prometheus scrapes (no figure is older than the scrape)."""

    def __init__(self, environ: Mapping[str, str], clock: Callable[[], datetime] = utc_now) -> None:
        settings.check_all(environ)  # a bad value fails the exporter's start, named
        self.sources = {stream: StreamSource.from_settings(environ, stream) for stream in settings.value(environ, "CS_PLATFORM_CHANGE_STREAMS")}
        self.streams = list(self.sources)
        self.landing = LandingStore(settings.value(environ, "CS_PLATFORM_LANDING_ROOT"))
        self.lake_root = settings.value(environ, "CS_PLATFORM_LAKE_ROOT")
        self.clock = clock
        self._retention: dict[str, tuple[float, timedelta]] = {}
        self._lock = threading.Lock()

    def _retention_of(self, stream: str) -> Callable[[], timedelta]:
        def read() -> timedelta:
            with self._lock:
                read_at, period = self._retention.get(stream, (float("-inf"), timedelta(0)))
                if time.monotonic() - read_at >= RETENTION_READ_EVERY.total_seconds():
                    period = self.sources[stream].retention_period()
                    self._retention[stream] = (time.monotonic(), period)
                return period

        return read

    def measure(self, stream: str) -> StreamMetrics:
        store, lake_root = self.sources[stream].metadata_store(), stream_root(self.lake_root, stream)
        return stream_metrics(stream, store, self.landing, lake_root, self._retention_of(stream), self.clock())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = {
            "low_watermark_lag_seconds": "Now minus the low watermark: every record at or before it is landed",
            "latest_cut_age_seconds": "Now minus the latest published cut, what readers of the lake see",
            "latest_cut_apply_seconds": "How long the latest cut took to apply and publish",
            "oldest_unread_partition_age_seconds": "How long the oldest partition no run has taken has waited",
            "landing_files_waiting": "Landing files the changelog has not ingested",
            "retention_headroom_seconds": "How long until the oldest unread record leaves the change stream's retention",
            "scrape_error": "1 when reading the stream's state failed (see the exporter's log)",
        }
        gauges = {name: GaugeMetricFamily(PREFIX + name, text, labels=["stream"]) for name, text in families.items()}
        partitions = GaugeMetricFamily(PREFIX + "partitions", "Partitions by state", labels=["stream", "state"])
        for stream in self.streams:
            try:
                figures = self.measure(stream)
            except (CsPlatformError, GoogleAPIError, OSError) as e:  # Spanner, the lake's or landing's storage
                log.warning("stream %s: reading its state failed: %s", stream, e)
                gauges["scrape_error"].add_metric([stream], 1)
                continue
            gauges["scrape_error"].add_metric([stream], 0)
            for state, count in figures.partitions.items():
                partitions.add_metric([stream, state.value], count)
            for name, figure in (
                ("low_watermark_lag_seconds", figures.low_watermark_lag_s),
                ("latest_cut_age_seconds", figures.latest_cut_age_s),
                ("latest_cut_apply_seconds", figures.latest_cut_apply_s),
                ("oldest_unread_partition_age_seconds", figures.oldest_unread_partition_age_s),
                ("landing_files_waiting", figures.landing_files_waiting),
                ("retention_headroom_seconds", figures.retention_headroom_s),
            ):
                if figure is not None:
                    gauges[name].add_metric([stream], figure)
        yield partitions
        yield from gauges.values()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cs-platform-metrics", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=settings.value(os.environ, "CS_PLATFORM_METRICS_PORT"), help="port to serve /metrics on (CS_PLATFORM_METRICS_PORT)")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default loopback)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    REGISTRY.register(StreamsCollector(os.environ))
    server, _ = start_http_server(args.port, addr=args.host)
    print(f"cs_platform metrics at http://{args.host}:{server.server_port}/metrics", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
