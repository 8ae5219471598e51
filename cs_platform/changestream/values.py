"""Spanner's JSON wire encoding of column values -> Python values, driven by the column type.

Wire encoding (same in GoogleSQL and PostgreSQL records): INT64 and NUMERIC as strings, FLOAT64/32 as
numbers or the strings "NaN"/"Infinity"/"-Infinity", BYTES as base64, DATE as "YYYY-MM-DD",
TIMESTAMP as RFC 3339, JSON as a string of JSON text, ARRAY as a list of element encodings.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping

from google.protobuf import struct_pb2

from cs_platform.changestream.errors import MalformedRecordError

_FLOAT_WORDS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def parse_timestamp(text: str) -> datetime:
    """RFC 3339 -> aware UTC datetime (digits past microseconds are cut: commit timestamps have none)."""
    try:
        parsed = datetime.fromisoformat(text)
    except (TypeError, ValueError) as e:
        raise MalformedRecordError(f"timestamp {text!r} is not RFC 3339") from e
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def format_timestamp(ts: datetime) -> str:
    """Aware datetime -> RFC 3339 UTC with microseconds, the form Spanner returns."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _int(value: Any) -> int:
    return int(value)


def _float(value: Any) -> float:
    if isinstance(value, str):
        return _FLOAT_WORDS[value] if value in _FLOAT_WORDS else float(value)
    return float(value)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise MalformedRecordError(f"BOOL value {value!r} is not true/false")


_SCALARS: dict[str, Callable[[Any], Any]] = {
    "BOOL": _bool,
    "INT64": _int,
    "ENUM": _int,
    "FLOAT64": _float,
    "FLOAT32": _float,
    "NUMERIC": Decimal,
    "STRING": str,
    "UUID": str,
    "INTERVAL": str,
    "BYTES": base64.b64decode,
    "PROTO": base64.b64decode,
    "DATE": date.fromisoformat,
    "TIMESTAMP": parse_timestamp,
    "JSON": _json,
}


def read_text(value: struct_pb2.Value) -> str | None:
    """A value of a Spanner read, undecoded (``lazy_decode``), as the text the lake casts. A read
    carries every value in the change stream's wire encoding already (INT64 and NUMERIC as strings,
    BYTES base64, JSON as the server's text ...); the text is what a mod's value is once its JSON is
    read as ``MAP<STRING,STRING>``: strings as themselves, numbers, booleans and arrays as JSON."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "null_value":
        return None
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False)


def _plain(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return [_plain(v) for v in value.list_value.values]
    return None if kind == "null_value" else getattr(value, kind)


def decode(spanner_type: Mapping[str, Any], value: Any) -> Any:
    """Decode one wire value of the given Spanner type structure. NULL stays None."""
    if value is None:
        return None
    code = spanner_type.get("code")
    if code == "ARRAY":
        element = spanner_type.get("array_element_type") or {}
        return [decode(element, item) for item in value]
    decoder = _SCALARS.get(code)
    if decoder is None:
        raise MalformedRecordError(
            f"column type {dict(spanner_type)!r} is not a Spanner type this reader knows; "
            "upgrade cs_platform or report the type"
        )
    try:
        return decoder(value)
    except (ValueError, TypeError, ArithmeticError) as e:
        raise MalformedRecordError(f"value {value!r} is not a valid {code}") from e
