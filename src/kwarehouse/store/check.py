"""`kwh check`: is the warehouse whole? catalog <-> Parquet files <-> warehouse.duckdb, one line per
problem; `--repair` rebuilds what can be rebuilt and takes out what cannot, never deleting a file it
cannot prove kwh wrote.

What --repair does, problem by problem:
- an interrupted writer's leftovers (write intents): removed, as any writer does first;
- a committed Parquet file that is missing or unreadable: the runs with rows in it are taken out of
  the warehouse (their other files retired, a damaged file moved to _quarantine/), and their source
  files forgotten, so ingesting those sources again brings the runs back; the lines say which;
- a committed file missing from its table folder, or a different file there under its name, while
  its _files/ link holds the committed one: the link is put back in the folder (the different file
  moved to _quarantine/ first), since readers that glob the table folders (polars, pyarrow, DuckDB
  read_parquet, Spark) read the folders, not the catalog;
- a replaced (retired) file still in its table folder, which globbing readers count twice: taken
  out of the folder (its _files/ link keeps it for the grace period, as every writer does);
- warehouse.duckdb missing, stale, damaged or with a WAL beside it: rebuilt (publish.py);
- files in the table folders that the catalog does not know: reported, never touched (they may be
  yours; kwh only writes files it records first);
- a copy of the folder that writes a catalog outside it (folders.py): reported; its --repair is
  refused (it would take out the runs the other folder wrote); and where another folder of the
  catalog (a refused copy, a folder displaced by kwh attach --moved) may still exist, runs whose files
  are lost here are kept and reported unless --force.
"""

from __future__ import annotations

import filecmp
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import pyarrow.parquet as pq
import sqlalchemy as sa

from kwarehouse import schema
from kwarehouse.errors import first_line
from kwarehouse.store import folders, layout, publish
from kwarehouse.store.catalog import (catalog_files, catalog_parquet, catalog_parquet_runs, catalog_retired,
                                      catalog_rollup_files, catalog_runs, write_intents)
from kwarehouse.store.warehouse import Warehouse


@dataclass
class CheckReport:
    runs: int = 0
    files: int = 0
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # not problems: what kwh leaves alone

    @property
    def ok(self) -> bool:
        return not self.problems


def check(warehouse: Warehouse, repair: bool = False, quick: bool = False, force: bool = False,
          verify_rollups: Callable | None = None) -> CheckReport:
    """Check the warehouse (raises KwhError when its catalog is missing or another warehouse's).
    quick: read only each Parquet file's footer, not every page. force: with repair, take out runs
    whose files are lost here even while another folder of the same catalog (a copy, a displaced
    folder: folders.other_folders) may hold them; without it they are kept and reported.
    verify_rollups: recomputes a sample of rolled-up days (jobs.rollup.verify_sample, which kwh check
    passes: the rollups are a job's, above the store); None leaves the rollups unchecked."""
    if repair:
        report = CheckReport()
        retired_in_folders = _retired_in_folders(warehouse) if warehouse.exists else []
        with warehouse.writer() as session:     # its repair takes retired files out of their folders
            report.repaired.extend(session.repairs)
            report.repaired.extend(f"took the replaced {path} out of its table folder" for path in retired_in_folders
                                   if not (warehouse.root / path).exists())
            found = _inspect(warehouse, quick, verify_rollups)
            for path in found.misplaced:
                report.repaired.append(_relink(warehouse, path))
            damaged = found.damaged_runs
            others = _other_folders(warehouse) if damaged and not force else []
            if others:
                # taking them out here would make the other folder's files garbage for its next writer
                # (and leave them out of a kwh detach there)
                held_back = (f"kept run(s) {', '.join(sorted(damaged))} although files of theirs are missing or "
                             f"damaged here: another folder of this catalog may hold them "
                             f"({'; '.join(map(str, others))}); copy the files back from there, or run kwh detach "
                             "there first, or take the runs out with kwh check --repair --force")
                damaged = set()
            if damaged:
                sources = _sources_of(warehouse, damaged)
                for path in found.corrupt:
                    kept = publish.quarantine(warehouse.root, warehouse.read_path(path))
                    for other in (warehouse.root / path, warehouse.root / layout.FILES / path):
                        if other.is_file() and not other.is_symlink():   # its other name (same damaged data)
                            other.unlink()
                    report.repaired.append(f"moved the unreadable {path} to {kept.relative_to(warehouse.root)}")
                session.remove_runs(sorted(damaged))
                for run_id in sorted(damaged):
                    files = sources.get(run_id) or ["(no source files recorded)"]
                    report.repaired.append(f"took out run {run_id} (rows lost with a missing or damaged file); "
                                           f"ingest its sources again to restore it: {', '.join(files)}")
            problem = publish.problem(warehouse, thorough=True)
            if problem or not _duckdb_opens(warehouse):
                # a changed file is not started from: what changed may not show in names and comments
                publish.publish(warehouse, reuse_previous=not (problem or "").startswith(publish.CHANGED_OUTSIDE))
                report.repaired.append(f"rebuilt {warehouse.duckdb_path.name}")
        after = check(warehouse, quick=quick, verify_rollups=verify_rollups)
        after.repaired = report.repaired
        if others:
            after.problems.append(held_back)
        return after
    return _inspect(warehouse, quick, verify_rollups)


