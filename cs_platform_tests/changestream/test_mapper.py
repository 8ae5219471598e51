"""Wire rows -> records, on rows recorded from the emulator (recorded_rows.json) and the documented
Cloud Spanner record shapes. The same mappers run against the live emulator in the other tests."""

import copy
import json
import logging
from datetime import datetime, timezone
from pathlib import Path

import pytest
from google.cloud.spanner_v1 import ResultSetMetadata
from google.protobuf import json_format, struct_pb2

from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.mapper import GoogleSqlRowMapper, PostgresRowMapper
from cs_platform.changestream.records import (
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    ModType,
    ValueCaptureType,
)

RECORDED = json.loads((Path(__file__).parent / "recorded_rows.json").read_text())


def googlesql(name: str, token: str = "tok"):
    recorded = RECORDED[name]
    metadata = json_format.ParseDict(recorded["metadata"], ResultSetMetadata.pb(ResultSetMetadata()))
    mapper = GoogleSqlRowMapper(token, metadata.row_type.fields)
    rows = [[json_format.ParseDict(v, struct_pb2.Value()) for v in row] for row in recorded["rows"]]
    return mapper, rows


def test_googlesql_initial_query_children_get_the_initial_partition_as_parent():
    mapper, rows = googlesql("googlesql_initial", token="initial")
    records = [r for row in rows for r in mapper.map_row(row)]
    assert records and all(isinstance(r, ChildPartitionsRecord) for r in records)
    children = [c for r in records for c in r.child_partitions]
    assert len(children) >= 2
    assert all(c.parent_tokens == ("initial",) for c in children)
    assert all(len(c.token) > 100 for c in children)


def test_googlesql_data_change_record_every_field():
    mapper, rows = googlesql("googlesql_partition")
    records = [r for row in rows for r in mapper.map_row(row)]
    data = [r for r in records if isinstance(r, DataChangeRecord)]
    assert len(data) == 1 and any(isinstance(r, HeartbeatRecord) for r in records)
    (rec,) = data
    assert rec.commit_timestamp == datetime(2026, 11, 22, 1, 4, 2, 336234, tzinfo=timezone.utc)
    assert (rec.record_sequence, rec.server_transaction_id, rec.table_name) == ("00000000", "1", "T")
    assert rec.is_last_record_in_transaction_in_partition is True
    assert [(c.name, c.code, c.is_primary_key, c.ordinal_position) for c in rec.column_types] == [
        ("Id", "INT64", True, 1),
        ("S", "STRING", False, 2),
        ("F", "FLOAT64", False, 3),
        ("B", "BYTES", False, 4),
    ]
    assert rec.mod_type is ModType.INSERT and rec.value_capture_type is ValueCaptureType.OLD_AND_NEW_VALUES
    assert (rec.number_of_records_in_transaction, rec.number_of_partitions_in_transaction) == (1, 1)
    assert rec.transaction_tag == "" and rec.is_system_transaction is False
    assert [m.keys for m in rec.mods] == [{"Id": "1"}, {"Id": "2"}]
    typed = rec.typed_mods()
    assert typed[0].keys == {"Id": 1} and typed[0].new_values == {"B": b"xy", "F": 1.5, "S": "a"}
    assert typed[1].new_values == {"B": None, "F": -0.0, "S": None}
    assert rec.change_ids() == [("1", "00000000", 0), ("1", "00000000", 1)]


def test_googlesql_row_type_missing_a_field_is_an_error():
    recorded = copy.deepcopy(RECORDED["googlesql_partition"]["metadata"])
    dcr = recorded["rowType"]["fields"][0]["type"]["arrayElementType"]["structType"]["fields"][0]
    dcr["type"]["arrayElementType"]["structType"]["fields"].pop(2)  # server_transaction_id
    metadata = json_format.ParseDict(recorded, ResultSetMetadata.pb(ResultSetMetadata()))
    with pytest.raises(MalformedRecordError, match=r"data_change_record lacks field\(s\) \['server_transaction_id'\]"):
        GoogleSqlRowMapper("tok", metadata.row_type.fields)


def test_googlesql_unknown_record_type_is_an_error():
    recorded = copy.deepcopy(RECORDED["googlesql_partition"]["metadata"])
    outer = recorded["rowType"]["fields"][0]["type"]["arrayElementType"]["structType"]["fields"]
    outer.append({"name": "partition_start_record", "type": copy.deepcopy(outer[1]["type"])})
    metadata = json_format.ParseDict(recorded, ResultSetMetadata.pb(ResultSetMetadata()))
    mapper = GoogleSqlRowMapper("tok", metadata.row_type.fields)
    row = json_format.ParseDict([[[], [], [], [["2026-01-01T00:00:00Z"]]]], struct_pb2.Value())
    with pytest.raises(MalformedRecordError, match="partition_start_record.*upgrade cs_platform"):
        mapper.map_row([row])


