"""Warehouses an older kwh wrote, upgraded in place by the next writer (Warehouse.writer()).

A table whose stored columns change gets a Migration here: the columns an older file lacks, and the
pure step that derives them from the file's own columns. Files carry the schema mark of the columns
they were written with (files.current_schema_mark), so the files to upgrade are found by name, without
opening one: a committed file of a migrated table without today's mark is read, upgraded and written
again, and all of a table's files swap in one catalog transaction (WriteSession.rewrite), so readers see
the old layout or the new one, never a mix; the old files are retired, never deleted while a published
view may name them. Until a writer has run (a read-only folder), readers say what they read as unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from kwarehouse import schema
from kwarehouse.errors import KwhError, first_line
from kwarehouse.normalize.launches import summary_dims
from kwarehouse.store.bind import Snapshot
from kwarehouse.store.files import current_schema_mark


@dataclass(frozen=True)
class Migration:
    table: str
    adds: tuple[str, ...]                          # columns an older kwh did not store
    derive: Callable[[pl.DataFrame], pl.DataFrame]  # a pure step adding them from the stored columns
    unknown_until_then: str                        # what a reader of an unmigrated file reads as NULL


MIGRATIONS = (
    Migration("kernel_summaries", ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"), summary_dims,
              "the grid and block of nsys-summary-only runs in kernel_time"),
)


def outdated(snapshot: Snapshot) -> dict[Migration, list[str]]:
    """Each migration whose table has committed files in an older layout, with those files."""
    out = {}
    for migration in MIGRATIONS:
        mark = f".{current_schema_mark(migration.table)}.parquet"
        paths = [p for p in snapshot.files.get(migration.table, []) if not p.endswith(mark)]
        if paths:
            out[migration] = paths
    return out


def upgrade(session) -> list[str]:
    """Upgrade every file an older kwh wrote (inside writer()); one line per table upgraded, or one
    saying why it could not be (the files then stay readable as they were)."""
    lines = []
    for migration, paths in outdated(session.warehouse.snapshot()).items():
        table = migration.table
        file_schema = schema.tables()[table].file_schema
        try:
            session.rewrite(table, paths, lambda chunk: _derived(chunk, migration, file_schema))
        except (OSError, pa.ArrowException, KwhError) as exc:
            lines.append(f"could not upgrade {len(paths)} {table} file(s) an older kwh wrote ({first_line(exc)}); "
                         f"{migration.unknown_until_then} read as unknown until they are: run kwh check --repair")
            continue
        lines.append(f"upgraded {len(paths)} {table} file(s) an older kwh wrote to this kwh's columns "
                     f"({', '.join(migration.adds)})")
    return lines


def reader_warning(snapshot: Snapshot) -> str | None:
    """What a reader of files no writer has upgraded yet reads as unknown, as one line (None when all
    are upgraded)."""
    old = outdated(snapshot)
    if not old:
        return None
    return (f"warning: {sum(map(len, old.values()))} file(s) were written by an older kwh "
            f"({', '.join(m.table for m in old)}): {'; '.join(m.unknown_until_then for m in old)} "
            "read as unknown until a writer upgrades them (any kwh ingest, or kwh check --repair)")


def _derived(chunk: pa.Table, migration: Migration, file_schema: pa.Schema) -> pa.Table:
    frame = migration.derive(pl.from_arrow(chunk))
    return frame.select(file_schema.names).to_arrow().cast(file_schema)
