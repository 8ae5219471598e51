"""How the Cloud Spanner front presents an emulator stream as a MUTABLE_KEY_RANGE stream.

The emulator (1.5.28) refuses ``OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')``. Cloud Spanner
reads such a stream differently (https://cloud.google.com/spanner/docs/change-streams/details and
googleapis ``google/spanner/v1/change_stream.proto``):

- the query returns one column ``ChangeRecord`` of type ``PROTO<google.spanner.v1.ChangeStreamRecord>``
  (GoogleSQL), or that message's bytes from ``spanner.read_proto_bytes_<stream>`` (PostgreSQL);
- its end timestamp must be set and at most 30 minutes ahead (refused with INVALID_ARGUMENT);
- partitions are announced by ``partition_start_record`` (no parent tokens; several partitions may
  announce one token), a partition ends with a ``partition_end_record``, and key ranges that move
  are told by ``partition_event_record`` (``move_out_events`` in the source, ``move_in_events`` in
  the destination);
- ``INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS`` lists ``partition_mode``.

The front presents the emulator's own partitions that way: a split or merge (a child partitions
record at ``t``) becomes, in the parent, a start record announcing the children, an event record
moving its key range out to them and an end record at ``t``; each child's first record is an event
record moving the range in from its parents. Data changes and heartbeats are the emulator's, field
for field. The emulator's rows are read with the reader's own immutable mappers (proven on their own
against the emulator), so what the reader then gets is the same changes in the other form.
"""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from google.cloud.spanner_v1.types import ChangeStreamRecord, PartialResultSet, ResultSetMetadata, StructType, Type, TypeCode
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cs_platform.changestream.mapper import GoogleSqlRowMapper, PostgresRowMapper
from cs_platform.changestream.proto_mapper import PROTO_TYPE
from cs_platform.changestream.records import ChangeRecord, ChildPartitionsRecord, DataChangeRecord, HeartbeatRecord

# The longest a MUTABLE_KEY_RANGE query may run ahead of now (the details page: the end timestamp
# "must be ... no more than 30 minutes in the future" for this partition mode).
MAX_END_AHEAD = timedelta(minutes=30)
END_REQUIRED = "end_timestamp must be specified for change streams with partition_mode MUTABLE_KEY_RANGE"
END_TOO_FAR = "end_timestamp must be no more than 30 minutes in the future for change streams with partition_mode MUTABLE_KEY_RANGE"

_STREAM = re.compile(r"(?:\bread_json_|\bread_proto_bytes_|\bread_)(\w+)\s*\(", re.IGNORECASE)
_OPTIONS_QUERY = re.compile(r"\s*select\s+\*\s+from\s+information_schema\.change_stream_options\s*", re.IGNORECASE)
_CSR = ChangeStreamRecord.pb()
_DCR = ChangeStreamRecord.DataChangeRecord


def stream_of(sql: str) -> str | None:
    """The stream a change stream query reads (``READ_<s>``, ``spanner.read_json_<s>``, ``spanner.read_proto_bytes_<s>``)."""
    found = _STREAM.search(sql)
    return found.group(1) if found else None


def database_of(session: str) -> str:
    """The database id in a session name (``projects/p/instances/i/databases/<id>/sessions/s``)."""
    parts = session.split("/")
    return parts[parts.index("databases") + 1] if "databases" in parts else ""


def is_options_query(sql: str) -> bool:
    return bool(_OPTIONS_QUERY.fullmatch(sql))


