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
import os
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from kwarehouse import normalize, schema, views
from kwarehouse.errors import KwhError

CATALOG_VERSION = 1
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


class Warehouse:
    def __init__(self, root: Path | str):
        self.root = Path(root).absolute()
        self.staging = self.root / "_staging"
        self.duckdb_path = self.root / "warehouse.duckdb"
        self._engine: sa.Engine | None = None

    # -- catalog ---------------------------------------------------------------------------------
    @property
    def rules_dir(self) -> Path:
        """The warehouse's own classification rules (library_rules.csv, op_class_rules.csv), tried before the built-in ones.
        Not rules/: that folder holds the ncu rule results table."""
        return self.root / "normalize"

    @property
    def exists(self) -> bool:
        return (self.root / "catalog.sqlite").exists()

    @property
    def engine(self) -> sa.Engine:
        if self._engine is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._engine = sa.create_engine(f"sqlite:///{self.root / 'catalog.sqlite'}")
            _meta.create_all(self._engine)
            with self._engine.begin() as con:
                version = con.execute(sa.select(catalog_info.c.value)
                                      .where(catalog_info.c.key == "version")).scalar()
                if version is None:
                    con.execute(catalog_info.insert().values(key="version", value=str(CATALOG_VERSION)))
                elif int(version) > CATALOG_VERSION:
                    raise KwhError(f"{self.root}: catalog version {version} is newer than this kwh "
                                   f"understands ({CATALOG_VERSION}); upgrade kwarehouse")
        return self._engine

    def ingested_run(self, sha256: str) -> str | None:
        """The run a file with this content went into, or None."""
        with self.engine.connect() as con:
            return con.execute(sa.select(catalog_files.c.run_id)
                               .where(catalog_files.c.sha256 == sha256)).scalar()

    def committed_files(self, table: str, run_id: str | None = None) -> list[Path]:
        query = sa.select(catalog_parquet.c.path).where(catalog_parquet.c.table_name == table)
        if run_id is not None:
            query = query.where(catalog_parquet.c.run_id == run_id)
        with self.engine.connect() as con:
            return [self.root / p for p in con.execute(query.order_by(catalog_parquet.c.path)).scalars()]

    def run_exists(self, run_id: str) -> bool:
        with self.engine.connect() as con:
            return con.execute(sa.select(catalog_runs.c.run_id)
                               .where(catalog_runs.c.run_id == run_id)).scalar() is not None

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
            files = self.committed_files(name, run_id)
            if files:
                out[name] = pa.concat_tables(
                    [_with_columns_of(_with_partitions(pq.read_table(f), f.relative_to(self.root)), spec.arrow)
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
        txn = uuid.uuid4().hex[:12]
        stage = self.staging / txn
        moves = []
        for name, table in tables.items():
            spec = schema.tables()[name]
            table = schema.conform(name, table)
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"{run_id}-{txn}.parquet")
            staged = stage / relative
            staged.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table.select(spec.file_schema.names), staged, compression="zstd")
            moves.append((staged, relative, name))
        old = {name: self.committed_files(name, run_id) for name in schema.tables()}
        for staged, relative, _ in moves:
            (self.root / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, self.root / relative)
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
            con.execute(catalog_parquet.delete().where(catalog_parquet.c.run_id == run_id))
            con.execute(catalog_parquet.insert(), [
                {"path": relative.as_posix(), "table_name": name, "run_id": run_id}
                for _, relative, name in moves])
            for f in files:
                con.execute(catalog_files.insert().values(sha256=f.sha256, path=f.path, format=f.format,
                                                          run_id=run_id, ingested_at=now))
        shutil.rmtree(stage, ignore_errors=True)
        for paths in old.values():
            for path in paths:
                path.unlink(missing_ok=True)

    def repair(self) -> list[str]:
        """Remove what an interrupted writer left: staging files and uncatalogued Parquet files."""
        repairs = []
        if self.staging.exists():
            leftovers = [p for p in self.staging.rglob("*") if p.is_file()]
            if leftovers:
                repairs.append(f"removed {len(leftovers)} staged file(s) of an interrupted ingest")
            shutil.rmtree(self.staging, ignore_errors=True)
        with self.engine.connect() as con:
            known = set(con.execute(sa.select(catalog_parquet.c.path)).scalars())
        for name in schema.tables():
            table_dir = self.root / name
            if not table_dir.exists():
                continue
            for path in table_dir.rglob("*.parquet"):
                if path.relative_to(self.root).as_posix() not in known:
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
            if files:
                listing = ", ".join(sql_string(str(f)) for f in files)
                source = (f"read_parquet([{listing}], hive_partitioning = true, union_by_name = true, "
                          "hive_types = {'model': VARCHAR, 'gpu': VARCHAR})")
                # The empty typed row set first, so files an older kwh wrote without a newer column
                # read as NULL in it (kwh renormalize fills them) and every column keeps its type.
                statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {columns} FROM '
                                  f'(SELECT {typed} WHERE false UNION ALL BY NAME SELECT * FROM {source})')
            else:
                statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {typed} WHERE false')
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


def _with_partitions(table: pa.Table, relative: Path) -> pa.Table:
    """Add the hive partition columns a Parquet file's directory names (relative to the root) carry."""
    for part in relative.parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            if key in schema.PARTITION_COLUMNS:
                table = table.append_column(key, pa.array([unquote(value)] * table.num_rows, pa.string()))
    return table


def _with_columns_of(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `target`: a file written before a column was added to the
    schema gets it as nulls (`kwh renormalize` then fills it)."""
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in target]
    return pa.table({f.name: c for f, c in zip(target, columns)})
