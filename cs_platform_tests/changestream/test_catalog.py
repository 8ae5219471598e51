"""What a change stream watches, from INFORMATION_SCHEMA on the emulator: the tables and columns a
snapshot reads, typed as change records type them."""

import pytest

from cs_platform.changestream.catalog import (
    column_type,
    shape,
    watched_column_types,
    watched_table_names,
    watched_tables,
    watched_tables_and_shapes,
)
from cs_platform.changestream.errors import UnknownChangeStreamError, UnsupportedColumnTypeError
from cs_platform_tests.changestream.test_value_capture import cards_bundle

STRING, INT64 = {"code": "STRING"}, {"code": "INT64"}


def described(tables) -> dict:
    return {t.name: [(c.name, c.type, c.is_primary_key) for c in t.columns] for t in tables}


def test_watched_tables_and_columns_follow_the_stream_definition(make_database):
    db = make_database([
        "CREATE TABLE `Order` (Id INT64 NOT NULL, `Select` STRING(MAX), Note STRING(40), Twice INT64 AS (Id * 2) STORED) PRIMARY KEY (Id)",
        "CREATE TABLE Other (K STRING(36) NOT NULL, N NUMERIC, A ARRAY<STRING(MAX)>, Seen TIMESTAMP) PRIMARY KEY (K)",
        "CREATE CHANGE STREAM Everything FOR ALL",
        "CREATE CHANGE STREAM Chosen FOR `Order`(`Select`)",
        "CREATE CHANGE STREAM Whole FOR Other",
    ])
    # A column list: those columns and the keys. Generated columns are never watched.
    assert described(watched_tables(db, "Chosen")) == {"Order": [("Id", INT64, True), ("Select", STRING, False)]}
    assert described(watched_tables(db, "Whole")) == {
        "Other": [
            ("K", STRING, True),
            ("N", {"code": "NUMERIC"}, False),
            ("A", {"code": "ARRAY", "array_element_type": STRING}, False),
            ("Seen", {"code": "TIMESTAMP"}, False),
        ]
    }
    everything = described(watched_tables(db, "Everything"))
    assert set(everything) == {"Order", "Other"}
    assert [name for name, _, _ in everything["Order"]] == ["Id", "Select", "Note"]
    with pytest.raises(UnknownChangeStreamError, match="'Nope' does not exist .*Chosen, Everything, Whole"):
        watched_tables(db, "Nope")
    # The names alone (what each cut reads to find tables that joined the stream): the same tables.
    for stream in ("Chosen", "Whole", "Everything"):
        assert watched_table_names(db, stream) == [t.name for t in watched_tables(db, stream)]
        # A snapshot records the digests each cut compares with: read either way, they must agree.
        shapes = {table: shape(columns) for table, columns in watched_column_types(db, stream).items()}
        assert watched_tables_and_shapes(db, stream)[1] == shapes


@pytest.mark.parametrize(
    "spanner_type, expected",
    [
        ("ARRAY<STRING(MAX)>", {"code": "ARRAY", "array_element_type": STRING}),
        ("BYTES(16)", {"code": "BYTES"}),
        ("character varying(100)", STRING),
        ("numeric", {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}),
        ("jsonb[]", {"code": "ARRAY", "array_element_type": {"code": "JSON", "type_annotation": "PG_JSONB"}}),
        ("timestamp with time zone", {"code": "TIMESTAMP"}),
        # Cloud Spanner's spelling of a proto bundle's types (Beam's SpannerSchemaTest uses it too).
        ("PROTO<cs.Card>", {"code": "PROTO", "proto_type_fqn": "cs.Card"}),
        ("ENUM<cs.Suit>", {"code": "ENUM", "proto_type_fqn": "cs.Suit"}),
        ("ARRAY<FLOAT32>(vector_length=>256)", {"code": "ARRAY", "array_element_type": {"code": "FLOAT32"}}),  # an embedding
        ("ARRAY<PROTO<cs.Card>>", {"code": "ARRAY", "array_element_type": {"code": "PROTO", "proto_type_fqn": "cs.Card"}}),
    ],
)
def test_information_schema_types_read_as_change_records_type_them(spanner_type, expected):
    assert column_type(spanner_type) == expected


def test_a_column_type_without_a_mapping_is_named_with_its_table_and_column(make_database):
    """The emulator spells a proto bundle's column type in INFORMATION_SCHEMA as its bare name
    (Cloud Spanner: PROTO<cs.Card>, above); the snapshot at T0 stops naming the column."""
    db = make_database(
        ["CREATE PROTO BUNDLE (cs.Card, cs.Suit)", "CREATE TABLE Hands (Id INT64 NOT NULL, Card cs.Card) PRIMARY KEY (Id)", "CREATE CHANGE STREAM S FOR Hands"],
        proto_descriptors=cards_bundle(),
    )
    with pytest.raises(UnsupportedColumnTypeError, match=r"^Hands\.Card: column type '`cs\.Card`' has no mapping"):
        watched_tables(db, "S")
    assert watched_table_names(db, "S") == ["Hands"]  # which tables: no column type to map
