"""``cs-platform-metrics``: each configured stream's progress as Prometheus metrics.

The exporter reads each stream's state where the product keeps it, not from Dagster: the partition
metadata table (the partitions by state, their watermarks), the lake's Delta logs (the latest
published cut, the changelog's ingest marks) and the landing directory. So the exporter needs no
Dagster process, survives any run's restart, and shows a stream whose runs have all stopped (a
stopped stream is exactly what an alert must see).

What a scrape costs does not grow with the scrapers: one scrape is answered at a time, from facts
read at most every ``CS_PLATFORM_METRICS_REFRESH_SECONDS`` (the ages are taken at the scrape, so
they keep moving between reads). A read of a stream's facts is two queries of the metadata table
(the unfinished partitions; the FINISHED ones counted by Spanner), one or two Delta commit files
and a listing of the landing directories of the partitions still live (a finished partition's
directory gets no new file: listed once, then remembered); the retention period is read at most
every ``RETENTION_READ_EVERY``. Any error reading a stream is its ``scrape_error``, never a failed
scrape.

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

from prometheus_client import start_http_server
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

from cs_platform import settings
from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.lake.layout import stream_root
from cs_platform.lake.published import ingested_landing, lake_location, latest_cut
from cs_platform.landing.store import LandingStore
from cs_platform.stream.source import StreamSource

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


class WaitingFiles:
    """Landing files of a stream above their directory's ingest mark (``lake/changelog.py``),
    counted without listing every file on every read: a partition's directory is listed while the
    partition is live (or new to this object); once the partition is FINISHED its run landed its
    last file, so the names listed after that are kept and only compared with the marks as they
    move."""

    def __init__(self, landing: LandingStore, stream: str) -> None:
        self.landing = landing
        self.stream = stream
        self._final: dict[str, list[str]] = {}  # partition key -> its names, listed after it finished

    def count(self, marks: Mapping[str, str], live_keys: set[str]) -> int:
        keys = self.landing.partition_keys(self.stream)
        present = set(keys)
        self._final = {k: names for k, names in self._final.items() if k in present}  # cleanup removed the rest
        total = 0
        for key in keys:
            names = self._final.get(key)
            if names is None:
                names = self.landing.names_in(self.stream, key)
                if key not in live_keys:
                    self._final[key] = names
            mark = marks.get(self.landing.location.uri(self.landing.directory(self.stream, key)), "")
            total += sum(name > mark for name in names)
        return total


@dataclass(frozen=True)
class StreamFacts:
    """What one read of a stream's state found; the ages are taken from it at each scrape."""

    partitions: dict[PartitionState, int]
    low_watermark: datetime | None
    oldest_unread_since: datetime | None  # when the oldest partition no run has taken was created
    cut: datetime | None
    cut_apply_s: float | None
    landing_files_waiting: int
    retention: timedelta

    def at(self, stream: str, now: datetime) -> StreamMetrics:
        low = self.low_watermark
        return StreamMetrics(
            stream=stream,
            partitions=self.partitions,
            low_watermark_lag_s=None if low is None else (now - low).total_seconds(),
            oldest_unread_partition_age_s=0.0 if self.oldest_unread_since is None else (now - self.oldest_unread_since).total_seconds(),
            latest_cut_age_s=None if self.cut is None else (now - self.cut).total_seconds(),
            latest_cut_apply_s=self.cut_apply_s,
            landing_files_waiting=self.landing_files_waiting,
            retention_headroom_s=None if low is None else (self.retention - (now - low)).total_seconds(),
        )


def stream_facts(store: PartitionMetadataStore, waiting: WaitingFiles, lake_root: str, retention: Callable[[], timedelta]) -> StreamFacts:
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
    live = {p.key for p in unfinished.partitions} if unfinished else set()
    return StreamFacts(
        partitions=partitions,
        low_watermark=low,
        oldest_unread_since=min(waiting_since, default=None),
        cut=None if cut is None else cut.cut,
        cut_apply_s=None if cut is None else cut.seconds,
        landing_files_waiting=waiting.count(ingested_landing(lake_root), live),
        retention=retention() if low is not None else timedelta(0),
    )


class StreamsCollector(Collector):
    """Every stream's metrics when Prometheus scrapes: one scrape at a time, from facts at most
    ``refresh_s`` old (module docstring)."""

    def __init__(self, environ: Mapping[str, str], clock: Callable[[], datetime] = utc_now) -> None:
        settings.check_all(environ)  # a bad value fails the exporter's start, named
        self.sources = {stream: StreamSource.from_settings(environ, stream) for stream in settings.value(environ, "CS_PLATFORM_CHANGE_STREAMS")}
        self.streams = list(self.sources)
        self.landing = LandingStore(settings.value(environ, "CS_PLATFORM_LANDING_ROOT"))
        self.lake_root = settings.value(environ, "CS_PLATFORM_LAKE_ROOT")
        self.refresh_s = settings.value(environ, "CS_PLATFORM_METRICS_REFRESH_SECONDS")
        self.clock = clock
        self.reads = 0  # reads of the streams' state, for tests and benchmarks
        self._waiting = {stream: WaitingFiles(self.landing, stream) for stream in self.streams}
        self._facts: dict[str, tuple[float, StreamFacts | None]] = {}  # stream -> (read at, facts; None: the read failed)
        self._retention: dict[str, tuple[float, timedelta]] = {}
        self._scrape = threading.Lock()

    def _retention_of(self, stream: str) -> Callable[[], timedelta]:
        def read() -> timedelta:
            read_at, period = self._retention.get(stream, (float("-inf"), timedelta(0)))
            if time.monotonic() - read_at >= RETENTION_READ_EVERY.total_seconds():
                period = self.sources[stream].retention_period()
                self._retention[stream] = (time.monotonic(), period)
            return period

        return read

    def facts(self, stream: str) -> StreamFacts | None:
        """The stream's facts, read again if older than ``refresh_s``; None if that read failed
        (logged). Call with the scrape lock held."""
        read_at, facts = self._facts.get(stream, (float("-inf"), None))
        return facts if time.monotonic() - read_at < self.refresh_s else self.read(stream)

    def read(self, stream: str) -> StreamFacts | None:
        """Read the stream's state now (``facts`` does when its last read is too old)."""
        self.reads += 1
        store, lake_root = self.sources[stream].metadata_store(), stream_root(self.lake_root, stream)
        try:
            facts = stream_facts(store, self._waiting[stream], lake_root, self._retention_of(stream))
        except Exception as e:  # whatever broke: an exporter reports what it cannot read (scrape_error) and serves the rest
            log.warning("stream %s: reading its state failed: %s: %s", stream, type(e).__name__, e)
            facts = None
        self._facts[stream] = (time.monotonic(), facts)
        return facts

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
        with self._scrape:  # one scrape at a time: concurrent scrapers wait and share the facts read
            found = {stream: self.facts(stream) for stream in self.streams}
        now = self.clock()
        for stream, facts in found.items():
            gauges["scrape_error"].add_metric([stream], int(facts is None))
            if facts is None:
                continue
            figures = facts.at(stream, now)
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