def timestamp_message(moment: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(moment)
    return ts


def _value(plain) -> struct_pb2.Value:
    return json_format.ParseDict(plain, struct_pb2.Value())


def start_message(at: datetime, sequence: str, tokens) -> object:
    """A ``partition_start_record`` announcing partitions ``tokens`` from ``at``."""
    return _CSR(partition_start_record=dict(start_timestamp=timestamp_message(at), record_sequence=sequence, partition_tokens=list(tokens)))


def event_message(at: datetime, sequence: str, token: str, moved_in_from=(), moved_out_to=()) -> object:
    """A ``partition_event_record``: key ranges moved into partition ``token`` from ``moved_in_from``
    and out of it to ``moved_out_to`` at ``at``."""
    return _CSR(partition_event_record=dict(
        commit_timestamp=timestamp_message(at), record_sequence=sequence, partition_token=token,
        move_in_events=[{"source_partition_token": t} for t in moved_in_from],
        move_out_events=[{"destination_partition_token": t} for t in moved_out_to],
    ))


def end_message(at: datetime, sequence: str, token: str) -> object:
    """A ``partition_end_record``: partition ``token`` ends at ``at``."""
    return _CSR(partition_end_record=dict(end_timestamp=timestamp_message(at), record_sequence=sequence, partition_token=token))


def heartbeat_message(at: datetime) -> object:
    return _CSR(heartbeat_record=dict(timestamp=timestamp_message(at)))


def emulator_records(metadata, rows: list, token: str | None, postgres: bool) -> list[ChangeRecord]:
    """The emulator's rows for one query of ``token`` (its row type and complete rows) as records,
    read by the reader's own immutable mappers."""
    if metadata is None:
        return []
    if postgres:
        mapper = PostgresRowMapper(token or "")
    else:
        mapper = GoogleSqlRowMapper(token or "", ResultSetMetadata.wrap(metadata).row_type.fields)
    return [record for row in rows for record in mapper.map_row([row])]


def data_change_message(record: DataChangeRecord):
    position = {c.name: i for i, c in enumerate(record.column_types)}

    def values(row):
        return [_DCR.ModValue.pb()(column_metadata_index=position[name], value=_value(v)) for name, v in row.items()]

    return _DCR.pb()(
        commit_timestamp=timestamp_message(record.commit_timestamp),
        record_sequence=record.record_sequence,
        server_transaction_id=record.server_transaction_id,
        is_last_record_in_transaction_in_partition=record.is_last_record_in_transaction_in_partition,
        table=record.table_name,
        column_metadata=[
            _DCR.ColumnMetadata.pb()(
                name=c.name, type_=json_format.ParseDict(dict(c.type), Type.pb()()), is_primary_key=c.is_primary_key, ordinal_position=c.ordinal_position
            )
            for c in record.column_types
        ],
        mods=[_DCR.Mod.pb()(keys=values(m.keys), new_values=values(m.new_values), old_values=values(m.old_values)) for m in record.mods],
        mod_type=_DCR.ModType[record.mod_type.value].value,
        value_capture_type=_DCR.ValueCaptureType[record.value_capture_type.value].value,
        number_of_records_in_transaction=record.number_of_records_in_transaction,
        number_of_partitions_in_transaction=record.number_of_partitions_in_transaction,
        transaction_tag=record.transaction_tag,
        is_system_transaction=record.is_system_transaction,
    )


@dataclass
class MutableStreams:
    """The streams the front presents as MUTABLE_KEY_RANGE, by (database id, stream), and what it
    learned of their partitions: each child's start and parents, for the child's move-in record."""

    streams: set[tuple[str, str]] = field(default_factory=set)
    parents: dict[str, tuple[datetime, tuple[str, ...]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, database: str, stream: str) -> None:
        with self.lock:
            self.streams.add((database, stream))

    def presents(self, session: str, sql: str) -> bool:
        with self.lock:
            return (database_of(session), stream_of(sql) or "") in self.streams

    def options_rows(self, session: str) -> list[str]:
        """The streams of ``session``'s database whose ``partition_mode`` the options view lists."""
        database = database_of(session)
        with self.lock:
            return sorted(stream for db, stream in self.streams if db == database)

    def present(self, metadata, rows: list, token: str | None, start: datetime, postgres: bool) -> PartialResultSet:
        """The emulator's answer to one change stream query of ``token`` from ``start`` (its row
        type and complete rows) as one response of serialized ``ChangeStreamRecord`` rows, with
        that row type (a streamed query drops it from all but its first response)."""
        records = emulator_records(metadata, rows, token, postgres)
        out = []
        if token is not None:
            with self.lock:
                known = self.parents.get(token)
            if known is not None and start <= known[0]:
                out.append(event_message(known[0], "0", token, moved_in_from=known[1]))
        for record in records:
            out += self._messages(record, token)
        column = metadata.row_type.fields[0].name if metadata is not None and postgres else "ChangeRecord"
        return response_of(out, column, postgres)

    def _messages(self, record: ChangeRecord, token: str | None) -> list:
        if isinstance(record, DataChangeRecord):
            return [_CSR(data_change_record=data_change_message(record))]
        if isinstance(record, HeartbeatRecord):
            return [heartbeat_message(record.timestamp)]
        assert isinstance(record, ChildPartitionsRecord)
        at, tokens = record.start_timestamp, [c.token for c in record.child_partitions]
        start = start_message(at, record.record_sequence, tokens)
        if token is None:  # the initial query names the first partitions only: no key range moves
            return [start]
        with self.lock:
            for child in record.child_partitions:
                self.parents.setdefault(child.token, (record.start_timestamp, child.parent_tokens))
        return [
            start,
            event_message(at, f"{record.record_sequence}.1", token, moved_out_to=tokens),
            end_message(at, f"{record.record_sequence}.2", token),
        ]


def response_of(messages: list, column: str, postgres: bool) -> PartialResultSet:
    """``ChangeStreamRecord`` messages as one response of a MUTABLE_KEY_RANGE query: a PROTO column
    (GoogleSQL) or a BYTES one (PostgreSQL), each value the message's bytes, base64 as on the wire."""
    response = PartialResultSet.pb()(values=[struct_pb2.Value(string_value=base64.b64encode(m.SerializeToString()).decode()) for m in messages])
    code = TypeCode.BYTES if postgres else TypeCode.PROTO
    row_type = StructType(fields=[StructType.Field(name=column, type_=Type(code=code, proto_type_fqn="" if postgres else PROTO_TYPE))])
    response.metadata.CopyFrom(ResultSetMetadata.pb(ResultSetMetadata(row_type=row_type)))
    return response


def with_options_rows(responses: list, streams: list[str]) -> list:
    """The responses of ``SELECT * FROM information_schema.change_stream_options`` with a
    ``partition_mode`` row for each of ``streams`` appended (Cloud Spanner lists the option)."""
    if not responses or not streams:
        return responses
    metadata = next(r.metadata for r in responses if r.HasField("metadata"))
    names = [f.name.lower() for f in metadata.row_type.fields]
    by_name = {"option_name": "partition_mode", "option_type": "STRING", "option_value": "MUTABLE_KEY_RANGE"}
    last = responses[-1]
    for stream in streams:
        for name in names:
            last.values.append(struct_pb2.Value(string_value=stream if name == "change_stream_name" else by_name.get(name, "")))
    return responses

