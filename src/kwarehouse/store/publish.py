"""warehouse.duckdb: a DuckDB file whose views read exactly the committed Parquet files, for users'
own DuckDB sessions and for kwh's readers, which attach it read-only when it is current (fast_read.py,
open_published) and otherwise build their views in memory from the catalog.

The promises, and how they are kept:
- always openable and complete: it is built beside the old one, checked (every table and view is
  there) and renamed over it; a disk that fills up fails the build, never the published file;
- never stale for long: the catalog's generation (bumped by every commit) is recorded with it, and
  every writer, a no-op ingest included, rebuilds it when they differ; a retired file is deleted
  only after the published file stopped naming it;
- a WAL left beside it by someone's crashed DuckDB session belongs to the file being replaced: it
  is moved to _quarantine/ (never deleted), since DuckDB would replay it into the new file;
- verified, not trusted: the hash of every table's and view's definition is recorded with it, and
  layout.published_problem (the one test of "current") compares it, with the file's size and
  mtime, on every reader start and in kwh check. A file changed outside kwh (a user who ran
  `create or replace view kernels as select 1` in `duckdb warehouse/warehouse.duckdb`) is rebuilt
  by the next writer, by a reader when no writer is busy, or by kwh check --repair; a reader that
  cannot rebuild it answers from the catalog and says that DuckDB sessions reading the file get
  other answers;
- tables, views and macros users created in it are copied into the new file; kwh's own objects that a user
  changed or dropped are rebuilt, and the changed file is kept in _quarantine/ with a warning; when
  the old file cannot be opened (a session holds it, or it is damaged) it is moved to _quarantine/
  with a warning instead of being overwritten. The README says to open the file -readonly and
  suggests a database of their own (ATTACH) for such objects.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import duckdb
import sqlalchemy as sa

from kwarehouse import views
from kwarehouse.errors import KwhError, first_line
from kwarehouse.store import bind, catalog, fast_read, layout, materialize
from kwarehouse.store.catalog import catalog_info, write_intents
from kwarehouse.store.layout import CHANGED_OUTSIDE, PUBLISHED_KEY, QUARANTINE
from kwarehouse.store.materialize import PARTITIONS_KEY
from kwarehouse.store.template import (PUBLISHED_TABLE, STORAGE_VERSION, open_over, own_objects, tag_own_objects,
                                      views_template)


def _recorded(warehouse) -> dict:
    with warehouse.reader.connect() as con:
        text = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == PUBLISHED_KEY)).scalar()
    return layout.recorded_publish(text)


def problem(warehouse, thorough: bool = False) -> str | None:
    """Why warehouse.duckdb is not what kwh published for the catalog's generation (one line), or
    None when it is (layout.published_problem, looking inside the file; `thorough`: at every
    definition too, as kwh check does)."""
    if not warehouse.exists:
        return None
    recorded = _recorded(warehouse)
    with warehouse.reader.connect() as con:
        current = catalog.generation(con)
    return layout.published_problem(warehouse.root, recorded, current, look_inside=True, thorough=thorough)


def is_stale(warehouse) -> bool:
    """Whether warehouse.duckdb must be rebuilt: missing, older than the catalog, built for another
    folder or by another kwh, or changed outside kwh (see problem)."""
    return problem(warehouse) is not None


def open_published(warehouse, snapshot) -> tuple[duckdb.DuckDBPyConnection | None, str | None]:
    """(an in-memory connection that reads warehouse.duckdb's tables and views, None) when that file
    is exactly what kwh published for this snapshot; else (None, why not, or None where nothing is
    wrong with it but it cannot be attached). Opening a file binds none of its views, so a reader pays
    only for the views it queries, where creating ~30 nested views in memory binds every one
    (seconds). What the user creates goes to the in-memory database, never into the file."""
    recorded = _recorded(warehouse)
    found = layout.published_problem(warehouse.root, recorded, snapshot.generation)
    if found is not None:
        if found.startswith(CHANGED_OUTSIDE):      # name what changed, where the file can be opened
            found = layout.published_problem(warehouse.root, recorded, snapshot.generation, look_inside=True)
        return None, found
    return fast_read.attach_published(warehouse.root, recorded)


def publish_if_stale(warehouse) -> bool:
    if is_stale(warehouse):
        publish(warehouse)
        return True
    return False


def publish(warehouse, reuse_previous: bool = True) -> list[str]:
    """Rebuild warehouse.duckdb from one catalog snapshot and swap it in; returns warnings (also
    said through warehouse.warn). Raises KwhError when it cannot be built; the old file then stays.
    reuse_previous=False: never start from the old file (kwh check found a definition changed that
    its names, comments, size and mtime do not show)."""
    root = warehouse.root
    folder = warehouse.session_dir or warehouse.staging
    folder.mkdir(parents=True, exist_ok=True)
    fresh = folder / f"warehouse-{uuid.uuid4().hex[:8]}.duckdb"
    scratch = fresh.with_name(f"{fresh.stem}-partitions.duckdb")
    temporary = [f"{path.relative_to(root).as_posix()}{wal}" for path in (fresh, scratch) for wal in ("", ".wal")]
    engine = warehouse.engine
    with engine.begin() as con:    # a crash leaves only files the intents name
        con.execute(write_intents.insert(), [{"path": p, "kind": "file", "created_at": catalog.now()}
                                             for p in temporary])
    warnings: list[str] = []
    try:
        snapshot = warehouse.snapshot()
        try:
            views_only, partitions, objects, tags = _build(warehouse, fresh, scratch, snapshot, warnings, reuse_previous)
        except InUse as busy:
            # A live session has written to it: replacing the file (and moving its WAL) would take
            # its work away from it. Left as it is; stale, so the next writer tries again.
            warnings.append(f"{warehouse.duckdb_path.name} was not rebuilt and lacks the newest changes: a DuckDB "
                            f"session has it open and changed it ({busy}); close that session, then run any "
                            "writing command (or kwh check --repair)")
            return _warn(warehouse, warnings)
        _fsync(fresh)
        wal = Path(f"{warehouse.duckdb_path}.wal")
        if wal.exists():
            kept = quarantine(root, wal)
            warnings.append(f"moved a stale {wal.name} (left by a DuckDB session that did not close) to {kept}")
        os.replace(fresh, warehouse.duckdb_path)
        _fsync(root)
        with engine.begin() as con:
            con.execute(catalog_info.delete().where(catalog_info.c.key.in_((PUBLISHED_KEY, PARTITIONS_KEY))))
            con.execute(catalog_info.insert().values(key=PUBLISHED_KEY, value=json.dumps(
                {"generation": snapshot.generation, "stat": layout.file_stat(warehouse.duckdb_path), "root": str(root),
                 "definitions": layout.definitions(root), "duckdb": duckdb.__version__, "views_only": views_only,
                 "materialized": partitions is not None, "objects": objects, "tags": tags})))
            if partitions is not None:
                con.execute(catalog_info.insert().values(key=PARTITIONS_KEY, value=json.dumps(partitions)))
    except (duckdb.Error, OSError) as exc:
        detail = first_line(exc)
        raise KwhError(f"{warehouse.duckdb_path}: could not rebuild it ({detail}); the committed data is "
                       "safe and kwh's own commands still work: free space if the disk is full, then run "
                       "kwh check --repair") from None
    finally:
        for path in temporary:
            (root / path).unlink(missing_ok=True)
        with engine.begin() as con:
            con.execute(write_intents.delete().where(write_intents.c.path.in_(temporary)))
    return _warn(warehouse, warnings)


class InUse(Exception):
    """warehouse.duckdb is held by a live DuckDB session that changed it."""


def _warn(warehouse, warnings: list[str]) -> list[str]:
    for line in warnings:
        warehouse.warn(line)
    return warnings


def _previous(warehouse, recorded: dict) -> Path | None:
    """The published warehouse.duckdb where it can stand in for views_template: what kwh published
    (size, mtime, no WAL: its names and comments are compared once copied), with today's
    definitions, by this DuckDB, every view still a view or every materialized one a table (a file
    where some could not be computed is not reused)."""
    if (layout.published_problem(warehouse.root, recorded, None) is None
            and (recorded.get("views_only") or recorded.get("materialized"))
            and recorded.get("duckdb") == duckdb.__version__):
        return warehouse.duckdb_path
    return None


def _copy_of_previous(warehouse, fresh: Path, recorded: dict) -> duckdb.DuckDBPyConnection | None:
    """A connection to `fresh`, a copy of the previous published file (see _previous), when its
    tables and views are exactly those kwh published (compared in the copy: no second open of the
    file); else None and no `fresh`."""
    previous = _previous(warehouse, recorded)
    if previous is None:
        return None
    shutil.copyfile(previous, fresh)
    con = duckdb.connect(str(fresh), config={"storage_compatibility_version": STORAGE_VERSION})
    database = con.execute("SELECT current_database()").fetchall()[0][0]
    if not layout.changed_objects(recorded.get("tags"), layout.object_tags(con, database)):
        return con
    con.close()     # changed inside, though its size and mtime are kwh's: start from the template
    fresh.unlink()
    return None


def _build(warehouse, fresh: Path, scratch: Path, snapshot, warnings: list[str], reuse_previous: bool = True
           ) -> tuple[bool, dict[str, str] | None, dict[str, str], dict[str, str]]:
    """Write the new warehouse.duckdb at `fresh`; returns whether its views are all views (none
    materialized) and, where every materialized view is a table, the partition digests they were
    computed from (materialize.partition_digests): either lets the next publish start from it; then
    the hash of each of its tables' and views' definitions (layout.object_digests, which kwh check and
    writers compare) and their comments (layout.object_tags, which readers compare)."""
    # The previous published file, where it is kwh's own and current but for its data, is copied
    # instead of the template: its views are bound already, and the template, though made once per
    # machine (store/template.py), is a 4.7 MB file to hash before it is trusted.
    recorded = _recorded(warehouse)
    # the partitions its tables hold, where the previous file holds the materialized views (without
    # them, its tables cannot be brought up to date: start from the template)
    done = _materialized_partitions(warehouse) if recorded.get("materialized") else None
    if recorded.get("materialized") and done is None:
        reuse_previous = False
    con = _copy_of_previous(warehouse, fresh, recorded) if reuse_previous else None
    previous = con is not None      # exactly what kwh published for an older generation: nothing of a user's in it
    if not previous:
        con = open_over(fresh, warehouse.root, snapshot)
    try:
        if previous:
            # its views point at the older snapshot's files: the same swap as open_over's
            con.execute(f"DROP TABLE {PUBLISHED_TABLE}")
            for statement in bind.view_sql(warehouse.root, snapshot):
                con.execute(statement)
            views.fill_thresholds(con, warehouse.root)
        # beyond a small warehouse, the heavy views are computed here, at commit, not by every query
        # (views.MATERIALIZED); from a previous file holding them, for the changed partitions only
        partitions = None
        views_only = True
        if previous and done is not None:
            digests = materialize.partition_digests(warehouse.root, snapshot)
            try:
                materialize.refresh(con, warehouse.root, snapshot, digests, done, scratch)
            except materialize.Incomplete:
                # a changed partition's file cannot be read: compute every view whole, as a first
                # publish does, which leaves the failing ones as views (their queries say why)
                con.close()
                fresh.unlink(missing_ok=True)
                return _build(warehouse, fresh, scratch, snapshot, warnings, reuse_previous=False)
            partitions, views_only = digests, False
        elif _launch_rows(con) >= warehouse.settings.materialize_min_rows:
            digests = materialize.partition_digests(warehouse.root, snapshot)
            left = materialize.materialize_all(con)
            partitions = None if left else digests
            views_only = len(left) == len(views.MATERIALIZED)
        con.execute(f"CREATE TABLE {PUBLISHED_TABLE} AS SELECT ? AS generation, current_timestamp AS published_at",
                    [snapshot.generation])
        if not previous:
            _keep_user_objects(warehouse, con, warnings, recorded)
        # the template's and the previous file's macros carry their tags already (nothing here creates one)
        tag_own_objects(con, macros=not previous and views_template() is None)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    # open what was written, as a user would, before it replaces anything
    check = duckdb.connect(str(fresh), read_only=True)
    try:
        database = check.execute("SELECT current_database()").fetchall()[0][0]
        objects, tags = layout.inventory(check, database)
        missing = own_objects() - {key.split(" ", 1)[1] for key in objects}
        if missing:
            raise KwhError(f"{warehouse.duckdb_path}: the rebuilt file lacks {', '.join(sorted(missing))}; "
                           "the committed data is safe: free space if the disk is full, then run kwh check --repair")
        check.execute("SELECT count(*) FROM runs").fetchall()
    finally:
        check.close()
    return views_only, partitions, objects, tags


def _materialized_partitions(warehouse) -> dict[str, str] | None:
    """The partition digests recorded with the published file (materialize.PARTITIONS_KEY); None where
    none are (an older kwh's record: compute every partition)."""
    with warehouse.reader.connect() as con:
        text = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == PARTITIONS_KEY)).scalar()
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _launch_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Rows of kernel_launches and kernels (Parquet footers: no data is read); 0 where a file cannot be
    read (readers then get that file's own error from the views)."""
    try:
        return sum(con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] for table in ("kernel_launches", "kernels"))
    except duckdb.Error:
        return 0


