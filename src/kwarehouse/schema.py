"""Table definitions from schema.sql, as Arrow schemas, and the check every written table passes."""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from kwarehouse import cache
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
    """Every table of schema.sql, by name, typed by DuckDB itself so the DDL is the only definition.
    Typing them costs a process ~50 ms of DuckDB (its own connection, the DDL, a query per table), so the
    answer is kept in the cache folder (kwarehouse.cache) under a key of schema.sql, this module and the
    DuckDB and pyarrow versions, and read back from there (~2 ms) where it is intact."""
    key = _cache_key()
    cached = _read_cached(key)
    if cached is not None:
        return cached
    result = _typed_by_duckdb()
    with contextlib.suppress(OSError):
        cache.write(cache.folder() / f"schema-{key}.json", _serialized(result, key))
    return result


def _cache_key() -> str:
    from importlib import metadata
    digest = hashlib.sha256(schema_sql().encode())
    digest.update(resources.files("kwarehouse").joinpath("schema.py").read_bytes())
    for package in ("duckdb", "pyarrow"):
        digest.update(f"\0{package} {metadata.version(package)}".encode())
    return digest.hexdigest()[:24]


def _serialized(result: dict[str, TableSchema], key: str) -> bytes:
    return json.dumps({"key": key, "tables": [
        {"name": t.name, "arrow": base64.b64encode(t.arrow.serialize().to_pybytes()).decode(),
         "not_null": sorted(t.not_null), "sql_types": [list(c) for c in t.sql_types]}
        for t in result.values()]}).encode()


def _read_cached(key: str) -> dict[str, TableSchema] | None:
    """The tables kept under `key`, or None where there are none, or they cannot be read whole."""
    import pyarrow as pa
    try:
        kept = json.loads((cache.folder() / f"schema-{key}.json").read_bytes())
        if kept["key"] != key:
            return None
        result = {t["name"]: TableSchema(t["name"], pa.ipc.read_schema(pa.py_buffer(base64.b64decode(t["arrow"]))),
                                         frozenset(t["not_null"]), tuple(tuple(c) for c in t["sql_types"]))
                  for t in kept["tables"]}
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    return result if tuple(result) == _ordered(table_names()) else None


def _ordered(names) -> tuple[str, ...]:
    order = {n: i for i, n in enumerate(("runs", "kernels", "metrics", "rules"))}
    return tuple(sorted(names, key=lambda n: (order.get(n, 99), n)))


def _typed_by_duckdb() -> dict[str, TableSchema]:
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
    result = {}
    for name in _ordered(columns):
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
