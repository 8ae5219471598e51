"""Typed decoding of Spanner's wire encoding, on values recorded in Cloud Spanner's own encoding."""

import math
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest

from google.cloud.spanner_v1 import JsonObject

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


@pytest.mark.parametrize(
    "spanner_type, read, wire",
    [
        (INT64, 9223372036854775807, "9223372036854775807"),
        ({"code": "FLOAT64"}, 1.5, 1.5),
        ({"code": "FLOAT64"}, math.inf, "Infinity"),
        ({"code": "FLOAT64"}, -math.inf, "-Infinity"),
        ({"code": "FLOAT32"}, math.nan, "NaN"),
        ({"code": "NUMERIC"}, Decimal("123456789.123456789"), "123456789.123456789"),
        ({"code": "NUMERIC"}, Decimal("1E+2"), "100"),
        ({"code": "STRING"}, "héllo", "héllo"),
        ({"code": "BYTES"}, b"eHk=", "eHk="),  # the client reads BYTES as their base64 text
        ({"code": "BOOL"}, False, False),
        ({"code": "DATE"}, date(2024, 1, 2), "2024-01-02"),
        ({"code": "TIMESTAMP"}, datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc), "2024-01-02T03:04:05.123456Z"),
        ({"code": "JSON"}, JsonObject({"b": [1, None], "a": "é"}), '{"a":"é","b":[1,null]}'),
        ({"code": "JSON", "type_annotation": "PG_JSONB"}, JsonObject({"bb": {"c": 1}, "a": "é"}), '{"a": "é", "bb": {"c": 1}}'),
        ({"code": "ARRAY", "array_element_type": INT64}, [1, None, -2], ["1", None, "-2"]),
        (INT64, None, None),
    ],
)
def test_a_read_value_is_encoded_as_the_change_stream_sends_it(spanner_type, read, wire):
    """A snapshot row's value in the wire encoding, which decodes back to what was read."""
    assert values.encode(spanner_type, read) == wire
    if not (isinstance(read, float) and math.isnan(read)) and spanner_type["code"] not in ("BYTES", "JSON"):
        assert values.decode(spanner_type, wire) == read
