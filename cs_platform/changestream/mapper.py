"""Wire rows -> change records.

GoogleSQL streams return one column ``ChangeRecord ARRAY<STRUCT<data_change_record ARRAY<STRUCT…>>,
heartbeat_record …, child_partitions_record …>>``; PostgreSQL streams return one JSONB column holding
``{"data_change_record": {…}}`` (or heartbeat / child partitions). Both map to the same records.

The GoogleSQL mapper reads the protobuf values the client hands over with ``lazy_decode=True`` and
locates struct fields by the names in the result set's own metadata, never by assumed position.
Skipping the client's eager decoding is most of the reader's speed (see bench/reader_throughput.py).

Rules for input we do not expect: a row carrying a record type we do not know, or a known record
missing a documented field, is a :class:`MalformedRecordError` (mapping it partially could lose
data). A known record with an extra field is mapped and the field is logged once: new optional
fields appear in Spanner releases and ignoring them loses nothing we store.
"""

from __future__ import annotations

import json
import logging
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
    ModType,
    ValueCaptureType,
)
from cs_platform.changestream.values import parse_timestamp

log = logging.getLogger(__name__)

DATA_CHANGE_RECORD = "data_change_record"
HEARTBEAT_RECORD = "heartbeat_record"
CHILD_PARTITIONS_RECORD = "child_partitions_record"

DATA_CHANGE_FIELDS = (
    "commit_timestamp",
    "record_sequence",
    "server_transaction_id",
    "is_last_record_in_transaction_in_partition",
    "table_name",
    "column_types",
    "mods",
    "mod_type",
    "value_capture_type",
    "number_of_records_in_transaction",
    "number_of_partitions_in_transaction",
    "transaction_tag",
    "is_system_transaction",
)
HEARTBEAT_FIELDS = ("timestamp",)
CHILD_PARTITIONS_FIELDS = ("start_timestamp", "record_sequence", "child_partitions")
COLUMN_TYPE_FIELDS = ("name", "type", "is_primary_key", "ordinal_position")
MOD_FIELDS = ("keys", "new_values", "old_values")
CHILD_PARTITION_FIELDS = ("token", "parent_partition_tokens")

_RECORD_FIELDS = {
    DATA_CHANGE_RECORD: DATA_CHANGE_FIELDS,
    HEARTBEAT_RECORD: HEARTBEAT_FIELDS,
    CHILD_PARTITIONS_RECORD: CHILD_PARTITIONS_FIELDS,
}

# Shared by every mod without old (or new) values: read-only, so sharing is safe.
_EMPTY: Mapping[str, Any] = MappingProxyType({})



def _json_object(value) -> Mapping[str, Any]:
    """A JSON-typed protobuf value holding an object; empty ones share ``_EMPTY``."""
    text = value.string_value
    return _EMPTY if text in ("", "{}") else json.loads(text)


_warned_extra_fields: set[tuple[str, str]] = set()


def _check_fields(record_type: str, present: Iterable[str], required: Sequence[str]) -> None:
    present = set(present)
    missing = [f for f in required if f not in present]
    if missing:
        raise MalformedRecordError(
            f"{record_type} lacks field(s) {missing}; the stream returned fields {sorted(present)}. "
            "Is this a Spanner change stream of a supported version?"
        )
    for extra in sorted(present.difference(required)):
        if (record_type, extra) not in _warned_extra_fields:
            _warned_extra_fields.add((record_type, extra))
            log.warning("%s has field %r that cs_platform does not know; it is ignored", record_type, extra)


class _TypeCache:
    """Column type JSON text repeats in every record of a table: parse each distinct text once."""

    def __init__(self) -> None:
        self._parsed: dict[str, Mapping[str, Any]] = {}

    def __call__(self, text: str) -> Mapping[str, Any]:
        parsed = self._parsed.get(text)
        if parsed is None:
            parsed = self._parsed[text] = json.loads(text)
        return parsed


def _enum(kind: type, value: str, field: str):
    try:
        return kind(value)
    except ValueError as e:
        allowed = [m.value for m in kind]
        raise MalformedRecordError(f"{field} {value!r} is not one of {allowed}") from e


def _children(token: str, children: Iterable[ChildPartition]) -> tuple[ChildPartition, ...]:
    """Children of the initial (NULL-token) query have no parents on the wire; their parent is us."""
    return tuple(c if c.parent_tokens else ChildPartition(c.token, (token,)) for c in children)


# ----------------------------------------------------------------------------------- GoogleSQL


def _struct_positions(struct_type, record_type: str, required: Sequence[str]) -> dict[str, int]:
    names = [f.name for f in struct_type.fields]
    _check_fields(record_type, names, required)
    return {name: i for i, name in enumerate(names)}


