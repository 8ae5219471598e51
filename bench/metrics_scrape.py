"""What a metrics scrape costs on a stream with a long history (issue 55: 10,000 finished
partitions, 100,000 landing files).

On a private emulator the metadata table holds F FINISHED partitions and L live ones
(``sensor_scale.MetadataHistory``); the landing directory holds F + L partition directories with
``--files`` files between them, none ingested. Timed, in the same run:

- ``full_read_s``: what every scrape did before (a recursive listing of the whole landing, each file
  compared with its directory's mark; the FINISHED partitions' keys read and counted in Python):
  the baseline;
- ``read_cold_s``: the exporter's first read of the stream's state (every directory listed once);
- ``read_warm_s``: a later read (only the live partitions' directories listed again);
- ``scrape_cached_s``: a scrape within the refresh interval (no read at all), and
  ``scrapes_at_once_reads``: the reads eight concurrent scrapes made (goal: 1).

    .venv/bin/python bench/metrics_scrape.py [--finished 10000 --live 48 --files 100000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import threading
import time
from pathlib import Path

from google.cloud import spanner
from prometheus_client import CollectorRegistry, generate_latest

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionState
from cs_platform.defs.resources import change_stream_resource_key, configured_resources
from cs_platform.dev.embedded import STREAM, embedded_bank
from cs_platform.landing.store import LandingStore
from cs_platform.metrics import StreamsCollector
from sensor_scale import MetadataHistory


def write_landing(root: Path, keys: list[str], files: int) -> None:
    per = max(1, files // len(keys))
    for i, key in enumerate(keys):
        directory = root / STREAM / key
        directory.mkdir(parents=True, exist_ok=True)
        for n in range(per if i < len(keys) - 1 else files - per * (len(keys) - 1)):
            (directory / f"20260101T000000000000Z_20260101T{n // 3600 % 24:02d}{n // 60 % 60:02d}{n % 60:02d}000000Z_1.json.gz").touch()


def full_read(store, landing: LandingStore) -> int:
    """The scrape before the cache: every landing file listed and compared, every FINISHED key read."""
    finished = spanner.KeySet(ranges=[spanner.KeyRange(start_closed=[PartitionState.FINISHED.value], end_closed=[PartitionState.FINISHED.value])])
    with store.database.snapshot() as snap:
        counted = sum(1 for _ in snap.read(store.table, ["PartitionToken"], finished, index=f"{store.table}ByState"))
    store.unfinished()
    waiting = sum(path.rpartition("/")[2] > "" for path in landing.files(STREAM))
    return counted + waiting


def timed(work, times: int = 3) -> float:
    seconds = []
    for _ in range(times):
        began = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=10_000)
    parser.add_argument("--live", type=int, default=48)
    parser.add_argument("--files", type=int, default=100_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with embedded_bank(Path(".demo/bench_metrics_scrape")):
        os.environ["CS_PLATFORM_METRICS_REFRESH_SECONDS"] = "3600"  # reads below are called, never waited for
        store = configured_resources(os.environ)[change_stream_resource_key(STREAM)].metadata_store()
        store.initialize(None, None, 1000)
        store.transition([INITIAL_PARTITION_TOKEN], PartitionState.FINISHED)
        history = MetadataHistory(store, args.finished)
        history.grow_to(args.finished, args.live)
        rows = store.all()
        landing_root = Path(os.environ["CS_PLATFORM_LANDING_ROOT"])
        began = time.perf_counter()
        write_landing(landing_root, [p.key for p in rows], args.files)
        print(f"# {len(rows)} partitions ({args.finished} finished) and {args.files} landing files written in {time.perf_counter() - began:.0f}s", flush=True)
        landing = LandingStore(str(landing_root))

        full = timed(lambda: full_read(store, landing))
        collector = StreamsCollector(os.environ)
        began = time.perf_counter()
        facts = collector.facts(STREAM)
        cold = time.perf_counter() - began
        assert facts is not None and facts.landing_files_waiting == args.files, facts
        warm = timed(lambda: collector.read(STREAM))
        registry = CollectorRegistry()
        registry.register(collector)
        cached = timed(lambda: generate_latest(registry), times=5)
        concurrent = StreamsCollector(os.environ)  # nothing read yet: eight scrapes at once
        registry = CollectorRegistry()
        registry.register(concurrent)
        scrapes = [threading.Thread(target=generate_latest, args=(registry,)) for _ in range(8)]
        for thread in scrapes:
            thread.start()
        for thread in scrapes:
            thread.join()
        load = os.getloadavg()[0]
        print(f"full_read_s: {full:.2f}  # the baseline, load {load:.1f}")
        print(f"read_cold_s: {cold:.2f}")
        print(f"read_warm_s: {warm:.3f}")
        print(f"read_warm_over_full: {warm / full:.3f}")
        print(f"scrape_cached_s: {cached:.4f}")
        print(f"scrapes_at_once_reads: {concurrent.reads}")


if __name__ == "__main__":
    main()