def pg_rows():
    return [json.loads(r) for r in RECORDED["postgresql_rows"]]


def test_postgres_records_recorded_from_emulator():
    mapper = PostgresRowMapper("tok")
    records = [r for text in RECORDED["postgresql_rows"] for r in mapper.map_row([text])]
    kinds = {type(r) for r in records}
    assert kinds == {ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord}
    (rec,) = [r for r in records if isinstance(r, DataChangeRecord)]
    assert rec.table_name == "t" and rec.mods[0].keys == {"id": "1"}
    types = {c.name: c.type for c in rec.column_types}
    assert types["n"] == {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}
    typed = rec.typed_mods()[0]
    assert typed.keys == {"id": 1}
    assert typed.new_values["j"] == {"k": 1} and str(typed.new_values["n"]) == "1.5"


# The transfer example of Spanner's reference: one transaction, records in two partitions.
DOC_RECORD = {
    "data_change_record": {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z",
        "record_sequence": "00000001",
        "server_transaction_id": "6329047911",
        "is_last_record_in_transaction_in_partition": True,
        "table_name": "AccountBalance",
        "column_types": [
            {"name": "AccountId", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
            {"name": "LastUpdate", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 2},
            {"name": "Balance", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
        ],
        "mods": [
            {
                "keys": {"AccountId": "Id2"},
                "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 2000},
                "old_values": {"LastUpdate": "2022-01-20T11:25:00.199915Z", "Balance": 1500},
            }
        ],
        "mod_type": "UPDATE",
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 2,
        "number_of_partitions_in_transaction": 2,
        "transaction_tag": "app=banking,env=prod,action=update",
        "is_system_transaction": False,
    }
}


def test_postgres_documented_cross_partition_record():
    (rec,) = PostgresRowMapper("p2").map_document(DOC_RECORD)
    assert rec.number_of_partitions_in_transaction == 2 and rec.number_of_records_in_transaction == 2
    assert rec.transaction_tag == "app=banking,env=prod,action=update"
    typed = rec.typed_mods()[0]
    assert typed.new_values["Balance"] == 2000
    assert typed.old_values["LastUpdate"] == datetime(2022, 1, 20, 11, 25, 0, 199915, tzinfo=timezone.utc)


def test_postgres_child_partitions_documented_merge():
    doc = {
        "child_partitions_record": {
            "start_timestamp": "2022-05-01T09:30:15Z",
            "record_sequence": "1000012389",
            "child_partitions": [{"token": "child_token_4", "parent_partition_tokens": ["child_token_2", "child_token_3"]}],
        }
    }
    (rec,) = PostgresRowMapper("child_token_2").map_document(doc)
    assert rec.child_partitions[0].parent_tokens == ("child_token_2", "child_token_3")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["data_change_record"].pop("commit_timestamp"), r"lacks field\(s\) \['commit_timestamp'\]"),
        (lambda d: d["data_change_record"].update(mod_type="UPSERT"), "mod_type 'UPSERT' is not one of"),
        (lambda d: d["data_change_record"].update(value_capture_type="ALL"), "value_capture_type 'ALL'"),
        (lambda d: d["data_change_record"].update(commit_timestamp="yesterday"), "'yesterday' is not RFC 3339"),
        (lambda d: d["data_change_record"]["mods"][0].pop("old_values"), r"mods lacks field\(s\) \['old_values'\]"),
        (lambda d: d.update(partition_event_record={}), "'partition_event_record'.*upgrade cs_platform"),
    ],
)
def test_postgres_malformed_records_are_named(mutate, message):
    doc = copy.deepcopy(DOC_RECORD)
    mutate(doc)
    with pytest.raises(MalformedRecordError, match=message):
        PostgresRowMapper("tok").map_document(doc)


def test_postgres_not_json_is_named():
    with pytest.raises(MalformedRecordError, match="not JSON"):
        PostgresRowMapper("tok").map_row(["{oops"])


def test_extra_field_is_logged_once_and_mapped(caplog):
    doc = copy.deepcopy(DOC_RECORD)
    doc["data_change_record"]["brand_new_field"] = 1
    with caplog.at_level(logging.WARNING):
        (rec,) = PostgresRowMapper("tok").map_document(doc)
        PostgresRowMapper("tok").map_document(doc)
    assert rec.server_transaction_id == "6329047911"
    assert [r.message for r in caplog.records].count(
        "data_change_record has field 'brand_new_field' that cs_platform does not know; it is ignored"
    ) == 1