class GoogleSqlRowMapper:
    """Maps lazily-decoded GoogleSQL ``ChangeRecord`` rows, using the query's own row type."""

    def __init__(self, partition_token: str, fields) -> None:
        if len(fields) != 1 or fields[0].name != "ChangeRecord":
            raise MalformedRecordError(
                f"a change stream query must return one column ChangeRecord, got {[f.name for f in fields]}"
            )
        outer = fields[0].type_.array_element_type.struct_type
        self._token = partition_token
        self._kinds = [f.name for f in outer.fields]
        element = {f.name: f.type_.array_element_type.struct_type for f in outer.fields}
        for kind, required in _RECORD_FIELDS.items():
            if kind not in element:
                raise MalformedRecordError(f"ChangeRecord has no {kind}; fields are {self._kinds}")
        self._dcr = _struct_positions(element[DATA_CHANGE_RECORD], DATA_CHANGE_RECORD, DATA_CHANGE_FIELDS)
        dcr_fields = element[DATA_CHANGE_RECORD].fields
        self._col = _struct_positions(
            dcr_fields[self._dcr["column_types"]].type_.array_element_type.struct_type,
            "column_types",
            COLUMN_TYPE_FIELDS,
        )
        self._mod = _struct_positions(
            dcr_fields[self._dcr["mods"]].type_.array_element_type.struct_type, "mods", MOD_FIELDS
        )
        self._hb = _struct_positions(element[HEARTBEAT_RECORD], HEARTBEAT_RECORD, HEARTBEAT_FIELDS)
        self._cpr = _struct_positions(
            element[CHILD_PARTITIONS_RECORD], CHILD_PARTITIONS_RECORD, CHILD_PARTITIONS_FIELDS
        )
        cpr_fields = element[CHILD_PARTITIONS_RECORD].fields
        self._child = _struct_positions(
            cpr_fields[self._cpr["child_partitions"]].type_.array_element_type.struct_type,
            "child_partitions",
            CHILD_PARTITION_FIELDS,
        )
        self._types = _TypeCache()

    def map_row(self, row: Sequence[Any]) -> list[ChangeRecord]:
        """One wire row (list of protobuf ``Value``) -> its records (normally exactly one)."""
        out: list[ChangeRecord] = []
        for change_record in row[0].list_value.values:
            for kind, holder in zip(self._kinds, change_record.list_value.values):
                for item in holder.list_value.values:
                    out.append(self._map(kind, item.list_value.values))
        return out

    def _map(self, kind: str, v) -> ChangeRecord:
        if kind == DATA_CHANGE_RECORD:
            return self._data_change(v)
        if kind == HEARTBEAT_RECORD:
            return HeartbeatRecord(self._token, parse_timestamp(v[self._hb["timestamp"]].string_value))
        if kind == CHILD_PARTITIONS_RECORD:
            return self._child_partitions(v)
        raise MalformedRecordError(
            f"change stream returned a {kind!r}, which cs_platform does not know; upgrade cs_platform "
            "(the stream may use a newer partition mode)"
        )

    def _data_change(self, v) -> DataChangeRecord:
        p = self._dcr
        col, mod, types = self._col, self._mod, self._types
        column_types = tuple(
            ColumnType(
                c[col["name"]].string_value,
                types(c[col["type"]].string_value),
                c[col["is_primary_key"]].bool_value,
                int(c[col["ordinal_position"]].string_value),
            )
            for c in (x.list_value.values for x in v[p["column_types"]].list_value.values)
        )
        keys_at, new_at, old_at = mod["keys"], mod["new_values"], mod["old_values"]

        mods = tuple(
            Mod(_json_object(m[keys_at]), _json_object(m[new_at]), _json_object(m[old_at]))
            for m in (x.list_value.values for x in v[p["mods"]].list_value.values)
        )
        return DataChangeRecord(
            partition_token=self._token,
            commit_timestamp=parse_timestamp(v[p["commit_timestamp"]].string_value),
            record_sequence=v[p["record_sequence"]].string_value,
            server_transaction_id=v[p["server_transaction_id"]].string_value,
            is_last_record_in_transaction_in_partition=v[p["is_last_record_in_transaction_in_partition"]].bool_value,
            table_name=v[p["table_name"]].string_value,
            column_types=column_types,
            mods=mods,
            mod_type=_enum(ModType, v[p["mod_type"]].string_value, "mod_type"),
            value_capture_type=_enum(ValueCaptureType, v[p["value_capture_type"]].string_value, "value_capture_type"),
            number_of_records_in_transaction=int(v[p["number_of_records_in_transaction"]].string_value),
            number_of_partitions_in_transaction=int(v[p["number_of_partitions_in_transaction"]].string_value),
            transaction_tag=v[p["transaction_tag"]].string_value,
            is_system_transaction=v[p["is_system_transaction"]].bool_value,
        )

    def _child_partitions(self, v) -> ChildPartitionsRecord:
        p, c = self._cpr, self._child
        children = (
            ChildPartition(
                x[c["token"]].string_value,
                tuple(t.string_value for t in x[c["parent_partition_tokens"]].list_value.values if t.string_value),
            )
            for x in (y.list_value.values for y in v[p["child_partitions"]].list_value.values)
        )
        return ChildPartitionsRecord(
            partition_token=self._token,
            start_timestamp=parse_timestamp(v[p["start_timestamp"]].string_value),
            record_sequence=v[p["record_sequence"]].string_value,
            child_partitions=_children(self._token, children),
        )


