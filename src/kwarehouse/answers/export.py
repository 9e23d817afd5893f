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
from kwarehouse.answers import queries
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


# The CSV cell of each column type: macros of sql/export_csv_cells.sql (plain decimals; formulas quoted).
CSV_CELLS = {"DOUBLE": "csv_decimal", "FLOAT": "csv_decimal", "REAL": "csv_decimal", "VARCHAR": "csv_text"}


def source_query(con: duckdb.DuckDBPyConnection, source: str) -> str:
    """A view or table name, a .sql file, or a SELECT/WITH query, as one query text."""
    text = source.strip()
    names = {r[0] for r in con.execute(queries.load("export_sources")).fetchall()}
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
        if fmt == "csv":
            con.execute(queries.load("export_csv_cells"))
        # What is composed here varies with the request: the columns (quoted names), the source query
        # (a view, a file or the user's own), the user's --where and the format's COPY options.
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
    cell = CSV_CELLS.get(kind.upper()) if fmt == "csv" else None
    return f"{cell}({quoted}) AS {quoted}" if cell else quoted
