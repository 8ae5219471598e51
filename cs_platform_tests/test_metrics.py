"""The exporter's figures that need no running stream (the scrape of a live one is in
test_production_stack.py): which landing files wait for the changelog."""

from cs_platform.landing.store import LandingStore
from cs_platform.metrics import waiting_files

NAMES = {
    "p1": [
        "20260101T000000000000Z_20260101T000001000000Z_10.json.gz",
        "20260101T000000000000Z_20260101T000002000000Z-000000100_5.json.gz",  # a piece sorts before the chunk that ends its transaction
        "20260101T000000000000Z_20260101T000002000000Z_10.json.gz",
    ],
    "p2": ["20260101T000000000000Z_20260101T000001000000Z_3.json.gz"],
}


def test_files_above_their_directorys_ingest_mark_wait(tmp_path):
    for partition, names in NAMES.items():
        (tmp_path / "S" / partition).mkdir(parents=True)
        for name in names:
            (tmp_path / "S" / partition / name).write_bytes(b"")
    landing = LandingStore(str(tmp_path))
    directory = {partition: f.rsplit("/", 1)[0] for f in landing.files("S") for partition in NAMES if f.rsplit("/", 2)[1] == partition}
    assert waiting_files(landing, "S", {}) == 4
    assert waiting_files(landing, "S", {directory["p1"]: NAMES["p1"][0]}) == 3  # p1's two above its mark, and p2's
    assert waiting_files(landing, "S", {directory["p1"]: NAMES["p1"][2], directory["p2"]: NAMES["p2"][0]}) == 0
