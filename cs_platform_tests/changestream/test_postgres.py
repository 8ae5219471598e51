"""The same end-to-end read on a PostgreSQL-dialect database (spanner.read_json_<stream>), through churn."""

import json
import threading
import time
from collections import Counter
from datetime import timedelta

from cs_platform.changestream.connection import SpannerTarget, database_dialect
from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.query import ChangeStreamQuery, Dialect
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.tail import POLLING
from cs_platform.dev.local_runner import LocalRunner
from cs_platform_tests.conftest import INSTANCE, PROJECT

PG_DDL = [
    "CREATE TABLE orders (order_id bigint NOT NULL, customer varchar, total numeric, details jsonb, PRIMARY KEY (order_id))",
    "CREATE TABLE order_lines (order_id bigint NOT NULL, line_no bigint NOT NULL, qty bigint, PRIMARY KEY (order_id, line_no))",
    "CREATE CHANGE STREAM order_stream FOR orders, order_lines",
]


def test_postgres_end_to_end_through_churn(make_database, metadata_database):
    db = make_database(PG_DDL, postgres=True)
    assert database_dialect(db) is Dialect.POSTGRESQL
    start = utc_now()
    end = start + timedelta(seconds=16)
    committed = Counter()

    def write():
        order = 0
        while True:
            order += 1
            with db.batch() as b:
                b.insert("orders", ["order_id", "customer", "total", "details"], [[order, f"c{order % 7}", "10.50", '{"rush": true}']])
                b.insert("order_lines", ["order_id", "line_no", "qty"], [[order, 1, 2], [order, 2, 5]])
            if b.committed > end - timedelta(seconds=3):
                return  # this last one is still inside the window
            committed[("orders", f'{{"order_id": "{order}"}}', "INSERT")] += 1
            for line in (1, 2):
                committed[("order_lines", f'{{"line_no": "{line}", "order_id": "{order}"}}', "INSERT")] += 1
            time.sleep(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    store = PartitionMetadataStore(metadata_database, "OrderStreamMetadata")
    reader = PartitionReader(
        db, ChangeStreamQuery("order_stream", Dialect.POSTGRESQL, heartbeat_millis=500), store, tail=POLLING
    )
    landed = {}

    def land(batch):
        for r in batch.records:
            for change_id, mod in zip(r.change_ids(), r.mods):
                landed[change_id] = (r.table_name, json.dumps(dict(mod.keys), sort_keys=True), r.mod_type.value)

    LocalRunner(reader, land, timedelta(seconds=2)).run(start, end, 500, stop_after_s=120)
    writer.join()

    seen = Counter(landed.values())
    last_order = max(int(k[1].split('"')[3]) for k in committed if k[0] == "orders")
    # The writer's final (uncounted) commit may fall inside the window: allow exactly that order.
    extra = seen - committed
    assert all(f'"{last_order + 1}"' in key for _, key, _ in extra), extra
    assert committed - seen == Counter(), "lost changes"
    assert sum(committed.values()) >= 300
    rows = store.all()
    assert {r.state for r in rows} == {PartitionState.FINISHED} and len(rows) >= 5


def test_a_connected_postgres_database_says_its_dialect(make_database, emulator):
    """A handle from SpannerTarget.connect (what the resources use) knows the database is
    PostgreSQL, though the emulator's admin API reports no dialect for it."""
    db = make_database(PG_DDL, postgres=True)
    connected = SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host).connect()
    assert connected.database_dialect.name == "DATABASE_DIALECT_UNSPECIFIED"  # what the emulator says
    assert database_dialect(connected) is Dialect.POSTGRESQL
    assert database_dialect(SpannerTarget(PROJECT, INSTANCE, make_database([]).database_id, emulator.host).connect()) is Dialect.GOOGLE_STANDARD_SQL
