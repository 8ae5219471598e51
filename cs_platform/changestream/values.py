"""Spanner's JSON wire encoding of column values -> Python values, driven by the column type.

Wire encoding (same in GoogleSQL and PostgreSQL records): INT64 and NUMERIC as strings, FLOAT64/32 as
numbers or the strings "NaN"/"Infinity"/"-Infinity", BYTES as base64, DATE as "YYYY-MM-DD",
TIMESTAMP as RFC 3339, JSON as a string of JSON text, ARRAY as a list of element encodings.
"""

from __future__ import annotations

import base64
import json
import math
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping

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


def encode(spanner_type: Mapping[str, Any], value: Any) -> Any:
    """A value as the Spanner client returns it from a read, in the wire encoding (what
    :func:`decode` takes): a table snapshot then carries every value exactly as a change record
    would, and the lake types both with the same expressions. The client hands BYTES back
    base64-encoded and JSON as a ``JsonObject``."""
    if value is None:
        return None
    code = spanner_type.get("code")
    if code == "ARRAY":
        element = spanner_type.get("array_element_type") or {}
        return [encode(element, item) for item in value]
    if code in ("INT64", "ENUM"):
        return str(value)
    if code in ("FLOAT64", "FLOAT32"):
        if math.isnan(value):
            return "NaN"
        return ("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else value
    if code == "NUMERIC":
        return format(value, "f")
    if code in ("BYTES", "PROTO"):
        return value.decode("ascii") if isinstance(value, bytes) else base64.b64encode(bytes(value)).decode("ascii")
    if code == "DATE":
        return value.isoformat()
    if code == "TIMESTAMP":
        return format_timestamp(value)
    if code == "JSON":
        text = value.serialize() if hasattr(value, "serialize") else json.dumps(value)
        if text is None:
            return None
        if spanner_type.get("type_annotation") == "PG_JSONB":
            # PostgreSQL's jsonb text: keys by length then bytes, ", " and ": " between items.
            return json.dumps(_jsonb_order(json.loads(text)), separators=(", ", ": "), ensure_ascii=False)
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if code in _SCALARS:
        return value if isinstance(value, bool) else str(value)
    raise MalformedRecordError(f"column type {dict(spanner_type)!r} is not a Spanner type this reader knows; upgrade cs_platform or report the type")


def _jsonb_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonb_order(v) for k, v in sorted(value.items(), key=lambda item: (len(item[0].encode()), item[0].encode()))}
    return [_jsonb_order(v) for v in value] if isinstance(value, list) else value


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
