"""How the Cloud Spanner front serves PROTO and ENUM columns, which the emulator streams without
their types or values.

A database with a proto bundle (``CREATE PROTO BUNDLE``) has columns typed by its messages and
enums. The emulator (1.5.28) reads such columns right (a query's row type says ``PROTO`` or ``ENUM``
with ``proto_type_fqn``) but elsewhere spells their types by their backquoted names, and streams no
value of theirs:

- a change record's ``column_types`` gives ``{"code": "`cs.Card`"}`` where Cloud Spanner gives the
  ``google.spanner.v1.Type`` of the column in JSON, ``{"code": "PROTO", "proto_type_fqn":
  "cs.Card"}`` (``google/spanner/v1/type.proto``; change records carry types in that form,
  https://cloud.google.com/spanner/docs/change-streams/details#data-change-records);
- its ``mods`` name every such column with a NULL value (an array one with NULL elements), where
  Cloud Spanner sends the value encoded as ``type.proto`` says: a PROTO "as a base64-encoded string"
  of the serialized message, an ENUM "as string, in decimal format";
- ``INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE`` says ``\\`cs.Card\\``` and ``ARRAY<\\`cs.Card\\`>``, where Cloud
  Spanner says ``PROTO<cs.Card>`` and ``ARRAY<PROTO<cs.Card>>`` (as Beam's ``SpannerSchema``
  parses it).

For a database it is told about, the front fills these in from the emulator's own reads, so what
reaches the client is what was committed. A mod's new values are its row read at the commit
timestamp; its old values, the row read 1 µs before it (a row's previous version is older than
any commit that changes it). Only the columns the emulator's record names are filled, so the value
capture type still decides which columns a mod carries. A type is the one the read's row type
gives at that timestamp, so a column retyped mid-stream streams its type of the moment.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime
from typing import Iterable, Iterator

import grpc
from google.cloud.spanner_v1.types import CreateSessionRequest, ExecuteSqlRequest, PartialResultSet, ResultSet, Session
from google.protobuf import json_format, struct_pb2

from cs_platform.changestream.metadata import ONE_MICROSECOND
from cs_platform.changestream.values import format_timestamp, parse_timestamp
from cs_platform.dev.front.partial_results import complete_values

_BACKQUOTED = re.compile(r"`([^`]+)`")
_SPANNER_TYPE = "spanner_type"
_KEYS_A_QUERY = 100  # mods read back in one query (a query may bind at most 950 parameters)


def _quoted(name: str) -> str:
    """A table or column name for GoogleSQL: each part of ``schema.table`` in backquotes."""
    return ".".join(f"`{part}`" for part in name.split("."))


def _bare_name(type_json: dict) -> str | None:
    """The proto type name the emulator put where a type code belongs (an array's element too)."""
    found = _BACKQUOTED.fullmatch(type_json.get("code", ""))
    if found is None and "array_element_type" in type_json:
        return _bare_name(type_json["array_element_type"])
    return found.group(1) if found else None


def _positions(fields) -> dict[str, int]:
    """Each field's position in a struct, by name (the row type says which is where)."""
    return {f.name: i for i, f in enumerate(fields)}


def _as_json(type_pb) -> dict:
    return json_format.MessageToDict(type_pb, preserving_proto_field_name=True)


def _plain(value: struct_pb2.Value):
    """A result value as JSON holds it (strings stay strings: the encoding type.proto gives)."""
    return json_format.MessageToDict(value)


class ProtoColumns:
    """The databases whose PROTO and ENUM columns the front fills in, and the reads that do it.

    ``channel`` is the front's channel to the emulator. The reads run in sessions of the front's
    own, one per read at a time: a client's session is busy with the query being served, and the
    emulator drops a session's transaction when another starts on it (``changestream/connection.py``)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._execute = channel.unary_unary("/google.spanner.v1.Spanner/ExecuteSql")
        self._create_session = channel.unary_unary("/google.spanner.v1.Spanner/CreateSession")
        self._databases: set[str] = set()
        self._idle_sessions: dict[str, list[str]] = {}
        self._kinds: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def add(self, database: str) -> None:
        """Fill in the PROTO and ENUM columns of database ``database`` (its id)."""
        with self._lock:
            self._databases.add(database)

    def covers(self, session: str) -> bool:
        """Whether the database of ``session`` (a session's full name) has its proto columns filled."""
        path = _database_path(session)
        with self._lock:
            return path.rsplit("/", 1)[-1] in self._databases

    # -- change records -----------------------------------------------------------------------------

    def change_records(self, session: str, metadata, rows: list[struct_pb2.Value]) -> list[struct_pb2.Value]:
        """The complete rows of a GoogleSQL change stream answer (row type ``metadata``), each data
        change record's PROTO and ENUM types and values filled in, in place."""
        if metadata is None or not rows:
            return rows
        record_fields = metadata.row_type.fields[0].type_.array_element_type.struct_type.fields
        kinds = [f.name for f in record_fields]
        data_change = record_fields[kinds.index("data_change_record")].type_.array_element_type.struct_type.fields
        at = _positions(data_change)
        at.update({f"column_types.{k}": v for k, v in _positions(data_change[at["column_types"]].type_.array_element_type.struct_type.fields).items()})
        at.update({f"mods.{k}": v for k, v in _positions(data_change[at["mods"]].type_.array_element_type.struct_type.fields).items()})
        for row in rows:
            for record in row.list_value.values:
                for change in record.list_value.values[kinds.index("data_change_record")].list_value.values:
                    self._fill(_database_path(session), change.list_value.values, at)
        return rows

    def _fill(self, database: str, fields, at: dict[str, int]) -> None:
        """One data change record's fields (positions ``at``), filled in in place."""
        name, kind, is_key = at["column_types.name"], at["column_types.type"], at["column_types.is_primary_key"]
        columns = [c.list_value.values for c in fields[at["column_types"]].list_value.values]
        types = {c[name].string_value: json.loads(c[kind].string_value) for c in columns}
        filled = [column for column, t in types.items() if _bare_name(t)]
        if not filled:
            return
        table = fields[at["table_name"]].string_value
        keys = {c[name].string_value: types[c[name].string_value] for c in columns if c[is_key].bool_value}
        mods = [m.list_value.values for m in fields[at["mods"]].list_value.values]
        commit = parse_timestamp(fields[at["commit_timestamp"]].string_value)
        for side, moment in (("new_values", commit), ("old_values", commit - ONE_MICROSECOND)):
            position = at[f"mods.{side}"]
            wanted = [m for m in mods if set(json.loads(m[position].string_value or "{}")) & set(filled)]
            if not wanted and side == "old_values":
                continue
            mod_keys = [json.loads(m[at["mods.keys"]].string_value) for m in wanted]
            rows, read_types = self._rows_at(database, table, keys, filled, mod_keys, moment)
            for mod, key in zip(wanted, mod_keys):
                values = json.loads(mod[position].string_value)
                row = rows.get(json.dumps(key, sort_keys=True), {})  # none: the row did not exist then
                values.update({column: row.get(column) for column in filled if column in values})
                mod[position].string_value = json.dumps(values)
            if side == "new_values":  # the types of the commit's moment
                for column in columns:
                    if column[name].string_value in read_types:
                        column[kind].string_value = json.dumps(read_types[column[name].string_value])

    def _rows_at(
        self, database: str, table: str, keys: dict[str, dict], columns: list[str], wanted: list[dict], moment: datetime
    ) -> tuple[dict[str, dict], dict[str, dict]]:
        """``columns`` of the rows of ``table`` with the keys ``wanted`` as they stood at ``moment``,
        by their keys in JSON (sorted), and the columns' types at ``moment``."""
        found: dict[str, dict] = {}
        types: dict[str, dict] = {}
        names = list(keys)
        select = f"SELECT {', '.join(_quoted(n) for n in names + columns)} FROM {_quoted(table)}"
        for first in range(0, max(len(wanted), 1), _KEYS_A_QUERY):
            batch = wanted[first : first + _KEYS_A_QUERY]
            params, param_types, matches = {}, {}, []
            for i, key in enumerate(batch):
                terms = []
                for j, name in enumerate(names):
                    param = f"k{i}_{j}"
                    params[param] = key.get(name)
                    param_types[param] = keys[name]
                    terms.append(f"({_quoted(name)} = @{param} OR ({_quoted(name)} IS NULL AND @{param} IS NULL))")
                matches.append("(" + " AND ".join(terms) + ")")
            sql = f"{select} WHERE {' OR '.join(matches) or 'FALSE'}"
            answer = self._query(database, sql, params, param_types, moment)
            fields = [f.name for f in answer.metadata.row_type.fields]
            types.update({f.name: _as_json(f.type_) for f in answer.metadata.row_type.fields if f.name in columns})
            for row in answer.rows:
                values = dict(zip(fields, (_plain(v) for v in row.values)))
                found[json.dumps({n: values[n] for n in names}, sort_keys=True)] = {n: values[n] for n in columns}
        return found, types

    # -- INFORMATION_SCHEMA ---------------------------------------------------------------------------

    def schema_answer(self, session: str, responses: Iterable[bytes]) -> Iterator[bytes]:
        """A forwarded query's responses, with Cloud Spanner's spelling of proto types in any
        ``SPANNER_TYPE`` column (a query of ``INFORMATION_SCHEMA.COLUMNS``); other answers pass as
        they are."""
        responses = iter(responses)
        first = next(responses, None)
        if first is None:
            return
        head = PartialResultSet.pb().FromString(first)
        names = [f.name.lower() for f in head.metadata.row_type.fields]
        if _SPANNER_TYPE not in names:
            yield first
            yield from responses
            return
        parsed = [head, *(PartialResultSet.pb().FromString(r) for r in responses)]
        values = complete_values(parsed)
        column, width = names.index(_SPANNER_TYPE), len(names)
        database = _database_path(session)
        for i in range(column, len(values), width):
            if values[i].HasField("string_value"):
                values[i].string_value = self._spelled(database, values[i].string_value)
        answer = PartialResultSet.pb()(metadata=head.metadata, values=values, resume_token=parsed[-1].resume_token)
        if parsed[-1].HasField("stats"):
            answer.stats.CopyFrom(parsed[-1].stats)
        yield answer.SerializeToString()

    def _spelled(self, database: str, spanner_type: str) -> str:
        """``\\`cs.Card\\``` as ``PROTO<cs.Card>``, ``ARRAY<\\`cs.Suit\\`>`` as ``ARRAY<ENUM<cs.Suit>>``."""
        return _BACKQUOTED.sub(lambda m: f"{self._kind(database, m.group(1))}<{m.group(1)}>", spanner_type)

    def _kind(self, database: str, name: str) -> str:
        """PROTO or ENUM: what the emulator's row type says of a value of type ``name``."""
        with self._lock:
            known = self._kinds.get((database, name))
        if known is None:
            answer = self._query(database, f"SELECT CAST(NULL AS {_quoted(name)}) AS v", {}, {}, None)
            known = _as_json(answer.metadata.row_type.fields[0].type_)["code"]
            with self._lock:
                self._kinds[(database, name)] = known
        return known

    # -- the emulator ---------------------------------------------------------------------------------

    def _query(self, database: str, sql: str, params: dict, param_types: dict, moment: datetime | None):
        session = self._take_session(database)
        try:
            return self._query_in(session, sql, params, param_types, moment)
        finally:
            with self._lock:
                self._idle_sessions[database].append(session)

    def _query_in(self, session: str, sql: str, params: dict, param_types: dict, moment: datetime | None):
        request = ExecuteSqlRequest.pb()(session=session, sql=sql)
        for name, value in params.items():
            json_format.ParseDict(value, request.params.fields[name])
            json_format.ParseDict(param_types[name], request.param_types[name])
        read_only = request.transaction.single_use.read_only
        if moment is None:
            read_only.strong = True
        else:
            read_only.read_timestamp.FromJsonString(format_timestamp(moment))
        return ResultSet.pb().FromString(self._execute(request.SerializeToString(), timeout=30))

    def _take_session(self, database: str) -> str:
        with self._lock:
            idle = self._idle_sessions.setdefault(database, [])
            if idle:
                return idle.pop()
        request = CreateSessionRequest.pb()(database=database)
        return Session.pb().FromString(self._create_session(request.SerializeToString(), timeout=30)).name


def _database_path(session: str) -> str:
    """``projects/p/instances/i/databases/d`` of a session's full name."""
    return session.split("/sessions/", 1)[0]
