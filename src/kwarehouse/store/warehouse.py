"""The warehouse read side: Warehouse opens a folder and its catalog (verified to belong together,
catalog.py), answers what the catalog holds, connects DuckDB (connect.py), and hands out the one way
to write: `with warehouse.writer() as session:` (session.WriteSession).

The name stays Warehouse (not Catalog): it is the folder, its catalog and its published file, what
every reader opens (`Warehouse(root)`); store/catalog.py is the catalog database itself.

Warnings (a writer waiting for a lock, committed files missing, a published file changed outside kwh)
go to the `warn` callback the caller passes (the CLI prints them on stderr); without one they are
kept in `warehouse.warnings`.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from kwarehouse import schema
from kwarehouse.errors import KwhError
from kwarehouse.settings import DEFAULT_SETTINGS, Settings
from kwarehouse.store import catalog, connect, folders, lock, migrate, publish, repair
from kwarehouse.store.bind import Snapshot
from kwarehouse.store.catalog import (catalog_files, catalog_info, catalog_parquet, catalog_parquet_runs,
                                      catalog_rollup_files, catalog_runs, write_intents)
from kwarehouse.store.files import with_columns_of, with_partitions
from kwarehouse.store.layout import (CATALOG_BUSY_SECONDS, CATALOG_LOCK, CATALOG_VERSION, OWN_BUSY_SECONDS,
                                     STAGING, WRITER_LOCK, canonical_root, read_path, table_relative)
from kwarehouse.store.session import WriteSession


catalog_engine_url = catalog.engine_url


class Warehouse:
    def __init__(self, root: Path | str, catalog: str | None = None, wait: float | None = None,
                 settings: Settings = DEFAULT_SETTINGS, warn: Callable[[str], None] | None = None):
        """root: the warehouse folder. catalog: an SQLAlchemy URL for the catalog (e.g.
        postgresql://host/db for a team sharing one warehouse); default: catalog.sqlite in root.
        wait: how long a writer waits for another writer's lock (None: as long as it takes).
        settings: the write path's tunables (kwarehouse.settings). warn: called with each warning
        (one line, to be shown as "kwh: <line>"); default: kept in self.warnings."""
        # One path per warehouse, its real one: a symlink, a relative path or ".." open the same
        # warehouse under the same name, so the published file (whose views name the Parquet files
        # by absolute path, and whose record names its folder) is the same whichever path opened it.
        self.root = canonical_root(root)
        self.staging = self.root / STAGING
        self.duckdb_path = self.root / "warehouse.duckdb"
        self.catalog_url = catalog_engine_url(catalog) if catalog else None
        self.wait = wait
        self.settings = settings
        self._engine: sa.Engine | None = None         # verified, created when missing (writers)
        self._read_engine: sa.Engine | None = None    # verified, never creates anything (readers)
        self.warnings: list[str] = []
        self._warn = warn
        self.session: WriteSession | None = None      # inside writer()

    def warn(self, line: str) -> None:
        """Say a warning (see __init__'s warn)."""
        if self._warn is not None:
            self._warn(line)
        else:
            self.warnings.append(line)

    @property
    def session_dir(self) -> Path | None:
        """The staging folder of this warehouse's open writer session, or None."""
        return self.session.session_dir if self.session is not None else None

    @property
    def rules_dir(self) -> Path:
        """The warehouse's own classification rules (library_rules.csv, op_class_rules.csv), tried before the built-in ones.
        Not rules/: that folder holds the ncu rule results table."""
        return self.root / "normalize"

    @property
    def catalog_name(self) -> str:
        return catalog.describe(self.catalog_url, self.root)

    def _make_engine(self, read_only: bool) -> sa.Engine | None:
        """An engine on the catalog; None for a read-only look at a catalog.sqlite that does not exist."""
        if self.catalog_url:
            return sa.create_engine(self.catalog_url, pool_pre_ping=True)
        path = self.root / "catalog.sqlite"
        if read_only:
            if not path.exists():
                return None
            # mode=ro: a reader works on a read-only warehouse and never creates the file
            return sa.create_engine(f"sqlite:///file:{quote(str(path))}?mode=ro&uri=true",
                                    connect_args={"timeout": self._busy_timeout})
        # a busy catalog (another writer's transaction) is waited for, not failed on
        return sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": self._busy_timeout})

    @property
    def _busy_timeout(self) -> float:
        """How long SQLite waits for a catalog another process has locked: --wait when given, but at
        least OWN_BUSY_SECONDS: one ingest reads the catalog while its own commit thread writes it, and
        those waits (milliseconds) are not another writer's lock."""
        return max(self.wait, OWN_BUSY_SECONDS) if self.wait is not None else CATALOG_BUSY_SECONDS

    def _verify(self, engine: sa.Engine | None, create: bool) -> bool:
        """Check that the catalog belongs to this folder (see catalog.py); with `create`, make a new
        warehouse's catalog and identity, or give an older kwh's warehouse its identity. Returns
        whether a warehouse exists here."""
        try:
            return self._verify_once(engine, create)
        except KwhError as first:
            # Another process may be creating this warehouse right now (it has written the catalog's
            # id but not yet warehouse.json): look again once its creation lock is free.
            try:
                lock.wait_for_creation(self.root)
            except OSError:          # a read-only or missing folder: nobody is creating it
                raise first from None
            return self._verify_once(engine, create)

    def _verify_once(self, engine: sa.Engine | None, create: bool) -> bool:
        folder_id = catalog.read_folder_id(self.root)
        try:
            has_catalog, catalog_id, run_count = catalog.catalog_state(engine) if engine else (False, None, 0)
        except sa.exc.DatabaseError as exc:
            raise catalog.database_error(self.catalog_name, exc) from None
        where = self.catalog_name
        if folder_id and catalog_id and folder_id != catalog_id:
            raise KwhError(f"{self.root}: its catalog {where} belongs to another warehouse (id {catalog_id}, "
                           f"this folder is {folder_id}); pass the right --catalog (or KWH_CATALOG) or --warehouse")
        if folder_id and not catalog_id:
            state = "empty" if engine is not None and (has_catalog or self.catalog_url
                                                       or (self.root / "catalog.sqlite").exists()) else "missing"
            if has_catalog and run_count:
                state = "not this warehouse's (it has no warehouse id)"
            raise KwhError(f"{self.root} is a kwh warehouse (id {folder_id}) but its catalog {where} is {state}; "
                           "restore the catalog (or pass the right --catalog / set KWH_CATALOG). kwh will not "
                           "read or write the warehouse without it")
        if catalog_id and not folder_id:
            raise KwhError(f"the catalog {where} belongs to warehouse {catalog_id}, but {self.root} has no "
                           f"{catalog.IDENTITY_FILE}; pass the warehouse folder of that catalog (--warehouse), "
                           f"or restore {catalog.IDENTITY_FILE} from a backup")
        if not has_catalog and catalog.folder_has_data(self.root):
            raise KwhError(f"{self.root} holds warehouse files but its catalog {where} is missing or empty; "
                           "restore the catalog (or pass the right --catalog / set KWH_CATALOG). kwh will not "
                           "read or write the warehouse without it")
        if not create:
            return has_catalog
        with lock.hold(self.root, CATALOG_LOCK, "catalog creation", self.wait, self.warn):
            # Two processes may open a new warehouse at once: create, upgrade and name the catalog
            # under a lock of its own (not the writer lock, which the same process may hold later).
            try:
                catalog.create_or_upgrade(engine, self.root)
                has_catalog, catalog_id, _ = catalog.catalog_state(engine)
                folder_id = catalog.read_folder_id(self.root)
                if catalog_id is None:
                    catalog_id = folder_id or uuid.uuid4().hex
                    with engine.begin() as con:
                        catalog.set_warehouse_id(con, catalog_id)
                if folder_id is None:
                    catalog.write_folder_id(self.root, catalog_id)
            except sa.exc.DatabaseError as exc:
                raise catalog.database_error(where, exc) from None
        return True

    @property
    def exists(self) -> bool:
        """Whether a warehouse is here (raises when its catalog is missing, empty or another's)."""
        if self._engine is not None or self._read_engine is not None:
            return True
        engine = self._make_engine(read_only=True)
        if engine is not None and not self.catalog_url and not self.root.exists():
            return False
        if self._verify(engine, create=False):
            self._read_engine = engine
            if _catalog_version(engine) < CATALOG_VERSION:
                # an older kwh's catalog: upgrade it now (readers too use its newer tables), unless
                # the warehouse is read-only, where reading what it has still works
                with contextlib.suppress(KwhError, OSError):
                    self._read_engine = self.engine
            return True
        if engine is not None:
            engine.dispose()
        return False

    @property
    def engine(self) -> sa.Engine:
        """The catalog for writing: created (with the warehouse's identity) when there is none."""
        if self._engine is None:
            self.root.mkdir(parents=True, exist_ok=True)
            engine = self._make_engine(read_only=False)
            self._verify(engine, create=True)
            self._engine = engine
        return self._engine

    @property
    def reader(self) -> sa.Engine:
        """The catalog for reading: the writer's engine when open, else a read-only one."""
        if self._engine is not None:
            return self._engine
        if not self.exists:
            raise KwhError(f"{self.root}: no warehouse here yet; run kwh ingest first "
                           "(or pass --warehouse / set KWH_WAREHOUSE)")
        return self._read_engine

    @contextlib.contextmanager
    def reading(self):
        """A catalog connection for reading, with database errors as one line."""
        try:
            with self.reader.connect() as con:
                yield con
        except sa.exc.DatabaseError as exc:
            raise catalog.database_error(self.catalog_name, exc) from None

    def ingested_run(self, sha256: str) -> str | None:
        """The run a file with this content went into, or None."""
        with self.reading() as con:
            return con.execute(sa.select(catalog_files.c.run_id)
                               .where(catalog_files.c.sha256 == sha256)).scalar()

    def empty_captures(self) -> dict[str, str]:
        """sha256 -> reason of the captures recorded as holding nothing to store (catalog.empty_files)."""
        with self.reading() as con:
            return catalog.empty_captures(con)

    def ingested_files(self) -> dict[str, str]:
        """sha256 -> run id of every file ingested so far."""
        with self.reading() as con:
            return dict(con.execute(sa.select(catalog_files.c.sha256, catalog_files.c.run_id)).all())

    def ingested_paths(self) -> set[str]:
        """Every path a file was ingested from."""
        with self.reading() as con:
            return set(con.execute(sa.select(catalog_files.c.path).distinct()).scalars())

    def ingested_at_path(self, path: str) -> list[tuple[str, int, str]]:
        """(sha256, size, run id) of the files ingested from `path` whose size is known."""
        with self.reading() as con:
            return [tuple(r) for r in con.execute(
                sa.select(catalog_files.c.sha256, catalog_files.c.size, catalog_files.c.run_id)
                .where(catalog_files.c.path == path, catalog_files.c.size.is_not(None)))]

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
        with self.reading() as con:
            return [self.read_path(p) for p in con.execute(query).scalars()]

    def read_path(self, relative: str | Path) -> Path:
        """Where readers read a committed (or retired) file: its _files/ link, else (a file an older
        kwh wrote, or a file system without hard links) its table folder path."""
        return read_path(self.root, relative)

    def snapshot(self) -> Snapshot:
        """Every table's committed files and the real partition names, read in one statement so a
        reader never sees a run's rows in one table without the others."""
        with self.reading() as con:
            return Snapshot.from_rows(list(con.execute(catalog.SNAPSHOT_QUERY)))

    def copy_problem(self) -> str | None:
        """Why this folder may not write its catalog (a copy of the folder that does), or None; reads only."""
        return folders.problem(self)

    def read_run(self, run_id: str) -> dict[str, pa.Table]:
        """The committed rows of one run, per table, partition columns included."""
        out = {}
        with self.reading() as con:
            names = con.execute(sa.select(catalog_runs.c.model, catalog_runs.c.gpu)
                                .where(catalog_runs.c.run_id == run_id)).first()
        for name, spec in schema.tables().items():
            if name in schema.ROLLUP_TABLES:
                continue
            files = self.committed_files(name, run_id)
            if files:
                # a compacted file holds the rows of several runs: read only this run's
                out[name] = pa.concat_tables(
                    [with_columns_of(with_partitions(pq.read_table(f, filters=[("run_id", "=", run_id)]),
                                                     table_relative(f.relative_to(self.root)),
                                                     dict(zip(("model", "gpu"), names or ()))), spec.arrow)
                     for f in files])
        return out

    def runs(self) -> list[tuple[str, str, str]]:
        """(run_id, model, gpu) of every committed run, oldest first."""
        if not self.exists:
            return []
        with self.reading() as con:
            return [tuple(row) for row in con.execute(
                sa.select(catalog_runs.c.run_id, catalog_runs.c.model, catalog_runs.c.gpu)
                .order_by(catalog_runs.c.created_at, catalog_runs.c.run_id))]

    def rollup_coverage(self) -> dict[str, str]:
        """day -> runs_hash of the runs each day's rollup rows were computed from."""
        with self.reading() as con:
            return catalog.rollup_coverage(con)

    def rollup_days(self) -> dict[str, list[str]]:
        with self.reading() as con:
            out: dict[str, list[str]] = {}
            for name, day in con.execute(sa.select(catalog_rollup_files.c.table_name, catalog_rollup_files.c.day)):
                out.setdefault(name, []).append(day)
            return out

    def run_identities(self) -> dict[str, str]:
        """run_id -> its identity (catalog.run_identities): what kwh rollup compares with what each
        day's rollup covered."""
        with self.reading() as con:
            return catalog.run_identities(con)

    def has_leftovers(self) -> bool:
        """Whether an interrupted writer left work to undo (repair() does), or warehouse.duckdb is
        stale: what even an ingest with nothing new must fix."""
        if not self.exists:
            return False
        with self.reading() as con:
            if con.execute(sa.select(sa.func.count()).select_from(write_intents)).scalar():
                return True
        return publish.is_stale(self)

    def missing_files(self, snapshot: Snapshot | None = None) -> list[str]:
        """Committed files that are not on disk (kwh check --repair takes their runs out)."""
        snapshot = snapshot or self.snapshot()
        return [p for paths in snapshot.files.values() for p in paths if not self.read_path(p).exists()]

    def refresh_published_if_free(self) -> None:
        """Rebuild a stale warehouse.duckdb (a moved or copied warehouse, a failed rebuild) when no
        writer is busy and the folder is writable; otherwise leave it to the next writer. Readers
        call this, so a moved warehouse opens in the DuckDB shell after any kwh command."""
        try:
            if self.session is not None or not publish.is_stale(self) or self.copy_problem():
                return      # a copy of the folder never writes the catalog it shares, readers' publishing included
            lock.refuse_links(self.root)
            if migrate.outdated(self.snapshot()):
                # files an older kwh wrote: a reader free to write upgrades them first, as every writer
                # does (writer() upgrades, then publishes), so that no warehouse.duckdb it publishes
                # answers over them as unknown; the upgrade is said as a warning
                with self.writer(if_free=True) as session:
                    for line in session.repairs:
                        self.warn(line)
                return
            with lock.hold_if_free(self.root) as free:
                if free:
                    self.engine
                    publish.publish_if_stale(self)
        except (OSError, KwhError, sa.exc.DatabaseError):
            return     # read-only, busy, or full: readers answer from their own in-memory views

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with every warehouse table as a view (connect.py)."""
        return connect.connect(self)

    def publish_if_stale(self) -> bool:
        return publish.publish_if_stale(self)

    def refresh_duckdb(self) -> None:
        """Rebuild warehouse.duckdb now (see publish.py)."""
        publish.publish(self)

    @contextlib.contextmanager
    def writer(self, if_free: bool = False):
        """The one way to write: yields a WriteSession holding the warehouse's writer lock (one writer
        at a time). A crashed writer's leftovers are repaired first (their lines in session.repairs),
        files an older kwh wrote are upgraded (store/migrate.py), and warehouse.duckdb is published
        last (also when the work failed). if_free: raise KwhError at once, saying nothing, where another
        writer holds the lock (a reader's upgrade)."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock.refuse_links(self.root)
        wait, warn = (0, lambda line: None) if if_free else (self.wait, self.warn)
        with lock.hold(self.root, WRITER_LOCK, "writer", wait, warn):
            engine = self.engine
            folders.claim(self)
            repairs = repair.repair(self)
            missing = self.missing_files()
            if missing:
                self.warn(f"warning: {len(missing)} committed file(s) of {self.root} are missing (first: "
                          f"{missing[0]}): run kwh check --repair")
            staging = f"{STAGING}/{uuid.uuid4().hex[:12]}"
            with engine.begin() as con:
                con.execute(write_intents.insert().values(path=staging, kind="staging", created_at=catalog.now()))
            session = WriteSession(self, self.root / staging)
            self.session = session
            try:
                session.repairs = repairs + migrate.upgrade(session)
                yield session
            except BaseException:
                with contextlib.suppress(Exception):
                    self.publish_if_stale()
                raise
            else:
                self.publish_if_stale()
            finally:
                shutil.rmtree(session.session_dir, ignore_errors=True)
                self.session = None
                with contextlib.suppress(Exception), engine.begin() as con:
                    con.execute(write_intents.delete().where(write_intents.c.path == staging))

    @contextlib.contextmanager
    def writer_lock(self):
        """Hold the writer lock without a session: for kwh detach and attach --moved, which change
        which folder the catalog belongs to, not the data."""
        with lock.hold(self.root, WRITER_LOCK, "writer", self.wait, self.warn):
            yield


def _catalog_version(engine: sa.Engine) -> int:
    with engine.connect() as con:
        return int(con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "version")).scalar() or 0)
