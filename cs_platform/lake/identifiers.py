"""Names and strings written into SQL text, quoted for the engine that reads them (no Spark import)."""

from __future__ import annotations


def quoted(name: str) -> str:
    """A name in Spark SQL (a column, a view, or the path in ``delta.`<path>```): backticks, with
    any backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def double_quoted(name: str) -> str:
    """A name in standard SQL (DuckDB, Trino): double quotes, with any double quote in it doubled."""
    return '"' + name.replace('"', '""') + '"'


def standard_string(text: str) -> str:
    """A standard SQL string literal (DuckDB, Trino): single quotes doubled; backslashes are plain."""
    return "'" + text.replace("'", "''") + "'"
