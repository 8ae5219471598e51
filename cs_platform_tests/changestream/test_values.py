"""Typed decoding of Spanner's wire encoding, on values recorded in Cloud Spanner's own encoding."""

import math
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from google.protobuf import struct_pb2

from cs_platform.changestream import values
from cs_platform.changestream.errors import MalformedRecordError

INT64 = {"code": "INT64"}


@pytest.mark.parametrize(
    "spanner_type, wire, expected",
    [
        (INT64, "9223372036854775807", 9223372036854775807),
        ({"code": "FLOAT64"}, 1.5, 1.5),
        ({"code": "FLOAT64"}, "Infinity", math.inf),
        ({"code": "FLOAT64"}, "-Infinity", -math.inf),
        ({"code": "FLOAT32"}, 0.25, 0.25),
        ({"code": "NUMERIC"}, "123456789.123456789", Decimal("123456789.123456789")),
        ({"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}, "1.5", Decimal("1.5")),
        ({"code": "STRING"}, "héllo", "héllo"),
        ({"code": "BYTES"}, "eHk=", b"xy"),
        ({"code": "BOOL"}, True, True),
        ({"code": "DATE"}, "2024-01-02", date(2024, 1, 2)),
        # Cloud Spanner keeps sub-second digits (the emulator cuts them: EMULATOR.md).
        ({"code": "TIMESTAMP"}, "2024-01-02T03:04:05.123456Z", datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)),
        ({"code": "JSON"}, '{"k":[1,2]}', {"k": [1, 2]}),
        ({"code": "JSON", "type_annotation": "PG_JSONB"}, '{"a": null}', {"a": None}),
        # Cloud Spanner encodes a NULL array element as null (the emulator says "NULL": EMULATOR.md).
        ({"code": "ARRAY", "array_element_type": INT64}, ["1", None, "3"], [1, None, 3]),
        ({"code": "ARRAY", "array_element_type": {"code": "STRING"}}, ["a", None], ["a", None]),
        (INT64, None, None),
    ],
)
def test_decode_cloud_spanner_encoding(spanner_type, wire, expected):
    assert values.decode(spanner_type, wire) == expected


def test_nan_is_decoded():
    assert math.isnan(values.decode({"code": "FLOAT64"}, "NaN"))


def test_emulator_null_array_element_is_rejected_not_guessed():
    # The emulator's "NULL" string for a NULL element would silently become data if we guessed.
    with pytest.raises(MalformedRecordError, match="not a valid INT64"):
        values.decode({"code": "ARRAY", "array_element_type": INT64}, ["1", "NULL"])


def test_unknown_type_names_the_type():
    with pytest.raises(MalformedRecordError, match="GEOGRAPHY"):
        values.decode({"code": "GEOGRAPHY"}, "POINT(1 1)")


def test_timestamp_round_trip():
    ts = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    assert values.parse_timestamp(values.format_timestamp(ts)) == ts
    assert values.parse_timestamp("2026-01-02T03:04:05.123456789Z") == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)


def value(**kind) -> struct_pb2.Value:
    return struct_pb2.Value(**kind)


def values_of(*items: struct_pb2.Value) -> struct_pb2.Value:
    return struct_pb2.Value(list_value=struct_pb2.ListValue(values=list(items)))


@pytest.mark.parametrize(
    "read, text",
    [
        (value(string_value="9223372036854775807"), "9223372036854775807"),  # INT64, NUMERIC, BYTES, DATE ... as sent
        (value(string_value='{"a":1,"é":[true]}'), '{"a":1,"é":[true]}'),  # JSON: the server's text
        (value(number_value=-0.0), "-0.0"),
        (value(number_value=1.5), "1.5"),
        (value(string_value="NaN"), "NaN"),
        (value(bool_value=True), "true"),
        (value(null_value=struct_pb2.NULL_VALUE), None),
        (values_of(value(string_value="1"), value(null_value=struct_pb2.NULL_VALUE)), '["1",null]'),
        (values_of(value(string_value="é"), value(string_value="Infinity")), '["é","Infinity"]'),  # FLOAT64 ±Inf, NaN: strings
    ],
)
def test_a_read_value_becomes_the_text_a_mod_value_is_cast_from(read, text):
    """What from_json(new_values, 'MAP<STRING,STRING>') makes of the same value in a mod: strings
    bare, everything else JSON text."""
    assert values.read_text(read) == text
