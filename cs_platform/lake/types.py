"""Spanner column types (from a record's ``column_types``) as Spark SQL types, and the expressions
that turn a mod's wire value (carried as plain text) into that type.

Every encoding that Cloud Spanner or the emulator produces for a valid value is accepted:

- TIMESTAMP/DATE with a year below 1000: the emulator writes the year unpadded
  (``"1-01-01T00:00:00Z"``); Spark only parses four-digit years, so the year is padded first;
- an ARRAY element ``"NULL"`` in a non-STRING array: the emulator's spelling of a NULL element.

UUID and INTERVAL keep their text (``google/spanner/v1/type.proto``: a UUID in lower-case hexadecimal,
RFC 9562; an INTERVAL as an ISO 8601 duration, ``P1Y2M3DT4H5M6.5S``) as STRING: Spark's interval types
hold months or day-time, never both as Spanner's does, and Delta tables cannot store them.

PROTO and ENUM columns (a database's proto bundle) keep what Spanner sends (``google/spanner/v1/
type.proto``: a PROTO value is its serialized message, base64-encoded; an ENUM value is its number,
in decimal): the mirror holds the message's bytes (BINARY) and the enum's number (BIGINT). Every
engine reads both; a reader with the bundle's descriptors decodes the bytes (Spark's
``from_protobuf``) and names the numbers. The type's name (``proto_type_fqn``) is in the changelog's
``column_types`` of every record.

:func:`typed_value` is the value the mirror stores; :func:`untyped` is true where a non-NULL wire
value has no value of the column's type (the cut then names it instead of failing inside Spark).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

_SCALARS = {
    "BOOL": "BOOLEAN",
    "INT64": "BIGINT",
    "FLOAT64": "DOUBLE",
    "FLOAT32": "FLOAT",
    "NUMERIC": "DECIMAL(38,9)",
    "STRING": "STRING",
    "JSON": "STRING",
    "BYTES": "BINARY",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
    "UUID": "STRING",
    "INTERVAL": "STRING",
    "PROTO": "BINARY",
    "ENUM": "BIGINT",
}
_TEXT = {"STRING", "JSON", "UUID", "INTERVAL"}  # no conversion, so nothing can fail
_BASE64 = {"BYTES", "PROTO"}


def mapped(spanner: Mapping[str, Any]) -> bool:
    """Whether the type (an ARRAY's elements included) has a mirror type."""
    if spanner.get("code") == "ARRAY":
        return mapped(spanner.get("array_element_type") or {})
    return spanner.get("code") in _SCALARS


def spark_type(spanner: Mapping[str, Any]) -> str:
    code = spanner["code"]
    if code == "ARRAY":
        return f"ARRAY<{spark_type(spanner['array_element_type'])}>"
    if code not in _SCALARS:
        raise ValueError(f"Spanner type {code} has no mirror mapping yet; extend cs_platform.lake.types")
    return _SCALARS[code]


def _padded_year(text: str) -> str:
    """``text`` with a 1-3 digit leading year padded to four digits (emulator TIMESTAMP/DATE)."""
    return (
        f"CASE WHEN {text} RLIKE '^[0-9]{{1,3}}-' "
        f"THEN concat(lpad(substring_index({text}, '-', 1), 4, '0'), substr({text}, instr({text}, '-'))) "
        f"ELSE {text} END"
    )


def _scalar(text: str, code: str, safe: bool) -> str:
    cast = "try_cast" if safe else "CAST"
    if code in _BASE64:
        return f"{'try_to_binary' if safe else 'to_binary'}({text}, 'base64')"
    if code in ("TIMESTAMP", "DATE"):
        text = _padded_year(text)
    if code in _TEXT:
        return text
    return f"{cast}({text} AS {_SCALARS[code]})"


def typed_value(text: str, spanner: Mapping[str, Any], safe: bool = False) -> str:
    """SQL expression converting the plain-text wire value in ``text`` to the Spark type.

    ``safe`` gives NULL instead of an error for a value that cannot be converted."""
    code = spanner["code"]
    if code != "ARRAY":
        return _scalar(text, code, safe)
    element = spanner["array_element_type"]["code"]
    items = f"from_json({text}, 'ARRAY<STRING>')"
    if element not in _TEXT:
        items = f"transform({items}, x -> CASE WHEN x = 'NULL' THEN NULL ELSE x END)"
    return f"transform({items}, x -> {_scalar('x', element, safe)})"


def untyped(text: str, spanner: Mapping[str, Any]) -> str:
    """SQL predicate: the wire value in ``text`` is not NULL but has no value of the type."""
    if spanner["code"] in _TEXT:
        return "false"
    typed = typed_value(text, spanner, safe=True)
    if spanner["code"] != "ARRAY":
        return f"({text} IS NOT NULL AND {typed} IS NULL)"
    element = spanner["array_element_type"]
    if element["code"] in _TEXT:
        return f"({text} IS NOT NULL AND from_json({text}, 'ARRAY<STRING>') IS NULL)"
    raw = f"transform(from_json({text}, 'ARRAY<STRING>'), x -> CASE WHEN x = 'NULL' THEN NULL ELSE x END)"
    return (
        f"({text} IS NOT NULL AND ({raw} IS NULL OR "
        f"exists(arrays_zip({raw}, {typed}), p -> p['0'] IS NOT NULL AND p['1'] IS NULL)))"
    )


def utc(value: datetime | None) -> datetime | None:
    """A TIMESTAMP collected from PySpark, in UTC.

    PySpark builds it with ``datetime.fromtimestamp``: naive, in the Python process's local time
    zone (not the session's). ``astimezone`` reads a naive value as exactly that local time
    (including which side of a DST fold it is on), so the instant is recovered on any machine."""
    if value is None:
        return None
    return value.astimezone(timezone.utc)


def sql_timestamp(value: datetime) -> str:
    """A SQL TIMESTAMP literal of ``value`` (as :func:`utc` reads it), exact to the microsecond."""
    return f"TIMESTAMP'{utc(value).isoformat()}'"