@dataclass
class _Found(CheckReport):
    """A check's report and what --repair needs to act on it."""
    damaged_runs: set[str] = field(default_factory=set)
    corrupt: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)    # committed, but its table folder lacks it or holds another file


def _inspect(warehouse: Warehouse, quick: bool = False, verify_rollups: Callable | None = None) -> _Found:
    found = _Found()
    root = warehouse.root
    if not warehouse.exists:
        found.problems.append(f"{root}: no warehouse here (no catalog); run kwh ingest first")
        return found
    with warehouse.reading() as con:
        run_ids = set(con.execute(sa.select(catalog_runs.c.run_id)).scalars())
        committed = dict(con.execute(sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name)).all())
        rollups = dict(con.execute(sa.select(catalog_rollup_files.c.path, catalog_rollup_files.c.table_name)).all())
        runs_of: dict[str, set[str]] = {}
        for path, run_id in con.execute(sa.select(catalog_parquet_runs.c.path, catalog_parquet_runs.c.run_id)):
            runs_of.setdefault(path, set()).add(run_id)
        retired = set(con.execute(sa.select(catalog_retired.c.path)).scalars())
        intents = list(con.execute(sa.select(write_intents.c.path, write_intents.c.kind)))
    found.runs, found.files = len(run_ids), len(committed) + len(rollups)
    copy = warehouse.copy_problem()
    if copy:     # first: it explains the lines below (files the other folder wrote are missing here)
        found.problems.append(copy)
    for path in sorted({**committed, **rollups}):
        target = warehouse.read_path(path)
        if not target.is_file():
            found.problems.append(f"{path}: committed but missing" + _runs_note(runs_of.get(path)))
        else:
            try:
                if quick:
                    pq.ParquetFile(target).metadata
                else:   # every page: a file can have a sound footer and damaged data
                    for _ in pq.ParquetFile(target).iter_batches(batch_size=65_536):
                        pass
                continue
            except Exception:   # noqa: BLE001 - any failure to read the file means a damaged file
                found.problems.append(f"{path}: committed but unreadable (damaged)" + _runs_note(runs_of.get(path)))
                found.corrupt.append(path)
        found.damaged_runs |= runs_of.get(path, set())
    for path in sorted({**committed, **rollups}):
        problem = _folder_problem(warehouse, path)
        if problem:
            found.problems.append(f"{path}: {problem}")
            found.misplaced.append(path)
    for path in _retired_in_folders(warehouse, retired):
        found.problems.append(f"{path}: replaced, but still in its table folder: readers that glob the table "
                              "folders count its rows twice; kwh check --repair takes it out")
    with_files = set().union(*runs_of.values()) if runs_of else set()
    for run_id in sorted(run_ids - with_files):
        found.problems.append(f"run {run_id}: in the catalog with no Parquet files")
        found.damaged_runs.add(run_id)
    stale_writers = [p for p, kind in intents]
    if stale_writers:
        found.problems.append(f"an interrupted writer left {len(stale_writers)} unfinished write(s); "
                              "the next writing command (or kwh check --repair) removes them")
    known = set(committed) | set(rollups) | retired | {p for p, _ in intents}
    unknown = []
    for name in schema.tables():
        folder = root / name
        if folder.is_dir() and not folder.is_symlink():
            unknown += [p.relative_to(root).as_posix() for p in folder.rglob("*")
                        if p.is_file() and p.relative_to(root).as_posix() not in known]
    if unknown:
        found.notes.append(f"{len(unknown)} file(s) in the table folders are not in the catalog and are left alone "
                           f"({', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}); kwh's views never read "
                           "them, but readers that glob the table folders do")
    staging = root / layout.STAGING
    if staging.is_dir():
        strays = [p for p in staging.iterdir() if f"{layout.STAGING}/{p.name}" not in known]
        if strays:
            found.notes.append(f"{len(strays)} entr(ies) in _staging/ were not written by this kwh (an older kwh's "
                               f"interrupted ingest?) and are left alone: remove them if no kwh is running")
    if found.problems:
        found.notes.append("the rollups were not checked: repair the problems above first")
    elif verify_rollups is not None:
        _check_rollups(warehouse, found, verify_rollups)
    published = publish.problem(warehouse, thorough=True)
    if published is not None and published.startswith(publish.CHANGED_OUTSIDE):
        found.problems.append(f"{warehouse.duckdb_path.name}: {published}: DuckDB sessions reading it get other "
                              "answers than kwh; kwh check --repair rebuilds it (your own tables and views are "
                              "kept); open it with duckdb -readonly")
    elif published is not None:
        found.problems.append(f"{warehouse.duckdb_path.name}: {published}; kwh check --repair rebuilds it")
    elif not _duckdb_opens(warehouse):
        found.problems.append(f"{warehouse.duckdb_path.name}: cannot be opened (damaged, or open in a DuckDB session)")
    return found


