"""The Cloud Spanner front streams a proto bundle's columns as Cloud Spanner does (``dev/front/proto_columns.py``):
each change record types them PROTO or ENUM with their ``proto_type_fqn`` and carries their values
(google/spanner/v1/type.proto: a message base64-encoded, an enum's number in decimal), old values
included, under every value capture type; ``INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE`` spells them
``PROTO<…>`` and ``ENUM<…>``. Straight from the emulator, the same stream has bare type names and
NULL values (``changestream/test_value_capture.py``)."""

import base64
from datetime import timedelta

from cs_platform.changestream.catalog import watched_tables
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.records import DataChangeRecord, ModType
from cs_platform.dev.local_runner import LocalRunner
from cs_platform_tests.changestream.test_value_capture import cards_bundle
from cs_platform_tests.conftest import INSTANCE, PROJECT

CAPTURES = ("OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES")
CARD, SUIT = {"code": "PROTO", "proto_type_fqn": "cs.Card"}, {"code": "ENUM", "proto_type_fqn": "cs.Suit"}
ACE = base64.b64encode(b"\n\x03ace\x10\x01").decode()  # cs.Card {name: "ace" rank: 1}, serialized
TWO = base64.b64encode(b"\n\x03two\x10\x02").decode()
HEARTS, SPADES = "1", "2"


def read_through(database, meta_db, table: str, start, end) -> list[DataChangeRecord]:
    records: list[DataChangeRecord] = []
    reader = PartitionReader(database, ChangeStreamQuery("S", heartbeat_millis=500), PartitionMetadataStore(meta_db, table))
    LocalRunner(reader, lambda batch: records.extend(batch.records), timedelta(seconds=5)).run(start, end, 500)
    return sorted(records, key=lambda r: (r.commit_timestamp, r.record_sequence))


DML = (
    "INSERT INTO Hands (Id, Name, Card, Suit, Cards, Suits) VALUES (1, 'one', NEW cs.Card { name: 'ace' rank: 1 }, 'SPADES', "
    "[NEW cs.Card { name: 'two' rank: 2 }], [CAST('HEARTS' AS cs.Suit), NULL])",
    "UPDATE Hands SET Suit = 'HEARTS', Name = 'uno' WHERE Id = 1",
    "UPDATE Hands SET Name = 'eins' WHERE Id = 1",  # no proto column written
    "DELETE FROM Hands WHERE Id = 1",
)


def test_proto_and_enum_columns_stream_with_their_types_and_values_old_ones_too(make_database, metadata_database, spanner_front):
    for capture in CAPTURES:  # a database each: a table has at most three streams
        source = make_database(
            ["CREATE PROTO BUNDLE (cs.Card, cs.Suit)",
             "CREATE TABLE Hands (Id INT64 NOT NULL, Name STRING(MAX), Card cs.Card, Suit cs.Suit, Cards ARRAY<cs.Card>, Suits ARRAY<cs.Suit>) PRIMARY KEY (Id)",
             f"CREATE CHANGE STREAM S FOR Hands OPTIONS (value_capture_type = '{capture}')"],
            proto_descriptors=cards_bundle(),
        )
        spanner_front.fill_proto_columns(source.database_id)
        through = SpannerTarget(PROJECT, INSTANCE, source.database_id, spanner_front.host).connect()
        start = utc_now()
        for dml in DML:
            done = []
            source.run_in_transaction(lambda transaction: done.append(transaction) or transaction.execute_update(dml))
        # From the last commit's timestamp, not this host's clock: the shared emulator's commit
        # timestamps may run ahead of it (a fresh clone's suite read nothing up to now + 1 ms once).
        end = done[-1].committed + timedelta(milliseconds=1)
        records = read_through(through, metadata_database, f"S_{capture}", start, end)
        assert [r.mod_type for r in records] == [ModType.INSERT, ModType.UPDATE, ModType.UPDATE, ModType.DELETE], capture
        for record in records:
            types = {c.name: c.type for c in record.column_types}
            assert types["Card"] == CARD and types["Suit"] == SUIT, (capture, types)
            assert types["Cards"] == {"code": "ARRAY", "array_element_type": CARD} and types["Suits"] == {"code": "ARRAY", "array_element_type": SUIT}
        inserted, suited, renamed, deleted = (r.mods[0] for r in records)
        assert {k: inserted.new_values[k] for k in ("Card", "Suit", "Cards", "Suits")} == {"Card": ACE, "Suit": SPADES, "Cards": [TWO], "Suits": [HEARTS, None]}, capture
        assert suited.new_values["Suit"] == HEARTS, capture
        assert deleted.new_values == {}, capture
        if capture == "NEW_VALUES" or capture == "NEW_ROW":
            assert suited.old_values == {} and deleted.old_values == {}, capture
        else:  # the values before each change
            assert suited.old_values["Suit"] == SPADES, capture
            assert deleted.old_values["Card"] == ACE and deleted.old_values["Suits"] == [HEARTS, None], capture
        # After a change that wrote no proto column: NEW_ROW carries the whole row; the others carry
        # the columns the emulator names (a DML UPDATE names them all), with the row's values.
        assert renamed.new_values.get("Card", ACE) == ACE and renamed.new_values.get("Suit", HEARTS) == HEARTS, capture
        if capture.startswith("NEW_ROW"):
            assert {"Card", "Suit"} <= set(renamed.new_values), capture

    # The schema as Cloud Spanner spells it, and typed as the records type it.
    with through.snapshot() as snapshot:
        spelled = dict(snapshot.execute_sql("SELECT COLUMN_NAME, SPANNER_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'Hands'"))
    assert {k: spelled[k] for k in ("Card", "Suit", "Cards", "Suits")} == {
        "Card": "PROTO<cs.Card>", "Suit": "ENUM<cs.Suit>", "Cards": "ARRAY<PROTO<cs.Card>>", "Suits": "ARRAY<ENUM<cs.Suit>>"
    }
    (table,) = watched_tables(through, "S")
    assert {c.name: c.type for c in table.columns} == {c.name: c.type for c in records[0].column_types}
