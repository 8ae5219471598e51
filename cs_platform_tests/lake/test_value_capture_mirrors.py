"""Each value capture type, applied to a mirror, gives the same table as the source: partial
updates are patched (NEW_VALUES, OLD_AND_NEW_VALUES carry only written columns), deletes and
re-inserts, several changes of one key in one cut, every column type mapped to its Spark type."""

import base64
import json
import time
from datetime import datetime, timedelta

import pytest
from google.cloud import spanner

from cs_platform.changestream.metadata import PartitionMetadataStore, partition_key, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.runner import LocalRunner
from cs_platform.lake.cuts import Lake
from cs_platform.lake.types import utc
from cs_platform.landing.store import LandingStore
from cs_platform_tests.changestream.test_value_capture import COLUMNS, DDL, ROW, to_client


def normalized(row: dict) -> dict:
    out = {}
    for name, value in row.items():
        if isinstance(value, bytearray):
            value = bytes(value)
        elif isinstance(value, datetime):
            value = utc(value)  # PySpark's naive local time, the client's UTC
        elif name == "Doc" and value is not None:
            value = json.loads(value) if isinstance(value, str) else json.loads(value.serialize())
        out[name] = value
    return out


@pytest.mark.parametrize("capture", ["OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"])
def test_mirror_equals_source(capture, make_database, spark, tmp_path):
    db = make_database([DDL, f"CREATE CHANGE STREAM ItemsStream FOR Items OPTIONS (value_capture_type = '{capture}')"])
    meta = make_database([])
    start = utc_now()
    steps = [
        lambda b: b.insert("Items", COLUMNS, [to_client(ROW), to_client({**ROW, "Id": 2}), to_client({**ROW, "Id": 3})]),
        lambda b: b.update("Items", ["Id", "Name", "Score"], [[ROW["Id"], "renamed", 2.5]]),  # partial update
        lambda b: b.update("Items", ["Id", "Tags", "Doc"], [[ROW["Id"], [7], None]]),
        lambda b: b.delete("Items", spanner.KeySet(keys=[[2]])),
        lambda b: b.insert("Items", ["Id", "Name"], [[2, "back"]]),  # re-insert with other columns NULL
        lambda b: b.update("Items", ["Id", "Flag", "Amount"], [[3, False, "1.5"]]),
        lambda b: b.delete("Items", spanner.KeySet(keys=[[3]])),
    ]
    for step in steps:
        with db.batch() as batch:
            step(batch)
    end = utc_now() + timedelta(seconds=1)
    time.sleep(1.2)

    landing = LandingStore(str(tmp_path / "landing"))
    store = PartitionMetadataStore(meta, "ItemsMetadata")
    reader = PartitionReader(db, ChangeStreamQuery("ItemsStream", heartbeat_millis=500), store)

    def land(batch):
        landing.write("ItemsStream", partition_key(batch.partition_token, batch.query_start), batch)

    LocalRunner(reader, land, timedelta(seconds=5)).run(start, end, 500)
    lake = Lake(spark, str(tmp_path / "lake"))
    lake.changelog.ingest(landing.files("ItemsStream"))
    lake.apply_cut(end)

    mirror = {r.Id: normalized(r.asDict()) for r in lake.mirrors_at_cut()["Items"].collect()}
    with db.snapshot(read_timestamp=end) as snapshot:
        rows = [dict(zip(COLUMNS, r)) for r in snapshot.execute_sql(f"SELECT {', '.join(COLUMNS)} FROM Items")]
    # The Python client returns BYTES base64-encoded (and expects them so on write).
    source = {r["Id"]: normalized({**r, "Raw": base64.b64decode(r["Raw"]) if r["Raw"] else None}) for r in rows}
    assert set(mirror) == set(source) == {ROW["Id"], 2}
    differing = {(k, c): (mirror[k][c], source[k][c]) for k in source for c in COLUMNS if mirror[k][c] != source[k][c]}
    assert not differing, f"{capture}: (mirror, source) differ at {differing}"
