"""Spanner column types (from a record's ``column_types``) as Spark SQL types, and the expression
that turns a mod's wire value (carried as plain text, see ``mirrors.plain``) into that type."""

from __future__ import annotations

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
}


def spark_type(spanner: Mapping[str, Any]) -> str:
    code = spanner["code"]
    if code == "ARRAY":
        return f"ARRAY<{spark_type(spanner['array_element_type'])}>"
    if code not in _SCALARS:
        raise ValueError(f"Spanner type {code} has no mirror mapping yet; extend cs_platform.lake.types")
    return _SCALARS[code]


def typed_value(text_column: str, spanner: Mapping[str, Any]) -> str:
    """SQL expression converting the plain-text wire value in ``text_column`` to the Spark type."""
    code = spanner["code"]
    if code == "BYTES":
        return f"unbase64({text_column})"
    if code == "ARRAY":
        element = spanner["array_element_type"]
        if element["code"] == "BYTES":
            return f"transform(from_json({text_column}, 'ARRAY<STRING>'), x -> unbase64(x))"
        return f"CAST(from_json({text_column}, 'ARRAY<STRING>') AS {spark_type(spanner)})"
    return f"CAST({text_column} AS {spark_type(spanner)})"
