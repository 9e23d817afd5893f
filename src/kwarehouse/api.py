"""The Python API, for notebooks and scripts: `kwarehouse.open(path)`.

    import kwarehouse
    kwh = kwarehouse.open("warehouse")
    kwh.ingest("runs/")
    kwh.sql("SELECT model, count(*) AS kernels FROM kernels GROUP BY 1").pl()   # or .df(), .arrow()
    kwh.table("kernels").filter(pl.col("model") == "llama").collect()           # polars LazyFrame
    kwh.views()                                                                 # {name: description}

The CLI and this API call the same library functions; queries see the committed runs of one
catalog snapshot, taken again when a later commit changed the warehouse.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from kwarehouse import pipeline, schema, views
from kwarehouse.store import Warehouse, _real_names


class KernelWarehouse:
    """One warehouse: SQL over its tables and views, polars frames, and ingest."""

    def __init__(self, path: Path | str = "warehouse", catalog: str | None = None):
        self.warehouse = Warehouse(path, catalog)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._generation: int | None = None

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with every table and view; rebuilt after a commit changed the catalog."""
        generation = self.warehouse.snapshot().generation
        if self._con is None or generation != self._generation:
            if self._con is not None:
                self._con.close()
            self._con = self.warehouse.connect()
            self._generation = generation
        return self._con

    def sql(self, query: str, params: list | None = None) -> duckdb.DuckDBPyRelation:
        """A DuckDB relation: .pl() (polars), .df() (pandas), .arrow(), .fetchall(), .show()."""
        return self._connection().sql(query, params=params)

    def table(self, name: str) -> pl.LazyFrame:
        """A base table as a polars LazyFrame over exactly the committed Parquet files (real model and
        GPU names included)."""
        if name not in schema.tables():
            raise KeyError(f"no table {name!r}; tables: {', '.join(schema.tables())}")
        spec = schema.tables()[name]
        snapshot = self.warehouse.snapshot()
        hive = {c: pl.String for c in spec.partition_columns}
        target = pl.from_arrow(spec.arrow.empty_table()).lazy()
        groups: dict[tuple, list[str]] = {}
        for relative in snapshot.files.get(name, []):
            if self.warehouse.read_path(relative).exists():
                real = _real_names(Path(relative), snapshot.names)
                groups.setdefault(tuple(sorted(real.items())), []).append(str(self.warehouse.read_path(relative)))
        frames = [target]
        for real, group in groups.items():
            frame = pl.scan_parquet(group, hive_partitioning=True, hive_schema=hive, missing_columns="insert")
            if real:
                frame = frame.with_columns(pl.lit(value).alias(column) for column, value in real)
            frames.append(frame)
        frame = pl.concat(frames, how="diagonal_relaxed")
        return frame.select(spec.arrow.names).cast(dict(target.collect_schema()), strict=False)

    def views(self) -> dict[str, str]:
        """Every analytics view's name and what it answers."""
        return {v.name: v.description for v in views.all_views().values()}

    def ingest(self, *paths: Path | str, model: str | None = None, tags: dict[str, str] | None = None,
               format: str | None = None) -> pipeline.IngestReport:
        """Ingest exports (files or folders); returns the report (runs, skipped, failed)."""
        return pipeline.ingest([Path(p) for p in paths], self.warehouse, format=format, model=model, tags=tags)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> KernelWarehouse:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_warehouse(path: Path | str = "warehouse", catalog: str | None = None) -> KernelWarehouse:
    return KernelWarehouse(path, catalog)
