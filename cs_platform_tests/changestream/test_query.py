from datetime import datetime, timedelta, timezone

import pytest

from cs_platform.changestream.errors import InvalidIdentifierError
from cs_platform.changestream.query import ChangeStreamQuery, Dialect, quote_table
from cs_platform.errors import InvalidArgumentError, TerminalError

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "name",
    ["Stream; DROP TABLE Accounts", "S(NULL,NULL,NULL,1000)--", "a b", "`x`", '"x"', "1abc", "", "x" * 129, "Stream\n"],
)
def test_injection_attempts_in_stream_name_are_rejected(name):
    with pytest.raises(InvalidIdentifierError, match="not a valid Spanner identifier") as e:
        ChangeStreamQuery(name)
    assert isinstance(e.value, TerminalError)


@pytest.mark.parametrize("millis", [99, 300_001, 0, -5, 1.5, True, "1000"])
def test_heartbeat_out_of_range(millis):
    with pytest.raises(InvalidArgumentError, match="heartbeat_millis .* from 100 to 300000"):
        ChangeStreamQuery("S", heartbeat_millis=millis)


@pytest.mark.parametrize("millis", [100, 1_000, 300_000])
def test_heartbeat_in_range(millis):
    assert ChangeStreamQuery("S", heartbeat_millis=millis).heartbeat_millis == millis


def test_googlesql_statement_binds_every_argument():
    st = ChangeStreamQuery("Orders", heartbeat_millis=500).statement(T0, T0 + timedelta(seconds=1), "Zq9+/tok==")
    assert st.sql.startswith("SELECT ChangeRecord FROM READ_Orders(")
    assert st.params == {
        "start_timestamp": T0,
        "end_timestamp": T0 + timedelta(seconds=1),
        "partition_token": "Zq9+/tok==",
        "heartbeat_milliseconds": 500,
    }
    assert "Zq9" not in st.sql


def test_postgres_statement():
    st = ChangeStreamQuery("orders", Dialect.POSTGRESQL).statement(T0, None, None)
    assert st.sql == "SELECT * FROM spanner.read_json_orders($1, $2, $3, $4, null)"
    assert st.params == {"p1": T0, "p2": None, "p3": None, "p4": 2000}


def test_end_before_start_is_rejected():
    with pytest.raises(InvalidArgumentError, match="before start"):
        ChangeStreamQuery("S").statement(T0, T0 - timedelta(seconds=1), None)


def test_a_table_in_a_named_schema_is_quoted_part_by_part_and_each_part_named_when_invalid():
    assert quote_table("Order") == "`Order`" and quote_table("sch.Order") == "`sch`.`Order`"
    assert quote_table("sch.Order", Dialect.POSTGRESQL) == '"sch"."Order"'
    with pytest.raises(InvalidIdentifierError, match="^schema name 'a b'"):
        quote_table("a b.Order")
    with pytest.raises(InvalidIdentifierError, match="^table name 'Or der'"):
        quote_table("sch.Or der")
