"""The exporter's costs and errors (the scrape of a live stream is in test_production_stack.py):
which landing files wait for the changelog, listed without listing every finished partition again;
one read of a stream's state however many scrape at once, at most every refresh interval; any
error reading a stream is its scrape_error, never a failed scrape."""

import os
import threading
import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cs_platform.changestream.metadata import utc_now
from cs_platform.landing.store import LandingStore
from cs_platform.metrics import StreamsCollector, WaitingFiles

NAMES = {
    "p1": [
        "20260101T000000000000Z_20260101T000001000000Z_10.json.gz",
        "20260101T000000000000Z_20260101T000002000000Z-000000100_5.json.gz",  # a piece sorts before the chunk that ends its transaction
        "20260101T000000000000Z_20260101T000002000000Z_10.json.gz",
    ],
    "p2": ["20260101T000000000000Z_20260101T000001000000Z_3.json.gz"],
}
LATER = "20260101T000000000000Z_20260101T000009000000Z_1.json.gz"


def test_files_above_their_directorys_ingest_mark_wait_and_a_finished_partition_is_listed_once(tmp_path):
    for partition, names in NAMES.items():
        (tmp_path / "S" / partition).mkdir(parents=True)
        for name in names:
            (tmp_path / "S" / partition / name).write_bytes(b"")
    landing = LandingStore(str(tmp_path))
    directory = {partition: landing.location.uri(landing.directory("S", partition)) for partition in NAMES}
    waiting = WaitingFiles(landing, "S")
    assert waiting.count({}, live_keys={"p1"}) == 4
    assert waiting.count({directory["p1"]: NAMES["p1"][0]}, live_keys={"p1"}) == 3  # p1's two above its mark, and p2's
    assert waiting.count({directory["p1"]: NAMES["p1"][2], directory["p2"]: NAMES["p2"][0]}, live_keys={"p1"}) == 0
    # p1 is live: its directory is listed again; p2 finished: its names, listed once, are kept.
    for partition in NAMES:
        (tmp_path / "S" / partition / LATER).write_bytes(b"")
    assert waiting.count({directory["p1"]: NAMES["p1"][2], directory["p2"]: NAMES["p2"][0]}, live_keys={"p1"}) == 1
    assert WaitingFiles(landing, "S").count({directory["p1"]: NAMES["p1"][2], directory["p2"]: NAMES["p2"][0]}, live_keys={"p1"}) == 2


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_scrapes_share_one_read_per_refresh_and_an_unreadable_lake_is_the_streams_scrape_error(bank_stream, monkeypatch, tmp_path):
    monkeypatch.setenv("CS_PLATFORM_METRICS_REFRESH_SECONDS", "1")
    bank_stream.store.initialize(utc_now(), None, 1000)
    collector = StreamsCollector(os.environ)
    registry = CollectorRegistry()
    registry.register(collector)
    scrapes = [threading.Thread(target=scrape, args=(registry,)) for _ in range(8)]
    for thread in scrapes:
        thread.start()
    for thread in scrapes:
        thread.join(timeout=120)
    assert collector.reads == 1  # eight scrapes at once, one read of the stream's state
    first = scrape(registry)
    assert first[("cs_platform_scrape_error", (("stream", "BankStream"),))] == 0
    assert first[("cs_platform_partitions", (("state", "CREATED"), ("stream", "BankStream")))] == 1
    time.sleep(1.1)  # past the refresh interval
    lag = scrape(registry)[("cs_platform_low_watermark_lag_seconds", (("stream", "BankStream"),))]
    assert collector.reads == 2 and lag >= first[("cs_platform_low_watermark_lag_seconds", (("stream", "BankStream"),))] + 1

    # A manifest commit that is not JSON: no error type the exporter expects; the scrape still answers.
    log = tmp_path / "lake" / "BankStream" / "manifest" / "_delta_log"
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text("{not json")
    time.sleep(1.1)
    broken = scrape(registry)
    assert broken[("cs_platform_scrape_error", (("stream", "BankStream"),))] == 1
    assert ("cs_platform_partitions", (("state", "CREATED"), ("stream", "BankStream"))) not in broken
