"""The Python API, for notebooks and scripts: `kwarehouse.open(path)`.

    import kwarehouse
    kwh = kwarehouse.open("warehouse")
    kwh.ingest("runs/")
    kwh.sql("SELECT model, count(*) AS kernels FROM kernels GROUP BY 1").pl()   # or .df(), .arrow()
    kwh.table("kernels").filter(pl.col("model") == "llama").collect()           # polars LazyFrame
    kwh.views()                                                                 # {name: description}

The CLI and this API call the same library functions; queries see the committed runs of one
catalog snapshot, taken again when a later commit changed the warehouse.

Threads: each thread gets a DuckDB connection of its own (one connection refuses a second caller:
"connection is busy"). A commit makes a thread take a new connection on its next call; the old one
is never closed under anyone, so a relation taken before the commit still answers from its snapshot.
A warehouse that was moved or lost a committed file is an error in sql() and table() alike, never
an empty or short answer.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import duckdb
import polars as pl

from kwarehouse import schema, views
from kwarehouse.build.report import IngestReport
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import KwhError
from kwarehouse.store import bind, fast_read
from kwarehouse.store.bind import Snapshot
from kwarehouse.store.warehouse import Warehouse


def _say_warning(line: str) -> None:
    """The store's warnings (a lock waited for, committed files missing, a published file changed
    outside kwh) on stderr, as kwh prints them: a notebook shows them under the cell."""
    print(f"kwh: {line}", file=sys.stderr, flush=True)


class KernelWarehouse:
    """One warehouse: SQL over its tables and views, polars frames, and ingest."""

    def __init__(self, path: Path | str = "warehouse", catalog: str | None = None):
        self.warehouse = Warehouse(path, catalog, warn=_say_warning)
        self._lock = threading.Lock()
        # thread id -> (its connection, the catalog generation it shows); a thread that ended leaves
        # its entry for close() (a later thread with the same id takes it over)
        self._connections: dict[int, tuple[duckdb.DuckDBPyConnection, int]] = {}
        self._identity: str | None = fast_read.folder_id(self.warehouse.root)

    def _snapshot(self) -> Snapshot:
        """The catalog's snapshot, after making sure the warehouse is still where it was opened and
        every committed file is on disk (raises KwhError otherwise)."""
        root = self.warehouse.root
        found = fast_read.folder_id(root)
        if self._identity is None:
            self._identity = found       # a warehouse this object's first ingest created
        elif found != self._identity:
            where = "holds another warehouse now" if found else "no warehouse here any more (moved or deleted?)"
            raise KwhError(f"{root}: {where}; open it where it is now: kwarehouse.open(PATH)")
        snapshot = self.warehouse.snapshot()
        missing = self.warehouse.missing_files(snapshot)
        if missing:
            raise KwhError(f"{root}: {len(missing)} committed file(s) are missing (first: {missing[0]}), so answers "
                           "would lack their rows; kwh check names them, kwh check --repair takes their runs out")
        return snapshot

    def _connection(self) -> duckdb.DuckDBPyConnection:
        """This thread's DuckDB connection with every table and view; a new one after a commit changed
        the catalog (the old one is left to its relations, never closed under them)."""
        generation = self._snapshot().generation
        thread = threading.get_ident()
        with self._lock:
            current = self._connections.get(thread)
        if current is not None and current[1] == generation:
            return current[0]
        con = self.warehouse.connect()
        with self._lock:
            self._connections[thread] = (con, generation)
        return con

    def sql(self, query: str, params: list | None = None) -> duckdb.DuckDBPyRelation:
        """A DuckDB relation: .pl() (polars), .df() (pandas), .arrow(), .fetchall(), .show()."""
        return self._connection().sql(query, params=params)

    def table(self, name: str) -> pl.LazyFrame:
        """A base table as a polars LazyFrame over exactly the committed Parquet files (real model and
        GPU names included)."""
        if name not in schema.tables():
            raise KeyError(f"no table {name!r}; tables: {', '.join(schema.tables())}")
        spec = schema.tables()[name]
        snapshot = self._snapshot()
        hive = {c: pl.String for c in spec.partition_columns}
        target = pl.from_arrow(spec.arrow.empty_table()).lazy()
        frames = [target]
        for group in bind.table_files(self.warehouse.root, snapshot, name, existing=False):
            frame = pl.scan_parquet([str(p) for p in group.paths], hive_partitioning=True, hive_schema=hive,
                                    missing_columns="insert")
            if group.real:
                frame = frame.with_columns(pl.lit(value).alias(column) for column, value in group.real)
            frames.append(frame)
        frame = pl.concat(frames, how="diagonal_relaxed")
        return frame.select(spec.arrow.names).cast(dict(target.collect_schema()), strict=False)

    def views(self) -> dict[str, str]:
        """Every analytics view's name and what it answers."""
        return {v.name: v.description for v in views.all_views().values()}

    def ingest(self, *paths: Path | str, model: str | None = None, tags: dict[str, str] | None = None,
               format: str | None = None) -> IngestReport:
        """Ingest exports (files or folders); returns the report (runs, skipped, failed)."""
        # a Warehouse of its own: a writer's state (its staging folder) is not the readers' business
        writer = Warehouse(self.warehouse.root, self.warehouse.catalog_url, warn=_say_warning)
        report = ingest_job.ingest([Path(p) for p in paths], writer, format=format, model=model, tags=tags)
        if self._identity is None:
            self._identity = fast_read.folder_id(self.warehouse.root)
        return report

    def close(self) -> None:
        """Close every thread's connection (relations taken from them stop answering)."""
        with self._lock:
            connections, self._connections = self._connections, {}
        for con, _ in connections.values():
            con.close()

    def __enter__(self) -> KernelWarehouse:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_warehouse(path: Path | str = "warehouse", catalog: str | None = None) -> KernelWarehouse:
    return KernelWarehouse(path, catalog)
