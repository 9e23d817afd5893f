"""The warehouse on disk: hive-partitioned Parquet, a catalog, and warehouse.duckdb.

Layout (root defaults to ./warehouse):
    <table>/model=<m>/gpu=<g>/<run_id>-<txn>.parquet   one file per run and table
    catalog.sqlite                                    runs, ingested files, committed Parquet files
    warehouse.duckdb                                  views over exactly the committed files
    _staging/                                         files being written; never read

A run becomes visible in one step: its Parquet files are written under _staging, renamed into place
(still invisible: views list only catalogued files) and then recorded in one catalog transaction.
warehouse.duckdb is rebuilt beside the old one and renamed over it. Leftovers of a crash (staging
files, Parquet files the catalog does not list) are removed by the next writer, which says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote, unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from kwarehouse import normalize, schema, views
from kwarehouse.errors import KwhError

CATALOG_VERSION = 2   # 2: parquet_runs, retired_files, rollup_files, rollup_state
# The long metrics table is written sorted by metric name, in small row groups, so that a filter on
# the name skips most of every file by its row-group statistics: a query for a few of the ~830
# metrics per launch (queries/metric_lookup.sql) reads a few percent of the table, not all of it.
CLUSTER_ORDER = {"metrics": ("metric", "run_id", "launch_id")}
CLUSTERED_ROW_GROUP_ROWS = 16_384
# kwh compact streams each partition through chunks of at most this many rows (sorted per chunk for
# clustered tables), so its memory does not grow with the partition.
COMPACT_CHUNK_ROWS = 1_000_000
_meta = sa.MetaData()
catalog_info = sa.Table("catalog_info", _meta, sa.Column("key", sa.String, primary_key=True),
                        sa.Column("value", sa.String, nullable=False))
catalog_runs = sa.Table(
    "runs", _meta,
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("model", sa.String, nullable=False),
    sa.Column("gpu", sa.String, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
    sa.Column("updated_at", sa.DateTime, nullable=False),
)
catalog_files = sa.Table(
    "ingested_files", _meta,
    sa.Column("sha256", sa.String, primary_key=True),
    sa.Column("path", sa.String, nullable=False),
    sa.Column("format", sa.String, nullable=False),
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.run_id"), nullable=False),
    sa.Column("ingested_at", sa.DateTime, nullable=False),
)
catalog_parquet = sa.Table(
    "parquet_files", _meta,
    sa.Column("path", sa.String, primary_key=True),           # relative to the warehouse root
    sa.Column("table_name", sa.String, nullable=False),
    sa.Column("run_id", sa.String, sa.ForeignKey("runs.run_id"), nullable=False, index=True),
)


# Which runs a Parquet file holds rows of: one for a file a run wrote, several after kwh compact.
catalog_parquet_runs = sa.Table(
    "parquet_runs", _meta,
    sa.Column("path", sa.String, primary_key=True),
    sa.Column("run_id", sa.String, primary_key=True, index=True),
)
# Files replaced (by a newer commit or a compaction) that readers holding an older view may still
# read: deleted by a later writer once RETIRE_GRACE has passed.
catalog_retired = sa.Table(
    "retired_files", _meta,
    sa.Column("path", sa.String, primary_key=True),
    sa.Column("retired_at", sa.DateTime, nullable=False),
)
catalog_rollup_files = sa.Table(
    "rollup_files", _meta,
    sa.Column("path", sa.String, primary_key=True),
    sa.Column("table_name", sa.String, nullable=False),
    sa.Column("day", sa.String, nullable=False),
)
catalog_rollup_state = sa.Table(
    "rollup_state", _meta,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("value", sa.String, nullable=False),
)
RETIRE_GRACE = timedelta(minutes=10)


@dataclass(frozen=True)
class StagedRun:
    """One run's Parquet files written under staging/<txn>/, waiting for Warehouse.commit_staged."""
    run_id: str
    model: str
    gpu: str
    txn: str
    files: tuple[tuple[str, str], ...]   # (path relative to the root, table)


@dataclass(frozen=True)
class IngestedFile:
    sha256: str
    path: str
    format: str