# ---------------------------------------------------------------------------------- PostgreSQL


def _require(obj: Mapping[str, Any], record_type: str, required: Sequence[str]) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise MalformedRecordError(f"{record_type} is {type(obj).__name__}, expected a JSON object")
    _check_fields(record_type, obj.keys(), required)
    return obj


def _as_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise MalformedRecordError(f"{what} is {type(value).__name__}, expected a JSON object")
    return value


class PostgresRowMapper:
    """Maps PostgreSQL-dialect rows: one JSONB column of ``{record_type: {...}}``."""

    def __init__(self, partition_token: str) -> None:
        self._token = partition_token

    def map_row(self, row: Sequence[Any]) -> list[ChangeRecord]:
        cell = row[0]
        text = cell if isinstance(cell, str) else cell.string_value
        try:
            document = json.loads(text)
        except json.JSONDecodeError as e:
            raise MalformedRecordError(f"change stream row is not JSON: {text[:200]!r}") from e
        return self.map_document(document)

    def map_document(self, document: Mapping[str, Any]) -> list[ChangeRecord]:
        if not isinstance(document, Mapping) or not document:
            raise MalformedRecordError(f"change stream row {document!r} is not a non-empty JSON object")
        out: list[ChangeRecord] = []
        for kind, body in document.items():
            if kind == DATA_CHANGE_RECORD:
                out.append(self._data_change(_require(body, kind, DATA_CHANGE_FIELDS)))
            elif kind == HEARTBEAT_RECORD:
                body = _require(body, kind, HEARTBEAT_FIELDS)
                out.append(HeartbeatRecord(self._token, parse_timestamp(body["timestamp"])))
            elif kind == CHILD_PARTITIONS_RECORD:
                out.append(self._child_partitions(_require(body, kind, CHILD_PARTITIONS_FIELDS)))
            else:
                raise MalformedRecordError(
                    f"change stream returned a {kind!r}, which cs_platform does not know; upgrade "
                    "cs_platform (the stream may use a newer partition mode)"
                )
        return out

    def _data_change(self, d: Mapping[str, Any]) -> DataChangeRecord:
        column_types = tuple(
            ColumnType(
                c["name"],
                _as_mapping(c["type"], "column type"),
                bool(c["is_primary_key"]),
                int(c["ordinal_position"]),
            )
            for c in (_require(c, "column_types", COLUMN_TYPE_FIELDS) for c in d["column_types"])
        )
        mods = tuple(
            Mod(
                _as_mapping(m["keys"], "mod keys"),
                _as_mapping(m["new_values"], "mod new_values"),
                _as_mapping(m["old_values"], "mod old_values"),
            )
            for m in (_require(m, "mods", MOD_FIELDS) for m in d["mods"])
        )
        return DataChangeRecord(
            partition_token=self._token,
            commit_timestamp=parse_timestamp(d["commit_timestamp"]),
            record_sequence=str(d["record_sequence"]),
            server_transaction_id=str(d["server_transaction_id"]),
            is_last_record_in_transaction_in_partition=bool(d["is_last_record_in_transaction_in_partition"]),
            table_name=d["table_name"],
            column_types=column_types,
            mods=mods,
            mod_type=_enum(ModType, d["mod_type"], "mod_type"),
            value_capture_type=_enum(ValueCaptureType, d["value_capture_type"], "value_capture_type"),
            number_of_records_in_transaction=int(d["number_of_records_in_transaction"]),
            number_of_partitions_in_transaction=int(d["number_of_partitions_in_transaction"]),
            transaction_tag=d["transaction_tag"] or "",
            is_system_transaction=bool(d["is_system_transaction"]),
        )

    def _child_partitions(self, d: Mapping[str, Any]) -> ChildPartitionsRecord:
        children = (
            ChildPartition(c["token"], tuple(t for t in (c["parent_partition_tokens"] or ()) if t))
            for c in (_require(c, "child_partitions", CHILD_PARTITION_FIELDS) for c in d["child_partitions"])
        )
        return ChildPartitionsRecord(
            partition_token=self._token,
            start_timestamp=parse_timestamp(d["start_timestamp"]),
            record_sequence=str(d["record_sequence"]),
            child_partitions=_children(self._token, children),
        )