def _keep_user_objects(warehouse, con: duckdb.DuckDBPyConnection, warnings: list[str], recorded: dict) -> None:
    """Copy tables, views and macros a user created in the old warehouse.duckdb into the new one, and set the
    old file aside when a user changed or dropped one of kwh's own (the new file has kwh's). Skipped
    when the old file is exactly what kwh wrote (nothing of a user's can be in it)."""
    old = warehouse.duckdb_path
    if not old.exists() or layout.published_problem(warehouse.root, recorded, None, look_inside=True) is None:
        return
    try:
        con.execute(f"ATTACH {layout.sql_string(str(old))} AS previous (READ_ONLY)")
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            raise InUse(first_line(exc, 160)) from None
        kept = quarantine(warehouse.root, old, copy=True)
        warnings.append(f"could not open the previous {old.name} to keep tables or views of yours in it "
                        f"({first_line(exc, 120)}); a copy is kept at {kept}")
        return
    try:
        ours = own_objects()
        if recorded.get("root") == str(warehouse.root):      # (a copied warehouse's record is its original's)
            found = layout.object_digests(con, "previous")
            changed = [c for c in layout.changed_objects(recorded.get("objects"), found)
                       if c.split()[1] in ours and not c.endswith(" added")]
            if changed:
                kept = quarantine(warehouse.root, old, copy=True)
                warnings.append(f"{old.name} had been {CHANGED_OUTSIDE} ({', '.join(changed)}); rebuilt with kwh's own "
                                f"definitions, the changed file is kept at {kept}; open it with duckdb -readonly, and "
                                "keep views of your own in a database of yours (see the README)")
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'previous' AND NOT internal").fetchall()
            if r[0] not in ours]
        user_views = [(n, sql) for n, sql in con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE database_name = 'previous' AND NOT internal").fetchall()
            if n not in ours]
        # a user's macros are created before their views, which may call them; DuckDB keeps no CREATE
        # text for a macro: each overload is a row of its parameters and body
        user_macros: dict[str, list[str]] = {}
        for name, parameters, body in con.execute(
                "SELECT function_name, parameters, macro_definition FROM duckdb_functions() "
                "WHERE database_name = 'previous' AND function_type = 'macro' AND NOT internal").fetchall():
            if name not in ours:
                user_macros.setdefault(name, []).append(f"({', '.join(parameters)}) AS {body}")
        for name in tables:
            con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM previous.main."{name}"')
        failed_macros = []
        for name, overloads in user_macros.items():
            try:
                con.execute(f'CREATE MACRO "{name}" {", ".join(overloads)}')
            except duckdb.Error:
                failed_macros.append(name)
        failed = []
        for name, sql in user_views:
            try:
                con.execute(sql)
            except duckdb.Error:
                failed.append(name)
        if tables or user_views or user_macros:
            macros = f", {len(user_macros) - len(failed_macros)} macro(s)" if user_macros else ""
            warnings.append(f"kept your own {len(tables)} table(s){macros} and {len(user_views) - len(failed)} "
                            f"view(s) in {old.name}" + (f"; could not recreate view(s) {', '.join(failed)}" if failed else "")
                            + (f"; could not recreate macro(s) {', '.join(failed_macros)}" if failed_macros else ""))
        failed += failed_macros
        if failed:
            kept = quarantine(warehouse.root, old, copy=True)
            warnings.append(f"the previous {old.name} is kept at {kept}")
    finally:
        con.execute("DETACH previous")


def quarantine(root: Path, path: Path, copy: bool = False) -> Path:
    """Move (or copy) `path` into <root>/_quarantine/ under a unique name; returns where it went."""
    folder = root / QUARANTINE
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{catalog.now().strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}-{path.name}"
    if copy:
        shutil.copy2(path, target)
    else:
        os.replace(path, target) if path.parent.stat().st_dev == folder.stat().st_dev else shutil.move(path, target)
    return target


def _fsync(path: Path) -> None:
    """Flush a file (or a folder's entries) to disk, so a power cut cannot publish an empty file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
