"""What a copy of a warehouse folder does once kwh refused it (store/folders.py says how a copy is told
apart): `kwh detach` gives it a catalog of its own, `kwh attach --moved` makes it the warehouse.

detach copies the shared catalog's rows into a new catalog (catalog.sqlite beside the folder, or an
empty database named by URL) for the runs whose Parquet files this folder has, under a new warehouse
id: the folder is then a warehouse of its own and the shared catalog forgets it. A run with any file
missing here is left out (ingesting its sources again brings it back); a file of a run left out
stays on disk, unknown to the new catalog (kwh check notes it, nothing deletes it). The daily
rollups are kept only when every run is; otherwise kwh rollup --full rebuilds them.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

import sqlalchemy as sa

from kwarehouse.store import catalog, folders
from kwarehouse.store.catalog import (catalog_files, catalog_folders, catalog_info, catalog_parquet, catalog_parquet_runs,
                                catalog_retired, catalog_rollup_files, catalog_runs, write_intents)
from kwarehouse.errors import KwhError
from kwarehouse.store.warehouse import Warehouse

# catalog_info keys that describe the shared catalog, not the copy (the published file is this folder's own)
_NOT_COPIED_INFO = {"warehouse_id", "version", "published"}


@dataclass
class Detached:
    catalog: str                                               # the new catalog, as messages name it
    runs: int = 0
    left_out: dict[str, str] = field(default_factory=dict)     # run id -> its first missing file
    unknown_files: int = 0                                     # files of runs left out, now unknown
    rollups_dropped: bool = False


def detach(warehouse: Warehouse, new_catalog: str | None = None) -> Detached:
    """Give this folder a catalog of its own: catalog.sqlite beside it, or the empty database at
    new_catalog. Takes the folder's writer lock."""
    root = warehouse.root
    if folders.catalog_in_folder(warehouse.catalog_url, root):
        raise KwhError(f"{root}: its catalog {warehouse.catalog_name} is in the folder already, so this folder is a "
                       "warehouse of its own; pass the shared catalog (--catalog or KWH_CATALOG) to detach from it")
    target_url = catalog.engine_url(new_catalog) if new_catalog else None
    if target_url and folders.catalog_in_folder(target_url, root) and target_url != f"sqlite:///{root / 'catalog.sqlite'}":
        raise KwhError(f"{new_catalog}: name an empty database, or leave --new-catalog out for catalog.sqlite in {root}")
    with warehouse.writer_lock():      # no writer of this folder runs meanwhile
        with warehouse.reader.connect() as con:
            tables = {t.name: [dict(r._mapping) for r in con.execute(sa.select(t))]
                      for t in catalog.tables() if sa.inspect(con).has_table(t.name)}
        runs_of: dict[str, set[str]] = {}
        for row in tables[catalog_parquet_runs.name]:
            runs_of.setdefault(row["path"], set()).add(row["run_id"])
        present = {path: warehouse.read_path(path).is_file() for path in
                   {r["path"] for r in tables[catalog_parquet.name]} | set(runs_of)}
        kept_runs = {r["run_id"] for r in tables[catalog_runs.name]}
        left_out: dict[str, str] = {}
        while True:   # a run needs all its files; a file (compacted: several runs) needs all its runs
            lost = {run: path for path, ok in present.items() if not ok for run in runs_of.get(path, ())
                    if run in kept_runs}
            lost |= {run: path for path, runs in runs_of.items() if runs - kept_runs
                     for run in runs & kept_runs}
            if not lost:
                break
            for run, path in lost.items():
                left_out.setdefault(run, path)
            kept_runs -= set(lost)
        kept_files = {p for p, runs in runs_of.items() if runs <= kept_runs and present.get(p)}
        rollups_ok = not left_out and all(warehouse.read_path(r["path"]).is_file()
                                          for r in tables.get(catalog_rollup_files.name, []))
        done = Detached(catalog=catalog.describe(target_url, root), runs=len(kept_runs), left_out=left_out,
                        unknown_files=sum(1 for p, ok in present.items() if ok and p not in kept_files),
                        rollups_dropped=not rollups_ok and bool(tables.get(catalog_rollup_files.name)))
        keep = {
            catalog_runs.name: lambda r: r["run_id"] in kept_runs,
            catalog_files.name: lambda r: r["run_id"] in kept_runs,
            catalog_parquet.name: lambda r: r["path"] in kept_files,
            catalog_parquet_runs.name: lambda r: r["path"] in kept_files,
            catalog_retired.name: lambda r: warehouse.read_path(r["path"]).is_file(),  # its next writer deletes them
            catalog_folders.name: lambda r: False,
            write_intents.name: lambda r: False,
            catalog_info.name: lambda r: r["key"] not in _NOT_COPIED_INFO,
        }
        warehouse_id = uuid.uuid4().hex
        partial = root / f".catalog.sqlite.{uuid.uuid4().hex[:8]}" if target_url is None else None
        engine = sa.create_engine(target_url or f"sqlite:///{partial}")
        try:
            has_tables, other_id, run_count = catalog.catalog_state(engine)
            if has_tables and (other_id or run_count):
                raise KwhError(f"{done.catalog}: not an empty database (it holds warehouse {other_id}); name an "
                               "empty one for --new-catalog")
            if target_url is None and (root / "catalog.sqlite").exists():
                raise KwhError(f"{root / 'catalog.sqlite'}: exists already; move it aside (kwh keeps what it does not "
                               "know) and run kwh detach again")
            catalog.create_or_upgrade(engine, root)
            with engine.begin() as con:
                for table in catalog.tables():
                    rule = keep.get(table.name)
                    if rule is None and table.name.startswith("rollup_"):
                        rule = (lambda r: True) if rollups_ok else (lambda r: False)
                    chosen = [r for r in tables.get(table.name, []) if (rule or (lambda r: True))(r)]
                    if chosen:
                        con.execute(table.insert(), chosen)
                catalog.set_warehouse_id(con, warehouse_id)
                catalog.bump_generation(con)         # the published file names the shared catalog's files
        except BaseException:
            engine.dispose()
            if partial is not None:
                partial.unlink(missing_ok=True)
            raise
        engine.dispose()
        if partial is not None:
            os.replace(partial, root / "catalog.sqlite")
        # the folder follows its new catalog last: until here the folder still opens with the shared one
        with warehouse.reader.begin() as con:
            folders.forget_folder(con, root)
        catalog.write_folder_id(root, warehouse_id)
        (root / folders.SEAL_FILE).unlink(missing_ok=True)
    Warehouse(root, new_catalog).refresh_duckdb()
    return done


def attach_moved(warehouse: Warehouse) -> folders.Folder | None:
    """This folder is the warehouse (moved, or the original beside a stale copy): it writes the
    catalog from now on; the folder that did is returned (recorded as displaced), or None."""
    if folders.catalog_in_folder(warehouse.catalog_url, warehouse.root):
        raise KwhError(f"{warehouse.root}: its catalog {warehouse.catalog_name} is in the folder, which is a warehouse "
                       "of its own: there is nothing to attach")
    with warehouse.writer_lock():
        return folders.attach_moved(warehouse.engine, warehouse.root)