def _check_rollups(warehouse: Warehouse, found: _Found, verify_rollups: Callable) -> None:
    """Recompute a sample of rolled-up days and name each whose rollup rows differ; note the days whose
    runs changed since their rollup (not a problem: the next kwh rollup recomputes exactly those)."""
    try:
        sampled = verify_rollups(warehouse)
    except duckdb.Error as exc:
        found.problems.append(f"the rollups could not be recomputed to check them ({first_line(exc)}); "
                              "kwh rollup --full rebuilds them")
        return
    if sampled.changed_meanwhile:
        found.notes.append("the rollups were not checked: a writer committed while they were being recomputed")
    for name, day in sampled.wrong:
        found.problems.append(f"{name}/day={day}: its rows differ from what the runs of that day give now (rolled "
                              "up by an older kwh, or its file changed); kwh rollup --full fixes it")
    if sampled.pending:
        days = ", ".join(sampled.pending[:5]) + (", ..." if len(sampled.pending) > 5 else "")
        found.notes.append(f"{len(sampled.pending)} day(s) have runs added, replaced or taken out since their last "
                           f"rollup ({days}); kwh rollup updates them")


def _folder_problem(warehouse: Warehouse, path: str) -> str | None:
    """What is wrong with a committed file's table-folder copy, which globbing readers read, against
    its _files/ link, which kwh's views read; None when they agree (or there is no link to compare
    with: a file an older kwh wrote, a file system without hard links)."""
    link, tree = warehouse.root / layout.FILES / path, warehouse.root / path
    if not link.is_file() or link.is_symlink():
        return None
    if not tree.exists() and not tree.is_symlink():
        return (f"missing from its table folder (its {layout.FILES}/ link still holds it): readers that glob the "
                "table folders miss its rows; kwh check --repair puts it back")
    try:
        same = os.path.samefile(link, tree) or (tree.is_file() and filecmp.cmp(link, tree, shallow=False))
    except OSError:
        same = False
    if same:
        return None
    return (f"differs from the committed file (its {layout.FILES}/ link): readers that glob the table folders "
            "read other rows; kwh check --repair sets it aside and puts the committed file back")


def _relink(warehouse: Warehouse, path: str) -> str:
    """Put a committed file's _files/ link back in its table folder; a different file there is moved
    to _quarantine/ first (kwh cannot prove it wrote it). Returns the line for the report."""
    root = warehouse.root
    link, tree = root / layout.FILES / path, root / path
    if not tree.parent.resolve().is_relative_to(root.resolve()):
        return f"left {path} alone: its table folder leads out of the warehouse (a symlink)"
    kept = None
    if tree.exists() or tree.is_symlink():
        kept = publish.quarantine(root, tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(link, tree)
    except OSError:
        shutil.copy2(link, tree)      # no hard links across this file system: the views then read the copy
    if kept is not None:
        return f"put the committed {path} back in its table folder; the file that was there is kept at " \
               f"{kept.relative_to(root)}"
    return f"put the committed {path} back in its table folder"


def _retired_in_folders(warehouse: Warehouse, retired: set[str] | None = None) -> list[str]:
    """Replaced files still in their table folders (a writer died between its commit and taking
    them out); only where their _files/ link exists, which is what lets kwh take them out."""
    if retired is None:
        with warehouse.reader.connect() as con:
            retired = set(con.execute(sa.select(catalog_retired.c.path)).scalars())
    root = warehouse.root
    return sorted(p for p in retired if (root / p).is_file() and not (root / p).is_symlink()
                  and (root / layout.FILES / p).is_file())


def _other_folders(warehouse: Warehouse) -> list:
    if folders.catalog_in_folder(warehouse.catalog_url, warehouse.root):
        return []
    with warehouse.reading() as con:
        return folders.other_folders(con, warehouse.root)


def _runs_note(runs: set[str] | None) -> str:
    return f" (rows of run {', '.join(sorted(runs))})" if runs else ""


def _duckdb_opens(warehouse: Warehouse) -> bool:
    try:
        con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    except duckdb.Error:
        return False
    try:
        con.execute("SELECT count(*) FROM runs").fetchall()
        return True
    except duckdb.Error:
        return False
    finally:
        con.close()


def _sources_of(warehouse: Warehouse, run_ids: set[str]) -> dict[str, list[str]]:
    with warehouse.reader.connect() as con:
        out: dict[str, list[str]] = {}
        for run_id, path in con.execute(sa.select(catalog_files.c.run_id, catalog_files.c.path)
                                        .where(catalog_files.c.run_id.in_(sorted(run_ids)))):
            out.setdefault(run_id, []).append(path)
    return {run: sorted(set(paths)) for run, paths in out.items()}