def partition_value(value: str) -> str:
    """A hive directory value: percent-encoded so no name can add a path level or escape the root.

    >>> partition_value("NVIDIA H100 80GB HBM3")
    'NVIDIA H100 80GB HBM3'
    >>> partition_value("../a/b'c")
    '%2E.%2Fa%2Fb%27c'
    """
    encoded = quote(value, safe=" -_.()+,@")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    return encoded or "__HIVE_DEFAULT_PARTITION__"


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def catalog_engine_url(url: str) -> str:
    """postgresql://... uses the psycopg (3) driver unless the URL names one."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


class Warehouse:
    def __init__(self, root: Path | str, catalog: str | None = None):
        """root: the warehouse folder. catalog: an SQLAlchemy URL for the catalog (e.g.
        postgresql://host/db for a team sharing one warehouse); default: catalog.sqlite in root."""
        self.root = Path(root).absolute()
        self.staging = self.root / "_staging"
        self.duckdb_path = self.root / "warehouse.duckdb"
        self.catalog_url = catalog_engine_url(catalog) if catalog else None
        self._engine: sa.Engine | None = None

    # -- catalog ---------------------------------------------------------------------------------
    @property
    def rules_dir(self) -> Path:
        """The warehouse's own classification rules (library_rules.csv, op_class_rules.csv), tried before the built-in ones.
        Not rules/: that folder holds the ncu rule results table."""
        return self.root / "normalize"

    @property
    def exists(self) -> bool:
        if self.catalog_url is None:
            return (self.root / "catalog.sqlite").exists()
        if not self.root.exists():
            return False
        try:
            return sa.inspect(self.engine).has_table("catalog_info")
        except sa.exc.OperationalError as exc:
            raise KwhError(f"cannot reach the catalog {self.catalog_url}: {str(exc.orig).splitlines()[0]}") from None

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self.root.mkdir(parents=True, exist_ok=True)
            if self.catalog_url:
                engine = sa.create_engine(self.catalog_url, pool_pre_ping=True)
            else:
                # a busy catalog (another writer's transaction) is waited for, not failed on
                engine = sa.create_engine(f"sqlite:///{self.root / 'catalog.sqlite'}", connect_args={"timeout": 120})
            # Two processes may open a new warehouse at once: create and upgrade the catalog under a
            # lock of its own (not the writer lock, which the same process may hold later).
            with open(self.root / ".kwh.catalog.lock", "a+") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    self._create_catalog(engine)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
            self._engine = engine
        return self._engine

    def _create_catalog(self, engine: sa.Engine) -> None:
        """Create the catalog tables, or upgrade an older catalog (versioned migrations)."""
        _meta.create_all(engine)
        with engine.begin() as con:
            version = con.execute(sa.select(catalog_info.c.value)
                                  .where(catalog_info.c.key == "version")).scalar()
            if version is None:
                con.execute(catalog_info.insert().values(key="version", value=str(CATALOG_VERSION)))
            elif int(version) > CATALOG_VERSION:
                raise KwhError(f"{self.root}: catalog version {version} is newer than this kwh "
                               f"understands ({CATALOG_VERSION}); upgrade kwarehouse")
            elif int(version) < 2:
                # version 1 kept one run per file in parquet_files.run_id
                con.execute(catalog_parquet_runs.insert().from_select(
                    ["path", "run_id"], sa.select(catalog_parquet.c.path, catalog_parquet.c.run_id)))
                con.execute(catalog_info.update().where(catalog_info.c.key == "version")
                            .values(value=str(CATALOG_VERSION)))

    def ingested_run(self, sha256: str) -> str | None:
        """The run a file with this content went into, or None."""
        with self.engine.connect() as con:
            return con.execute(sa.select(catalog_files.c.run_id)
                               .where(catalog_files.c.sha256 == sha256)).scalar()

    def ingested_files(self) -> dict[str, str]:
        """sha256 -> run id of every file ingested so far."""
        with self.engine.connect() as con:
            return dict(con.execute(sa.select(catalog_files.c.sha256, catalog_files.c.run_id)).all())

    def committed_files(self, table: str, run_id: str | None = None) -> list[Path]:
        if table in schema.ROLLUP_TABLES:
            query = (sa.select(catalog_rollup_files.c.path).where(catalog_rollup_files.c.table_name == table)
                     .order_by(catalog_rollup_files.c.path))
        else:
            query = sa.select(catalog_parquet.c.path).where(catalog_parquet.c.table_name == table)
            if run_id is not None:
                query = query.where(catalog_parquet.c.path.in_(
                    sa.select(catalog_parquet_runs.c.path).where(catalog_parquet_runs.c.run_id == run_id)))
            query = query.order_by(catalog_parquet.c.path)
        with self.engine.connect() as con:
            return [self.root / p for p in con.execute(query).scalars()]

    # -- writing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self):
        """Hold the warehouse's write lock: one writer at a time; repair leftovers first.

        Yields the list of repairs made (one line each) so the caller can report them."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".kwh.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                repairs = self.repair()
                yield repairs
                self.refresh_duckdb()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read_run(self, run_id: str) -> dict[str, pa.Table]:
        """The committed rows of one run, per table, partition columns included."""
        out = {}
        for name, spec in schema.tables().items():
            if name in schema.ROLLUP_TABLES:
                continue
            files = self.committed_files(name, run_id)
            if files:
                # a compacted file holds the rows of several runs: read only this run's
                out[name] = pa.concat_tables(
                    [_with_columns_of(_with_partitions(pq.read_table(f, filters=[("run_id", "=", run_id)]),
                                                       f.relative_to(self.root)), spec.arrow)
                     for f in files])
        return out

    def runs(self) -> list[tuple[str, str, str]]:
        """(run_id, model, gpu) of every committed run, oldest first."""
        with self.engine.connect() as con:
            return [tuple(row) for row in con.execute(
                sa.select(catalog_runs.c.run_id, catalog_runs.c.model, catalog_runs.c.gpu)
                .order_by(catalog_runs.c.created_at, catalog_runs.c.run_id))]

    def commit_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table],
                   files: list[IngestedFile]) -> None:
        """Replace run `run_id` by `tables` and record `files` as ingested, all or nothing.

        Call inside writer()."""
        self.commit_staged(self.stage_run(run_id, model, gpu, tables), files)

    def stage_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table]) -> StagedRun:
        """Write one run's Parquet files into the staging area, where no reader sees them.

        Safe outside writer() only while this process's ingest holds the writer lock (a new writer
        clears the staging area): ingest fan-out workers stage, the driver commits."""
        txn = uuid.uuid4().hex[:12]
        stage = self.staging / txn
        staged = []
        for name, table in tables.items():
            table = schema.conform(name, table)
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"{run_id}-{txn}.parquet")
            relative = self._stage(stage, relative, name, table)
            staged.append((relative.as_posix(), name))
        return StagedRun(run_id, model, gpu, txn, tuple(staged))

    def discard_staged(self, staged: StagedRun) -> None:
        shutil.rmtree(self.staging / staged.txn, ignore_errors=True)

    def commit_staged(self, staged: StagedRun, files: list[IngestedFile]) -> None:
        """Make a staged run the committed rows of its run id and record `files`, all or nothing.

        Call inside writer()."""
        run_id, model, gpu, txn = staged.run_id, staged.model, staged.gpu, staged.txn
        stage = self.staging / txn
        moves: list[tuple[Path, Path, str, tuple[str, ...]]] = [   # staged, relative, table, runs
            (stage / relative, Path(relative), name, (run_id,)) for relative, name in staged.files]
        # Files this run shares with other runs (after kwh compact) are rewritten without its rows.
        retired: list[str] = []
        with self.engine.connect() as con:
            old_paths = list(con.execute(sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name).where(
                catalog_parquet.c.path.in_(sa.select(catalog_parquet_runs.c.path)
                                           .where(catalog_parquet_runs.c.run_id == run_id)))))
            for path, name in old_paths:
                others = [r for r in con.execute(sa.select(catalog_parquet_runs.c.run_id).where(
                    catalog_parquet_runs.c.path == path)).scalars() if r != run_id]
                retired.append(path)
                if others:
                    spec = schema.tables()[name]
                    kept = (chunk.filter(pc.not_equal(chunk["run_id"], run_id))
                            for chunk in _chunks([self.root / path], spec.file_schema))
                    relative = Path(path).parent / f"compact-{txn}-{len(moves)}.parquet"
                    relative = self._stage_chunks(stage, relative, name, kept)
                    moves.append((stage / relative, relative, name, tuple(sorted(others))))
        for source, relative, _, _ in moves:
            (self.root / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, self.root / relative)
        now = datetime.now(UTC).replace(tzinfo=None)
        with self.engine.begin() as con:
            existing = con.execute(sa.select(catalog_runs.c.created_at)
                                   .where(catalog_runs.c.run_id == run_id)).scalar()
            if existing is None:
                con.execute(catalog_runs.insert().values(run_id=run_id, model=model, gpu=gpu,
                                                         created_at=now, updated_at=now))
            else:
                con.execute(catalog_runs.update().where(catalog_runs.c.run_id == run_id)
                            .values(model=model, gpu=gpu, updated_at=now))
            self._swap_files(con, retired, moves, now)
            for f in files:
                con.execute(catalog_files.insert().values(sha256=f.sha256, path=f.path, format=f.format,
                                                          run_id=run_id, ingested_at=now))
        shutil.rmtree(stage, ignore_errors=True)

    def _stage(self, stage: Path, relative: Path, name: str, table: pa.Table) -> Path:
        """Write `table` under `stage`; returns the file's path relative to the root, which is
        `relative` with the schema mark (see current_schema_mark) when its columns are today's."""
        spec = schema.tables()[name]
        table = table.select(spec.file_schema.names)
        if _same_columns(table.schema, spec.file_schema):
            relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        _write_parquet(stage / relative, name, [table], table.schema)
        return relative

    def _stage_chunks(self, stage: Path, relative: Path, name: str, chunks) -> Path:
        """Like _stage, for a stream of tables that already have the table's file columns."""
        relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        _write_parquet(stage / relative, name, chunks, schema.tables()[name].file_schema)
        return relative

    @staticmethod
    def _swap_files(con, retired: list[str], moves, now: datetime) -> None:
        """In one catalog transaction: the old files leave the views, the new ones join them."""
        if retired:
            con.execute(catalog_parquet_runs.delete().where(catalog_parquet_runs.c.path.in_(retired)))
            con.execute(catalog_parquet.delete().where(catalog_parquet.c.path.in_(retired)))
            con.execute(catalog_retired.insert(), [{"path": p, "retired_at": now} for p in retired])
        for _, relative, name, runs in moves:
            con.execute(catalog_parquet.insert().values(path=relative.as_posix(), table_name=name, run_id=runs[0]))
            con.execute(catalog_parquet_runs.insert(), [{"path": relative.as_posix(), "run_id": r} for r in runs])

    def compact(self) -> list[str]:
        """Merge the files of each (table, model, gpu) partition into one; rows are unchanged.

        Call inside writer(). The new file and the old files' retirement commit in one catalog
        transaction; the old files stay on disk for readers of the previous view until a later writer
        finds them retired for longer than RETIRE_GRACE."""
        merged = []
        txn = uuid.uuid4().hex[:12]
        stage = self.staging / txn
        with self.engine.connect() as con:
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
            relative = self._stage_chunks(stage, Path(folder) / f"compact-{txn}.parquet", name,
                                          _chunks([self.root / p for p in sorted(paths)], spec.file_schema))
            runs = tuple(sorted(set().union(*(runs_of.get(p, set()) for p in paths))))
            moves.append((stage / relative, relative, name, runs))
            retired.extend(paths)
            merged.append(f"{folder}: {len(paths)} files into 1")
        if not moves:
            return merged
        for staged, relative, _, _ in moves:
            os.replace(staged, self.root / relative)
        with self.engine.begin() as con:
            self._swap_files(con, retired, moves, datetime.now(UTC).replace(tzinfo=None))
        shutil.rmtree(stage, ignore_errors=True)
        return merged

    def commit_rollup(self, tables: dict[tuple[str, str], pa.Table], state: dict[str, str],
                      drop_days: dict[str, list[str]] | None = None) -> None:
        """Replace the rollup files of the given (table, day)s and record `state`, all or nothing.

        Call inside writer(). drop_days: days whose rollup rows no longer exist, per table."""
        txn = uuid.uuid4().hex[:12]
        stage = self.staging / txn
        moves = []
        for (name, day), table in sorted(tables.items()):
            relative = Path(name) / f"day={day}" / f"{txn}.parquet"
            relative = self._stage(stage, relative, name, schema.conform(name, table))
            moves.append((relative, name, day))
        for relative, _, _ in moves:
            (self.root / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(stage / relative, self.root / relative)
        now = datetime.now(UTC).replace(tzinfo=None)
        replaced = [(name, day) for _, name, day in moves] + [
            (name, day) for name, days in (drop_days or {}).items() for day in days]
        with self.engine.begin() as con:
            for name, day in replaced:
                condition = sa.and_(catalog_rollup_files.c.table_name == name, catalog_rollup_files.c.day == day)
                old = list(con.execute(sa.select(catalog_rollup_files.c.path).where(condition)).scalars())
                con.execute(catalog_rollup_files.delete().where(condition))
                if old:
                    con.execute(catalog_retired.insert(), [{"path": p, "retired_at": now} for p in old])
            for relative, name, day in moves:
                con.execute(catalog_rollup_files.insert().values(path=relative.as_posix(), table_name=name, day=day))
            for key, value in state.items():
                con.execute(catalog_rollup_state.delete().where(catalog_rollup_state.c.name == key))
                con.execute(catalog_rollup_state.insert().values(name=key, value=value))
        shutil.rmtree(stage, ignore_errors=True)

    def rollup_state(self) -> dict[str, str]:
        with self.engine.connect() as con:
            return dict(con.execute(sa.select(catalog_rollup_state.c.name, catalog_rollup_state.c.value)).all())

    def rollup_days(self) -> dict[str, list[str]]:
        with self.engine.connect() as con:
            out: dict[str, list[str]] = {}
            for name, day in con.execute(sa.select(catalog_rollup_files.c.table_name, catalog_rollup_files.c.day)):
                out.setdefault(name, []).append(day)
            return out

    def run_updates(self) -> list[tuple[str, datetime]]:
        """(run_id, updated_at) of every run: what kwh rollup compares with its watermark."""
        with self.engine.connect() as con:
            return list(con.execute(sa.select(catalog_runs.c.run_id, catalog_runs.c.updated_at)).all())

    def has_leftovers(self) -> bool:
        """Whether an interrupted writer left staged files (repair() removes them)."""
        return self.staging.exists() and any(p.is_file() for p in self.staging.rglob("*"))

    def repair(self) -> list[str]:
        """Remove what an interrupted writer left (staging files, Parquet files the catalog does not
        list) and retired files older than RETIRE_GRACE."""
        repairs = []
        if self.staging.exists():
            leftovers = [p for p in self.staging.rglob("*") if p.is_file()]
            if leftovers:
                repairs.append(f"removed {len(leftovers)} staged file(s) of an interrupted ingest")
            shutil.rmtree(self.staging, ignore_errors=True)
        now = datetime.now(UTC).replace(tzinfo=None)
        with self.engine.connect() as con:
            known = set(con.execute(sa.select(catalog_parquet.c.path)).scalars())
            known |= set(con.execute(sa.select(catalog_rollup_files.c.path)).scalars())
            retired = dict(con.execute(sa.select(catalog_retired.c.path, catalog_retired.c.retired_at)).all())
        expired = [p for p, at in retired.items() if now - at > RETIRE_GRACE]
        if expired:
            with self.engine.begin() as con:
                con.execute(catalog_retired.delete().where(catalog_retired.c.path.in_(expired)))
            for path in expired:
                (self.root / path).unlink(missing_ok=True)
        for name in schema.tables():
            table_dir = self.root / name
            if not table_dir.exists():
                continue
            for path in table_dir.rglob("*.parquet"):
                relative = path.relative_to(self.root).as_posix()
                if relative not in known and relative not in retired:
                    path.unlink()
                    repairs.append(f"removed {path.relative_to(self.root)}: written by an interrupted "
                                   "ingest and never committed")
        return repairs

    # -- reading ---------------------------------------------------------------------------------
    def view_sql(self) -> list[str]:
        """CREATE VIEW statements exposing every table over exactly the committed Parquet files."""
        statements = []
        for name, spec in schema.tables().items():
            files = self.committed_files(name)
            columns = ", ".join(f'"{c}"' for c, _ in spec.sql_types)
            typed = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in spec.sql_types)
            if not files:
                statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {typed} WHERE false')
                continue
            hive_types = ", ".join(f"'{c}': {dict(spec.sql_types)[c]}" for c in spec.partition_columns)
            mark = f".{current_schema_mark(name)}.parquet"
            current = [f for f in files if f.name.endswith(mark)]
            older = [f for f in files if not f.name.endswith(mark)]
            # Files with today's columns are read as one schema: DuckDB then opens only the first
            # file's footer to bind the view. Older files (written before a column was added; kwh
            # renormalize rewrites them) need union_by_name, which reads every footer, on every bind.
            sources = [f"SELECT * FROM read_parquet([{', '.join(sql_string(str(f)) for f in group)}], "
                       f"hive_partitioning = true, union_by_name = {str(by_name).lower()}, "
                       f"hive_types = {{{hive_types}}})"
                       for group, by_name in ((current, False), (older, True)) if group]
            # The empty typed row set first, so old files' missing columns read as NULL of their type.
            statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {columns} FROM '
                              f'(SELECT {typed} WHERE false UNION ALL BY NAME '
                              f'{" UNION ALL BY NAME ".join(sources)})')
        return statements

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with every warehouse table as a view."""
        con = duckdb.connect()
        for statement in self.view_sql():
            con.execute(statement)
        _add_reference_tables(con)
        views.create_all(con, self.root)
        return con

    def refresh_duckdb(self) -> None:
        """Rebuild warehouse.duckdb next to the old one and swap it in, so readers never see it half made."""
        self.staging.mkdir(parents=True, exist_ok=True)
        fresh = self.staging / f"warehouse-{uuid.uuid4().hex[:8]}.duckdb"
        con = duckdb.connect(str(fresh))
        try:
            for statement in self.view_sql():
                con.execute(statement)
            _add_reference_tables(con)
            views.create_all(con, self.root)
        except BaseException:
            con.close()
            fresh.unlink(missing_ok=True)
            raise
        con.close()
        os.replace(fresh, self.duckdb_path)


def _add_reference_tables(con: duckdb.DuckDBPyConnection) -> None:
    """metric_catalog: every canonical metric with its other names, base unit and meaning."""
    catalog = normalize.metric_catalog().to_arrow()
    con.register("metric_catalog_rows", catalog)
    con.execute("CREATE OR REPLACE TABLE metric_catalog AS SELECT * FROM metric_catalog_rows")
    con.unregister("metric_catalog_rows")


@functools.cache
def current_schema_mark(table: str) -> str:
    """A short hash of a table's file columns and types, put in the names of the Parquet files
    written with exactly those columns ("<run>-<txn>.s1a2b3c4d.parquet"), so views can read them
    without opening every file to compare schemas."""
    text = ";".join(f"{f.name}:{f.type}" for f in schema.tables()[table].file_schema)
    return "s" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _write_parquet(path: Path, name: str, tables, file_schema: pa.Schema) -> None:
    """Write `tables` (an iterable) into one zstd Parquet file; clustered tables (CLUSTER_ORDER) are
    sorted per table and cut into small row groups."""
    order = CLUSTER_ORDER.get(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, file_schema, compression="zstd") as writer:
        for table in tables:
            if order:
                table = table.sort_by([(column, "ascending") for column in order])
            writer.write_table(table, row_group_size=CLUSTERED_ROW_GROUP_ROWS if order else None)


def _chunks(paths: list[Path], file_schema: pa.Schema):
    """The rows of `paths` with the columns of `file_schema`, as tables of about COMPACT_CHUNK_ROWS
    rows: files are read a row group at a time, so a large compacted file never sits in memory whole."""
    pending, rows = [], 0
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536):
            pending.append(_with_columns_of(pa.Table.from_batches([batch]), file_schema))
            rows += batch.num_rows
            if rows >= COMPACT_CHUNK_ROWS:
                yield pa.concat_tables(pending)
                pending, rows = [], 0
    if pending:
        yield pa.concat_tables(pending)


def _same_columns(one: pa.Schema, other: pa.Schema) -> bool:
    return one.names == other.names and all(a.type == b.type for a, b in zip(one, other))


def _with_partitions(table: pa.Table, relative: Path) -> pa.Table:
    """Add the hive partition columns a Parquet file's directory names (relative to the root) carry."""
    spec = schema.tables()[relative.parts[0]]
    for part in relative.parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            if key in spec.partition_columns:
                field = spec.arrow.field(key)
                column = pa.array([unquote(value)] * table.num_rows, pa.string())
                table = table.append_column(key, column.cast(field.type) if field.type != pa.string() else column)
    return table


def _with_columns_of(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `target`: a file written before a column was added to the
    schema gets it as nulls (`kwh renormalize` then fills it)."""
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in target]
    return pa.table({f.name: c for f, c in zip(target, columns)})
