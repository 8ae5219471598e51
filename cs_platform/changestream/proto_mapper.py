"""Wire rows of MUTABLE_KEY_RANGE change streams -> change records.

A change stream created with ``OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')`` returns one column
``ChangeRecord`` of type ``PROTO<google.spanner.v1.ChangeStreamRecord>`` (GoogleSQL ``READ_<stream>``)
or the same message's bytes (PostgreSQL ``spanner.read_proto_bytes_<stream>``): a oneof of a data
change, a heartbeat, a partition start, a partition end or a partition event record (googleapis
``google/spanner/v1/change_stream.proto``, shipped as ``spanner_v1.types.ChangeStreamRecord``).
Either way the client hands the cell over base64-encoded; the records it maps to are those of
``records.py``, with mod values in the same JSON wire encoding as the other partition mode's.

A record of a kind this code does not know (a newer oneof member) is a :class:`MalformedRecordError`,
as in ``mapper.py``: mapping around it could lose data.
"""

from __future__ import annotations

import base64
import binascii
from datetime import timezone
from typing import Any, Mapping, Sequence

from google.cloud.spanner_v1.types import ChangeStreamRecord, TypeCode
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.records import (
    ChangeRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
    ModType,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    ValueCaptureType,
)

PROTO_TYPE = "google.spanner.v1.ChangeStreamRecord"  # the ChangeRecord column's proto_type_fqn
_MESSAGE = ChangeStreamRecord.pb()
_MOD_TYPES = {m.value: m.name for m in ChangeStreamRecord.DataChangeRecord.ModType}
_CAPTURE_TYPES = {m.value: m.name for m in ChangeStreamRecord.DataChangeRecord.ValueCaptureType}


def _plain(value) -> Any:
    """A ``google.protobuf.Value`` as the JSON value it stands for (INT64 stays a string, as on the wire)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [_plain(v) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: _plain(v) for k, v in value.struct_value.fields.items()}
    return None


def _timestamp(ts):
    return ts.ToDatetime(tzinfo=timezone.utc)


def _enum(names: Mapping[int, str], kind: type, value: int, field: str):
    try:
        return kind(names[value])
    except (KeyError, ValueError) as e:
        raise MalformedRecordError(f"{field} {value!r} is not one of {[m.value for m in kind]}") from e


class ProtoRowMapper:
    """Maps rows of one column holding a serialized ``google.spanner.v1.ChangeStreamRecord``."""

    def __init__(self, partition_token: str) -> None:
        self._token = partition_token
        self._types: dict[bytes, Mapping[str, Any]] = {}  # a table's column types repeat in every record

    def map_row(self, row: Sequence[Any]) -> list[ChangeRecord]:
        """One wire row -> its record. The cell is base64 text as the client hands it over with
        ``lazy_decode`` (a ``Value``), or the message's bytes."""
        cell = row[0]
        try:
            data = cell if isinstance(cell, bytes) else base64.b64decode(cell if isinstance(cell, str) else cell.string_value, validate=True)
            message = _MESSAGE.FromString(data)
        except (binascii.Error, DecodeError) as e:
            raise MalformedRecordError(f"a MUTABLE_KEY_RANGE change stream row is not a serialized {PROTO_TYPE}: {str(cell)[:80]!r}") from e
        return [self.map_message(message)]

    def map_message(self, message) -> ChangeRecord:
        kind = message.WhichOneof("record")
        if kind == "data_change_record":
            return self._data_change(message.data_change_record)
        if kind == "heartbeat_record":
            return HeartbeatRecord(self._token, _timestamp(message.heartbeat_record.timestamp))
        if kind == "partition_start_record":
            r = message.partition_start_record
            return PartitionStartRecord(self._token, _timestamp(r.start_timestamp), r.record_sequence, tuple(r.partition_tokens))
        if kind == "partition_end_record":
            r = message.partition_end_record
            return PartitionEndRecord(self._token, _timestamp(r.end_timestamp), r.record_sequence)
        if kind == "partition_event_record":
            r = message.partition_event_record
            return PartitionEventRecord(
                self._token,
                _timestamp(r.commit_timestamp),
                r.record_sequence,
                tuple(e.source_partition_token for e in r.move_in_events),
                tuple(e.destination_partition_token for e in r.move_out_events),
            )
        raise MalformedRecordError(
            f"change stream returned a {PROTO_TYPE} holding {kind or 'no record'!r}, which cs_platform does not know; upgrade cs_platform"
        )

    def _type(self, spanner_type) -> Mapping[str, Any]:
        key = spanner_type.SerializeToString()
        found = self._types.get(key)
        if found is None:
            found = self._types[key] = json_format.MessageToDict(spanner_type, preserving_proto_field_name=True)
        return found

    def _data_change(self, r) -> DataChangeRecord:
        columns = tuple(ColumnType(c.name, self._type(c.type_), c.is_primary_key, c.ordinal_position) for c in r.column_metadata)
        names = [c.name for c in columns]

        def values(items) -> Mapping[str, Any]:
            try:
                return {names[v.column_metadata_index]: _plain(v.value) for v in items}
            except IndexError as e:
                raise MalformedRecordError(f"a mod of table {r.table!r} names column {len(names)}+ of {len(names)}") from e

        return DataChangeRecord(
            partition_token=self._token,
            commit_timestamp=_timestamp(r.commit_timestamp),
            record_sequence=r.record_sequence,
            server_transaction_id=r.server_transaction_id,
            is_last_record_in_transaction_in_partition=r.is_last_record_in_transaction_in_partition,
            table_name=r.table,
            column_types=columns,
            mods=tuple(Mod(values(m.keys), values(m.new_values), values(m.old_values)) for m in r.mods),
            mod_type=_enum(_MOD_TYPES, ModType, r.mod_type, "mod_type"),
            value_capture_type=_enum(_CAPTURE_TYPES, ValueCaptureType, r.value_capture_type, "value_capture_type"),
            number_of_records_in_transaction=r.number_of_records_in_transaction,
            number_of_partitions_in_transaction=r.number_of_partitions_in_transaction,
            transaction_tag=r.transaction_tag,
            is_system_transaction=r.is_system_transaction,
        )


def is_proto_row_type(fields) -> bool:
    """Whether a change stream query's row type is the MUTABLE_KEY_RANGE one (a PROTO column)."""
    return len(fields) == 1 and fields[0].type_.code == TypeCode.PROTO and fields[0].type_.proto_type_fqn == PROTO_TYPE
