"""`kwh export`: a view, table or query to CSV, Parquet or JSON for design reviews.

DuckDB's COPY streams the rows to the file, so a large extract needs bounded memory. CSV is UTF-8
with a header row; column names carry their units (duration_ns, dram_bytes, l2_hit_pct); floating
point columns are written as plain decimals (up to 15 significant digits, 9 places) so spreadsheets
never meet 1e-05 or 3.3e+12; the column order is the view's (or --columns'). A text cell that a
spreadsheet would run as a formula (it starts with =, +, -, @, a tab or a carriage return: OWASP's
CSV injection) is written with a leading single quote, unless the text is a plain number (-1.5):
kernel names, model names and tags come from whoever made the export.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from kwarehouse import views
from kwarehouse.errors import KwhError
from kwarehouse.store.layout import sql_string
from kwarehouse.store.warehouse import Warehouse

FORMATS = ("csv", "parquet", "json", "jsonl")
# The format an output's extension asks for (kwh export -o k.parquet writes Parquet).
EXTENSIONS = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "jsonl",
              ".ndjson": "jsonl"}


def format_for(output: Path, fmt: str | None) -> str:
    """The format to write: --format when given (it must agree with a known extension), else the
    output's extension; an extension kwh cannot write is an error, not a CSV in disguise."""
    by_name = EXTENSIONS.get(output.suffix.lower())
    if fmt is not None:
        if by_name is not None and by_name != fmt:
            raise KwhError(f"{output}: the name says {by_name} but --format says {fmt}; make them agree")
        return fmt
    if by_name is None:
        raise KwhError(f"{output}: cannot tell the format from {output.suffix or 'a name without extension'!r}; "
                       f"name it .csv, .parquet, .json or .jsonl, or pass --format")
    return by_name
FLOAT_TYPES = ("DOUBLE", "FLOAT", "REAL")
TEXT_TYPES = ("VARCHAR",)
# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection"), and a plain number,
# which may start with + or - but runs nothing.
FORMULA_START = r"^[=+@\t\r-]"
PLAIN_NUMBER = r"[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"


def source_query(con: duckdb.DuckDBPyConnection, source: str) -> str:
    """A view or table name, a .sql file, or a SELECT/WITH query, as one query text."""
    text = source.strip()
    names = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if text in names:
        return f'SELECT * FROM "{text}"'
    if text.lower().endswith(".sql") and Path(text).is_file():
        return Path(text).read_text(encoding="utf-8").strip().rstrip(";")
    if text.split(None, 1)[0].upper() in ("SELECT", "WITH", "FROM", "VALUES", "TABLE"):
        return text.rstrip(";")
    views.view_named(text)   # raises with "did you mean"
    raise KwhError(f"{source!r} is not a view, table, .sql file or query")


def export(warehouse: Warehouse, source: str, output: Path, *, fmt: str = "csv", where: str | None = None,
           columns: list[str] | None = None) -> int:
    """Write the rows of `source` to `output`; returns the number of rows written."""
    if fmt not in FORMATS:
        raise KwhError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    con = warehouse.connect()
    try:
        query = source_query(con, source)
        try:
            described = con.execute(f"DESCRIBE SELECT * FROM ({query}) AS source").fetchall()
        except duckdb.Error as exc:
            raise KwhError(str(exc).splitlines()[0]) from None
        types = {name: kind for name, kind, *_ in described}
        order = [name for name, *_ in described]
        if columns:
            unknown = [c for c in columns if c not in types]
            if unknown:
                raise KwhError(f"no column {', '.join(map(repr, unknown))} in {source}; it has: {', '.join(order)}")
            order = columns
        select = ", ".join(_column(name, types[name], fmt) for name in order)
        filtered = f"SELECT {select} FROM ({query}) AS source" + (f" WHERE {where}" if where else "")
        output.parent.mkdir(parents=True, exist_ok=True)
        options = {"csv": "FORMAT CSV, HEADER true", "parquet": "FORMAT PARQUET, COMPRESSION zstd",
                   "json": "FORMAT JSON, ARRAY true", "jsonl": "FORMAT JSON"}[fmt]
        temporary = output.with_name(f".{output.name}.partial")
        try:
            result = con.execute(f"COPY ({filtered}) TO {sql_string(str(temporary))} ({options})").fetchall()
        except duckdb.Error as exc:
            temporary.unlink(missing_ok=True)
            raise KwhError(str(exc).splitlines()[0]) from None
        temporary.replace(output)   # a reader never sees half a file
        return int(result[0][0]) if result else 0
    finally:
        con.close()


def _column(name: str, kind: str, fmt: str) -> str:
    quoted = '"' + name.replace('"', '""') + '"'
    if fmt == "csv" and kind.upper() in FLOAT_TYPES:
        # Fixed-point text with at most 15 significant digits (a double's honest precision) and at
        # most 9 decimals, trailing zeros cut: 11872.5, 66504679296000, 0.398521054 - never 1e-05.
        decimals = (f"CASE WHEN {quoted} = 0 THEN 0 ELSE least(9, greatest(0, "
                    f"14 - TRY_CAST(floor(log10(abs({quoted}))) AS INTEGER))) END")
        fixed = f"printf('%.' || CAST({decimals} AS VARCHAR) || 'f', {quoted})"
        trimmed = f"CASE WHEN contains({fixed}, '.') THEN rtrim(rtrim({fixed}, '0'), '.') ELSE {fixed} END"
        return f"CASE WHEN isfinite({quoted}) THEN {trimmed} ELSE CAST({quoted} AS VARCHAR) END AS {quoted}"
    if fmt == "csv" and kind.upper() in TEXT_TYPES:
        return (f"CASE WHEN regexp_matches({quoted}, {sql_string(FORMULA_START)}) "
                f"AND NOT regexp_full_match({quoted}, {sql_string(PLAIN_NUMBER)}) "
                f"THEN chr(39) || {quoted} ELSE {quoted} END AS {quoted}")
    return quoted
