"""Table definitions from schema.sql, as Arrow schemas, and the check every written table passes."""

from __future__ import annotations

import functools
from dataclasses import dataclass
import re
from importlib import resources
from typing import TYPE_CHECKING

from kwarehouse.errors import SchemaError

if TYPE_CHECKING:
    import pyarrow as pa
# duckdb and pyarrow are imported where used: the fast read path (store/fast_read.py) and kwh --help need
# only the table names.

PARTITION_COLUMNS = ("model", "gpu")
# Tables partitioned otherwise: the daily rollups, by day.
TABLE_PARTITIONS = {"rollup_kernels_daily": ("day",), "rollup_libraries_daily": ("day",)}
ROLLUP_TABLES = tuple(TABLE_PARTITIONS)


@dataclass(frozen=True)
class TableSchema:
    name: str
    arrow: pa.Schema            # every column, partition columns included, in schema.sql order
    not_null: frozenset[str]
    sql_types: tuple[tuple[str, str], ...]  # (column, DuckDB type) in order, for typed empty views

    @property
    def partition_columns(self) -> tuple[str, ...]:
        return TABLE_PARTITIONS.get(self.name, PARTITION_COLUMNS)

    @property
    def file_schema(self) -> pa.Schema:
        """Columns stored inside the Parquet files: the partition columns live in directory names."""
        import pyarrow as pa
        return pa.schema([f for f in self.arrow if f.name not in self.partition_columns])


def schema_sql() -> str:
    return resources.files("kwarehouse").joinpath("schema.sql").read_text(encoding="utf-8")


@functools.cache
def tables() -> dict[str, TableSchema]:
    """Every table of schema.sql, by name, typed by DuckDB itself so the DDL is the only definition."""
    import duckdb
    con = duckdb.connect()
    con.execute(schema_sql())
    # every table's columns in one query (one per table and question cost 40 ms of each process)
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    for table, column, data_type, nullable in con.execute(
            "SELECT table_name, column_name, data_type, is_nullable = 'YES' FROM information_schema.columns "
            "WHERE table_name IN (SELECT table_name FROM duckdb_tables()) "
            "ORDER BY table_name, ordinal_position").fetchall():
        columns.setdefault(table, []).append((column, data_type, nullable))
    order = {n: i for i, n in enumerate(("runs", "kernels", "metrics", "rules"))}
    result = {}
    for name in sorted(columns, key=lambda n: (order.get(n, 99), n)):
        arrow = con.sql(f'SELECT * FROM "{name}" LIMIT 0').to_arrow_table().schema
        result[name] = TableSchema(name, arrow.remove_metadata(),
                                   frozenset(c for c, _, nullable in columns[name] if not nullable),
                                   tuple((c, t) for c, t, _ in columns[name]))
    con.close()
    return result


@functools.cache
def table_names() -> tuple[str, ...]:
    """The names of schema.sql's tables, read from its text (tables() types them through DuckDB)."""
    return tuple(re.findall(r"^CREATE TABLE (?:IF NOT EXISTS )?\"?(\w+)", schema_sql(), re.MULTILINE | re.IGNORECASE))


def conform(name: str, table: pa.Table, keep_views: bool = False) -> pa.Table:
    """Return `table` with exactly the schema.sql columns and types of `name`, or raise.

    Extra or missing columns are a bug in kwh, not in the input, so the message says so.
    keep_views: text columns that come as string_view (polars hands its strings over so, without a
    copy) stay string_view; the Parquet writer stores them as the same strings."""
    import pyarrow as pa
    spec = tables()[name]
    missing = [c for c in spec.arrow.names if c not in table.column_names]
    extra = [c for c in table.column_names if c not in spec.arrow.names]
    if missing or extra:
        raise SchemaError(f"internal: table {name} does not match warehouse/schema.sql "
                       f"(missing {missing}, unexpected {extra}); please report this")
    table = table.select(spec.arrow.names)
    target = spec.arrow
    if keep_views:
        target = pa.schema([f.with_type(pa.string_view()) if f.type == pa.string()
                            and table.schema.field(f.name).type == pa.string_view() else f for f in target])
    try:
        table = table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"internal: table {name} has a column of the wrong type: {exc}") from exc
    for column in spec.not_null:
        if table.column(column).null_count:
            raise SchemaError(f"internal: table {name} has NULLs in NOT NULL column {column}")
    return table
