"""Change records in the form an IMMUTABLE_KEY_RANGE query returns them, for the Cloud Spanner front
to serve records of its own making (``key_ranges.py``) as the emulator and Cloud Spanner would.

A record is first a plain document, ``{"data_change_record": {...}}`` (or ``heartbeat_record``,
``child_partitions_record``), with the field names of
https://cloud.google.com/spanner/docs/change-streams/details ("Change stream records"). A PostgreSQL
query returns that document as its one JSONB column (``spanner.read_json_<stream>``); a GoogleSQL
query returns it as one ``ChangeRecord ARRAY<STRUCT<data_change_record ARRAY<STRUCT<…>>,
heartbeat_record …, child_partitions_record …>>`` value, encoded here by the row type the emulator
itself answered with, field by field by name, so the struct layout is never assumed.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable

from google.cloud.spanner_v1.types import PartialResultSet, TypeCode
from google.protobuf import struct_pb2

from cs_platform.changestream.records import DataChangeRecord
from cs_platform.changestream.values import format_timestamp


def data_change_document(record: DataChangeRecord) -> dict:
    return {"data_change_record": {
        "commit_timestamp": format_timestamp(record.commit_timestamp),
        "record_sequence": record.record_sequence,
        "server_transaction_id": record.server_transaction_id,
        "is_last_record_in_transaction_in_partition": record.is_last_record_in_transaction_in_partition,
        "table_name": record.table_name,
        "column_types": [
            {"name": c.name, "type": dict(c.type), "is_primary_key": c.is_primary_key, "ordinal_position": c.ordinal_position}
            for c in record.column_types
        ],
        "mods": [{"keys": dict(m.keys), "new_values": dict(m.new_values), "old_values": dict(m.old_values)} for m in record.mods],
        "mod_type": record.mod_type.value,
        "value_capture_type": record.value_capture_type.value,
        "number_of_records_in_transaction": record.number_of_records_in_transaction,
        "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
        "transaction_tag": record.transaction_tag,
        "is_system_transaction": record.is_system_transaction,
    }}


def heartbeat_document(at: datetime) -> dict:
    return {"heartbeat_record": {"timestamp": format_timestamp(at)}}


def child_partitions_document(at: datetime, sequence: str, children: Iterable[tuple[str, Iterable[str]]]) -> dict:
    """Partitions ``children`` ((token, parent tokens) each) start at ``at``: in a parent, its last
    record (the details page: the parent "has no more records" after it); in the initial query's
    answer, the first partitions, with no parents."""
    return {"child_partitions_record": {
        "start_timestamp": format_timestamp(at),
        "record_sequence": sequence,
        "child_partitions": [{"token": token, "parent_partition_tokens": list(parents)} for token, parents in children],
    }}


def immutable_response(documents: list[dict], metadata, postgres: bool) -> PartialResultSet:
    """``documents`` as one response of rows with the emulator's row type ``metadata`` (a
    ``ResultSetMetadata`` message of a query of the same stream)."""
    response = PartialResultSet.pb()()
    response.metadata.CopyFrom(metadata)
    column = metadata.row_type.fields[0].type_
    for document in documents:
        response.values.append(struct_pb2.Value(string_value=json.dumps(document)) if postgres else _encoded(document, column))
    return response


def _encoded(value: Any, type_) -> struct_pb2.Value:
    """``value`` (plain Python) as the protobuf value of Spanner type ``type_`` (a ``Type`` message)."""
    code = type_.code
    if code == TypeCode.STRUCT:
        fields = type_.struct_type.fields
        return struct_pb2.Value(list_value=struct_pb2.ListValue(values=[_encoded(value.get(f.name), f.type_) for f in fields]))
    if code == TypeCode.ARRAY:
        # The top-level struct holds one record kind: the other kinds are empty arrays, as the emulator sends them.
        items = value if isinstance(value, list) else [] if value is None else [value]
        return struct_pb2.Value(list_value=struct_pb2.ListValue(values=[_encoded(v, type_.array_element_type) for v in items]))
    if value is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if code == TypeCode.BOOL:
        return struct_pb2.Value(bool_value=value)
    if code == TypeCode.JSON:
        return struct_pb2.Value(string_value=json.dumps(value))
    return struct_pb2.Value(string_value=str(value))  # STRING, INT64 and TIMESTAMP travel as strings
