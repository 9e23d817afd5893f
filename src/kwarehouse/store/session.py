"""A writer's session: what `with warehouse.writer() as session:` yields, the only way to change the
warehouse. Warehouse.writer() takes the writer lock, repairs what a crashed writer left (repair.py),
opens a staging folder and, when the session ends, publishes warehouse.duckdb (also when the work
failed).

A run becomes visible in one step: its Parquet files are written under the session's staging folder
(files.Stager), their final paths are recorded as write intents (committed first), the files are
renamed into place (still invisible: views list only catalogued files) and then recorded in one
catalog transaction.

What kwh deletes, and only that: staging folders and files it recorded as write intents and did not
commit (left by a crash), and files it retired (replaced by a newer commit or a compaction) once no
published view names them and Settings.retire_grace has passed. Nothing else, in or outside the
warehouse.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from kwarehouse import schema
from kwarehouse.store import catalog, repair
from kwarehouse.store.catalog import (catalog_files, catalog_parquet, catalog_parquet_runs, catalog_retired,
                                      catalog_rollup_coverage, catalog_rollup_files, catalog_runs, write_intents)
from kwarehouse.store.files import StagedRun, Stager, detach, link
from kwarehouse.store.layout import FILES


@dataclass(frozen=True)
class IngestedFile:
    sha256: str
    path: str
    format: str
    size: int | None = None


class WriteSession:
    """The writes of one writer-lock holder (Warehouse.writer()). Reads go to the warehouse it
    writes: session.runs() is session.warehouse.runs()."""

    def __init__(self, warehouse, session_dir: Path):
        self.warehouse = warehouse
        self.root: Path = warehouse.root
        self.session_dir = session_dir
        self.settings = warehouse.settings
        self.stager = Stager(session_dir, warehouse.settings)
        self.repairs: list[str] = []      # what the session's start repaired, one line each

    def __getattr__(self, name: str):
        if name == "warehouse":      # (not set yet: copying, unpickling)
            raise AttributeError(name)
        return getattr(self.warehouse, name)

    def stage_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table]) -> StagedRun:
        return self.stager.stage_run(run_id, model, gpu, tables)

    def stage_runs(self, runs: list[tuple[str, str, str, dict[str, pa.Table]]]) -> list[StagedRun]:
        return self.stager.stage_runs(runs)

    def discard_staged(self, staged: StagedRun) -> None:
        self.stager.discard(staged)

    def commit_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table],
                   files: list[IngestedFile], supersedes: tuple[str, ...] = ()) -> None:
        """Replace run `run_id` by `tables` and record `files` as ingested, all or nothing."""
        self.commit_staged(self.stage_run(run_id, model, gpu, tables), files, supersedes)

    def commit_staged(self, staged: StagedRun, files: list[IngestedFile], supersedes: tuple[str, ...] = ()) -> None:
        """Make a staged run the committed rows of its run id and record `files`, all or nothing.
        supersedes: runs this one replaces (partial versions of the same export): they are removed
        in the same transaction."""
        self.commit_many([(staged, files)], supersedes)

    def commit_many(self, batch: list[tuple[StagedRun, list[IngestedFile]]], supersedes: tuple[str, ...] = ()) -> None:
        """commit_staged for several runs in one catalog transaction: a file shared by several of
        them (after kwh compact) is rewritten once, not once per run."""
        if not batch and not supersedes:
            return
        replaced = {staged.run_id for staged, _ in batch} | set(supersedes)
        moves: list[tuple[Path, Path, str, tuple[str, ...]]] = [   # staged, relative, table, runs
            (Path(staged.stage_dir) / relative, Path(relative), name, (staged.run_id,))
            for staged, _ in batch for relative, name in staged.files] + [
            (Path(staged.stage_dir) / relative, Path(relative), name, runs)
            for staged, _ in batch for relative, name, runs in staged.shared]
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        # Files these runs share with other runs (after kwh compact) are rewritten without their rows.
        retired: list[str] = []
        with self.warehouse.reading() as con:
            old_paths = list(con.execute(sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name).where(
                catalog_parquet.c.path.in_(sa.select(catalog_parquet_runs.c.path)
                                           .where(catalog_parquet_runs.c.run_id.in_(replaced))))))
            for path, name in old_paths:
                others = {r for r in con.execute(sa.select(catalog_parquet_runs.c.run_id).where(
                    catalog_parquet_runs.c.path == path)).scalars()} - replaced
                retired.append(path)
                # (kwh check --repair takes out every run of a lost file)
                if others and self.warehouse.read_path(path).is_file():
                    spec = schema.tables()[name]
                    dropped = pa.array(sorted(replaced), pa.string())
                    kept = (chunk.filter(pc.invert(pc.is_in(chunk["run_id"], value_set=dropped)))
                            for chunk in self.stager.chunks([self.warehouse.read_path(path)], spec.file_schema))
                    relative = Path(path).parent / f"compact-{txn}-{len(moves)}.parquet"
                    relative = self.stager.stage_chunks(stage, relative, name, kept)
                    moves.append((stage / relative, relative, name, tuple(sorted(others))))
        self._place(moves)
        now = catalog.now()
        with self.warehouse.engine.begin() as con:
            for staged, files in batch:
                run_id = staged.run_id
                existing = con.execute(sa.select(catalog_runs.c.created_at)
                                       .where(catalog_runs.c.run_id == run_id)).scalar()
                if existing is None:
                    con.execute(catalog_runs.insert().values(run_id=run_id, model=staged.model, gpu=staged.gpu,
                                                             created_at=now, updated_at=now))
                else:
                    con.execute(catalog_runs.update().where(catalog_runs.c.run_id == run_id)
                                .values(model=staged.model, gpu=staged.gpu, updated_at=now))
            catalog.record_commits(con, [staged.run_id for staged, _ in batch], txn)
            self._swap_files(con, retired, moves)
            gone = sorted(set(supersedes) - {staged.run_id for staged, _ in batch})
            if gone:
                con.execute(catalog_files.delete().where(catalog_files.c.run_id.in_(gone)))
                con.execute(catalog_runs.delete().where(catalog_runs.c.run_id.in_(gone)))
                catalog.forget_commits(con, gone)
            for staged, files in batch:
                for f in files:
                    con.execute(catalog_files.insert().values(sha256=f.sha256, path=f.path, format=f.format,
                                                              run_id=staged.run_id, ingested_at=now, size=f.size))
            catalog.bump_generation(con)
        detach(self.root, retired)
        for staged, _ in batch:
            self.discard_staged(staged)
        shutil.rmtree(stage, ignore_errors=True)

    def _place(self, moves) -> None:
        """Record the destinations as write intents (committed first), then rename the staged files
        into their table folders: a crash in between leaves only files the intents name."""
        if not moves:
            return
        with self.warehouse.engine.begin() as con:
            con.execute(write_intents.insert(), [{"path": path, "kind": "file", "created_at": catalog.now()}
                                                 for path in _intent_paths(moves)])
        for staged, relative, _, _ in moves:
            (self.root / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, self.root / relative)
            link(self.root, relative)


    @staticmethod
    def _swap_files(con, retired: list[str], moves) -> None:
        """In one catalog transaction: the old files leave the views, the new ones join them (retired
        on the catalog's clock, which the grace is measured on)."""
        if retired:
            con.execute(catalog_parquet_runs.delete().where(catalog_parquet_runs.c.path.in_(retired)))
            con.execute(catalog_parquet.delete().where(catalog_parquet.c.path.in_(retired)))
            retired_at = catalog.clock(con)
            con.execute(catalog_retired.insert(), [{"path": p, "retired_at": retired_at} for p in retired])
        for _, relative, name, runs in moves:
            con.execute(catalog_parquet.insert().values(path=relative.as_posix(), table_name=name, run_id=runs[0]))
            con.execute(catalog_parquet_runs.insert(), [{"path": relative.as_posix(), "run_id": r} for r in runs])
        if moves:
            con.execute(write_intents.delete().where(write_intents.c.path.in_(_intent_paths(moves))))

    def rewrite(self, name: str, paths: list[str], upgrade) -> None:
        """Write committed files of table `name` again with today's columns, each chunk of rows (a
        table with today's file columns, NULL where a file lacked one) passed through `upgrade`;
        the new files replace the old in one catalog transaction, each keeping its runs, and the old
        ones are retired like a compaction's (kwh check --repair takes out a run whose file is lost)."""
        if not paths:
            return
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        spec = schema.tables()[name]
        with self.warehouse.reading() as con:
            runs_of: dict[str, set[str]] = {}
            for path, run_id in con.execute(sa.select(catalog_parquet_runs.c.path, catalog_parquet_runs.c.run_id)
                                            .where(catalog_parquet_runs.c.path.in_(paths))):
                runs_of.setdefault(path, set()).add(run_id)
        moves = []
        for path in sorted(paths):
            rows = (upgrade(chunk) for chunk in self.stager.chunks([self.warehouse.read_path(path)], spec.file_schema))
            relative = Path(path).parent / f"{Path(path).name.split('.')[0]}-{txn}.parquet"
            relative = self.stager.stage_chunks(stage, relative, name, rows)
            moves.append((stage / relative, relative, name, tuple(sorted(runs_of.get(path, ())))))
        self._replace(sorted(paths), moves, stage)

    def compact(self) -> list[str]:
        """Merge the files of each (table, model, gpu) partition into one; rows are unchanged.

        The new file and the old files' retirement commit in one catalog
        transaction; the old files stay on disk for readers of the previous view until a later writer
        finds them retired for longer than Settings.retire_grace."""
        merged = []
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        with self.warehouse.reading() as con:
            listing = list(con.execute(sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name)))
            runs_of = {}
            for path, run_id in con.execute(sa.select(catalog_parquet_runs.c.path, catalog_parquet_runs.c.run_id)):
                runs_of.setdefault(path, set()).add(run_id)
        partitions: dict[tuple[str, str], list[str]] = {}
        for path, name in listing:
            partitions.setdefault((name, Path(path).parent.as_posix()), []).append(path)
        moves, retired = [], []
        for (name, folder), paths in sorted(partitions.items()):
            if len(paths) < 2:
                continue
            spec = schema.tables()[name]
            rows = self.stager.chunks([self.warehouse.read_path(p) for p in sorted(paths)], spec.file_schema)
            relative = self.stager.stage_chunks(stage, Path(folder) / f"compact-{txn}.parquet", name, rows)
            runs = tuple(sorted(set().union(*(runs_of.get(p, set()) for p in paths))))
            moves.append((stage / relative, relative, name, runs))
            retired.extend(paths)
            merged.append(f"{folder}: {len(paths)} files into 1")
        if not moves:
            return merged
        self._replace(retired, moves, stage)
        return merged

    def _replace(self, retired: list[str], moves, stage: Path) -> None:
        """Files whose rows are the same runs' (a compaction, an upgrade): the staged `moves` placed, then
        swapped for `retired` in one catalog transaction, and the retired ones taken out of their folders."""
        self._place(moves)
        with self.warehouse.engine.begin() as con:
            self._swap_files(con, retired, moves)
            catalog.bump_generation(con)
        detach(self.root, retired)
        shutil.rmtree(stage, ignore_errors=True)

    def commit_rollup(self, tables: dict[tuple[str, str], pa.Table], coverage: dict[str, tuple[str, int] | None],
                      drop_days: dict[str, list[str]] | None = None) -> None:
        """Replace the rollup files of the given (table, day)s and record which runs each day now
        covers, all or nothing.

        coverage: day -> (runs_hash, number of runs), None for a day no run has
        any more. drop_days: days whose rollup rows no longer exist, per table."""
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        moves = []
        for (name, day), table in sorted(tables.items()):
            relative = Path(name) / f"day={day}" / f"{txn}.parquet"
            relative = self.stager.stage(stage, relative, name, schema.conform(name, table))
            moves.append((stage / relative, relative, name, day))
        self._place(moves)
        replaced = [(name, day) for _, _, name, day in moves] + [
            (name, day) for name, days in (drop_days or {}).items() for day in days]
        retired: list[str] = []
        with self.warehouse.engine.begin() as con:
            now = catalog.clock(con)
            for name, day in replaced:
                condition = sa.and_(catalog_rollup_files.c.table_name == name, catalog_rollup_files.c.day == day)
                old = list(con.execute(sa.select(catalog_rollup_files.c.path).where(condition)).scalars())
                con.execute(catalog_rollup_files.delete().where(condition))
                if old:
                    con.execute(catalog_retired.insert(), [{"path": p, "retired_at": now} for p in old])
                    retired += old
            for _, relative, name, day in moves:
                con.execute(catalog_rollup_files.insert().values(path=relative.as_posix(), table_name=name, day=day))
            if moves:
                con.execute(write_intents.delete().where(write_intents.c.path.in_(_intent_paths(moves))))
            if coverage:
                con.execute(catalog_rollup_coverage.delete().where(catalog_rollup_coverage.c.day.in_(sorted(coverage))))
                covered = [{"day": day, "runs_hash": runs[0], "runs": runs[1]}
                           for day, runs in sorted(coverage.items()) if runs is not None]
                if covered:
                    con.execute(catalog_rollup_coverage.insert(), covered)
            catalog.bump_generation(con)
        detach(self.root, retired)
        shutil.rmtree(stage, ignore_errors=True)

    def remove_runs(self, run_ids: list[str]) -> None:
        """Take runs out of the warehouse in one transaction: their files are retired (files they
        share with other runs are rewritten without them) and their source files forgotten, so
        ingesting those again brings the runs back."""
        if run_ids:
            self.commit_many([], tuple(run_ids))

    def record_empty(self, captures: list[dict]) -> None:
        """Record captures with nothing to store (see catalog.record_empty)."""
        try:
            with self.warehouse.engine.begin() as con:
                catalog.record_empty(con, captures)
        except sa.exc.DatabaseError as exc:
            raise catalog.database_error(self.warehouse.catalog_name, exc) from None

    def repair(self) -> list[str]:
        """repair.repair: undo an interrupted writer's leftovers, delete expired retired files."""
        return repair.repair(self.warehouse)


def _intent_paths(moves) -> list[str]:
    """The write intents of files being placed: each table-folder path and its _files/ link."""
    return [path for _, relative, _, _ in moves for path in (relative.as_posix(), f"{FILES}/{relative.as_posix()}")]
