"""The warehouse on disk: hive-partitioned Parquet, a catalog, and warehouse.duckdb.

Layout (root defaults to ./warehouse):
    <table>/model=<m>/gpu=<g>/<run_id>-<txn>.parquet   one file per run and table
    warehouse.json                                    the warehouse's id (its catalog holds the same)
    catalog.sqlite                                    runs, ingested files, committed Parquet files
    warehouse.duckdb                                  views over exactly the committed files
    _staging/<session>/                               a writer's files being written; never read
    _quarantine/                                      what kwh moved aside instead of deleting

A run becomes visible in one step: its Parquet files are written under the writer's staging folder,
their final paths are recorded as write intents (committed first), the files are renamed into place
(still invisible: views list only catalogued files) and then recorded in one catalog transaction.
warehouse.duckdb is rebuilt beside the old one and renamed over it (publish.py).

What kwh deletes, and only that: staging folders and files it recorded as write intents and did not
commit (left by a crash), and files it retired (replaced by a newer commit or a compaction) once no
published view names them and RETIRE_GRACE has passed. Nothing else, in or outside the warehouse.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote, unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from kwarehouse import normalize, schema, views
from kwarehouse.store import catalog
from kwarehouse.store.catalog import (CATALOG_VERSION, catalog_files, catalog_info, catalog_parquet,  # noqa: F401
                                catalog_parquet_runs, catalog_retired, catalog_rollup_files,
                                catalog_rollup_coverage, catalog_rollup_state, catalog_runs, write_intents)
from kwarehouse.errors import KwhError, first_line
from kwarehouse.settings import DEFAULT_SETTINGS, Settings

# The long metrics table is written sorted by metric name, in small row groups, so that a filter on
# the name skips most of every file by its row-group statistics: a query for a few of the ~830
# metrics per launch (queries/metric_lookup.sql) reads a few percent of the table, not all of it.
CLUSTER_ORDER = {"metrics": ("metric", "run_id", "launch_id")}
CLUSTERED_ROW_GROUP_ROWS = 16_384
# Ingest writes Parquet with a fast codec (writing zstd cost more than normalizing a run); kwh compact
# rewrites partitions with zstd, which is smaller on disk.
INGEST_COMPRESSION = "snappy"
# kwh compact streams each partition through chunks of at most this many rows (sorted per chunk for
# clustered tables), so its memory does not grow with the partition.
COMPACT_CHUNK_ROWS = 1_000_000
RETIRE_GRACE = timedelta(minutes=10)
# A partition folder name ("model=<value>") stays well inside the 255-byte file-name limit: longer
# values are cut and end in "~<hash>"; the real value is kept in the catalog and the views show it.
MAX_PARTITION_BYTES = 120
# Every committed file also has a hard link under _files/ (same relative path). Views read those
# links; the table folders hold only what is committed now. A replaced file leaves its table folder
# at once (so polars/pyarrow/DuckDB/Spark globbing a table folder see exactly the committed rows)
# while its link keeps it readable for views bound before, until RETIRE_GRACE has passed.
FILES = "_files"
# The folders kwh writes into (with each table's folder and its model=/gpu= folders, in the tree
# and under _files/) and the lock files it writes: none may be a symbolic link. One that leads out of
# the warehouse would receive (or lose, to repair) files elsewhere; one that stays inside aliases
# kwh's own folders (a table folder linked to its _files/ folder: taking a replaced file out of the
# table folder would delete the committed file). A link to the whole warehouse folder is fine: the
# warehouse is opened under its real path (canonical_root).
WRITTEN_FOLDERS = ("_staging", FILES, "_quarantine")
WRITTEN_FILES = (".kwh.lock", ".kwh.catalog.lock")
# How long a command waits for a catalog.sqlite another process holds locked (without --wait).
CATALOG_BUSY_SECONDS = 120
# ...and at least this long with --wait: the threads of one ingest wait for each other's catalog statements.
OWN_BUSY_SECONDS = 10
# How often a writer waiting for another's lock looks again.
LOCK_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class StagedRun:
    """One run's Parquet files written under a writer's staging folder, waiting for commit_staged."""
    run_id: str
    model: str
    gpu: str
    txn: str
    files: tuple[tuple[str, str], ...]   # (path relative to the staging folder of txn, table)
    stage_dir: str = ""                  # the staging folder of txn (absolute)
    # files that hold rows of several runs staged together (stage_runs): (path, table, their run ids)
    shared: tuple[tuple[str, str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class IngestedFile:
    sha256: str
    path: str
    format: str
    size: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the catalog says at one instant (read in one statement): the committed files of every
    table, relative to the root, and the real model/GPU names of folders that abbreviate them."""
    files: dict[str, list[str]]
    names: dict[tuple[str, str], str]     # (partition column, folder value) -> real value
    generation: int


def partition_value(value: str) -> str:
    """A hive directory value: percent-encoded so no name can add a path level or escape the root,
    never ending in ".parquet" (it would look like a data file), and at most MAX_PARTITION_BYTES
    (longer values end in "~" and a hash of the whole value).

    >>> partition_value("NVIDIA H100 80GB HBM3")
    'NVIDIA H100 80GB HBM3'
    >>> partition_value("../a/b'c")
    '%2E.%2Fa%2Fb%27c'
    >>> partition_value("bert.parquet")
    'bert%2Eparquet'
    """
    encoded = quote(value, safe=" -_.()+,@", errors="surrogatepass")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if encoded == "__HIVE_DEFAULT_PARTITION__":     # readers take that folder name for NULL
        encoded = "%5F" + encoded[1:]
    if encoded.lower().endswith(".parquet"):
        encoded = encoded[:-8] + "%2E" + encoded[-7:]
    if len(encoded) > MAX_PARTITION_BYTES:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        head = encoded[:MAX_PARTITION_BYTES - 20]
        cut = head.rfind("%", len(head) - 2)      # never split a %XX escape
        head = head[:cut] if cut != -1 else head
        encoded = f"{head}~{digest}"
    return encoded or "__HIVE_DEFAULT_PARTITION__"


def sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


catalog_engine_url = catalog.engine_url


def _database_error(where: str, exc: Exception) -> KwhError:
    """A catalog that cannot be read or written, as one line that says what to do."""
    text = first_line(exc)
    if "locked" in text.lower() or "busy" in text.lower():
        return KwhError(f"{where}: the catalog is busy: another process holds a lock on it (a sqlite3 session, a "
                        "backup, a hung kwh?); nothing was changed: try again when it is free (--wait sets how long "
                        "to wait)")
    if "full" in text.lower():
        return KwhError(f"{where}: the disk is full ({text}); nothing was committed by the failed step: "
                        "free space and run the command again")
    if isinstance(exc, sa.exc.OperationalError) and ("connect" in text.lower() or "does not exist" in text.lower()):
        return KwhError(f"cannot reach the catalog {where}: {text}")
    return KwhError(f"{where}: the catalog cannot be read ({text}); restore it from a backup (the Parquet "
                    "files are untouched; kwh check --repair then reconciles them with it)")


class Warehouse:
    def __init__(self, root: Path | str, catalog: str | None = None, wait: float | None = None,
                 settings: Settings = DEFAULT_SETTINGS):
        """root: the warehouse folder. catalog: an SQLAlchemy URL for the catalog (e.g.
        postgresql://host/db for a team sharing one warehouse); default: catalog.sqlite in root.
        wait: how long a writer waits for another writer's lock (None: as long as it takes).
        settings: the write path's tunables (kwarehouse.settings)."""
        # One path per warehouse, its real one: a symlink, a relative path or ".." open the same
        # warehouse under the same name, so the published file (whose views name the Parquet files
        # by absolute path, and whose record names its folder) is the same whichever path opened it.
        self.root = canonical_root(root)
        self.staging = self.root / "_staging"
        self.duckdb_path = self.root / "warehouse.duckdb"
        self.catalog_url = catalog_engine_url(catalog) if catalog else None
        self.wait = wait
        self.settings = settings
        self._engine: sa.Engine | None = None         # verified, created when missing (writers)
        self._read_engine: sa.Engine | None = None    # verified, never creates anything (readers)
        self.session_dir: Path | None = None          # this writer's staging folder, inside writer()

    # -- catalog ---------------------------------------------------------------------------------
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
                with open(self.root / ".kwh.catalog.lock", "a+") as lock:
                    fcntl.flock(lock, fcntl.LOCK_SH)
                    fcntl.flock(lock, fcntl.LOCK_UN)
            except OSError:          # a read-only or missing folder: nobody is creating it
                raise first from None
            return self._verify_once(engine, create)

    def _verify_once(self, engine: sa.Engine | None, create: bool) -> bool:
        folder_id = catalog.read_folder_id(self.root)
        try:
            has_catalog, catalog_id, run_count = catalog.catalog_state(engine) if engine else (False, None, 0)
        except sa.exc.DatabaseError as exc:
            raise _database_error(self.catalog_name, exc) from None
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
        with self._lock(".kwh.catalog.lock", "catalog creation"):
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
                raise _database_error(where, exc) from None
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
    def _read(self):
        """A catalog connection for reading, with database errors as one line."""
        try:
            with self.reader.connect() as con:
                yield con
        except sa.exc.DatabaseError as exc:
            raise _database_error(self.catalog_name, exc) from None

    def ingested_run(self, sha256: str) -> str | None:
        """The run a file with this content went into, or None."""
        with self._read() as con:
            return con.execute(sa.select(catalog_files.c.run_id)
                               .where(catalog_files.c.sha256 == sha256)).scalar()

    def empty_captures(self) -> dict[str, str]:
        """sha256 -> reason of the captures recorded as holding nothing to store (catalog.empty_files)."""
        with self._read() as con:
            return catalog.empty_captures(con)

    def record_empty(self, captures: list[dict]) -> None:
        """Record captures with nothing to store (see catalog.record_empty); under the writer lock."""
        try:
            with self.engine.begin() as con:
                catalog.record_empty(con, captures)
        except sa.exc.DatabaseError as exc:
            raise _database_error(self.catalog_name, exc) from None

    def ingested_files(self) -> dict[str, str]:
        """sha256 -> run id of every file ingested so far."""
        with self._read() as con:
            return dict(con.execute(sa.select(catalog_files.c.sha256, catalog_files.c.run_id)).all())

    def ingested_paths(self) -> set[str]:
        """Every path a file was ingested from."""
        with self._read() as con:
            return set(con.execute(sa.select(catalog_files.c.path).distinct()).scalars())

    def ingested_at_path(self, path: str) -> list[tuple[str, int, str]]:
        """(sha256, size, run id) of the files ingested from `path` whose size is known."""
        with self._read() as con:
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
        with self._read() as con:
            return [self.read_path(p) for p in con.execute(query).scalars()]

    def read_path(self, relative: str | Path) -> Path:
        """Where readers read a committed (or retired) file: its _files/ link, else (a file an older
        kwh wrote, or a file system without hard links) its table folder path."""
        link = self.root / FILES / relative
        return link if link.exists() else self.root / relative

    def snapshot(self) -> Snapshot:
        """Every table's committed files and the real partition names, read in one statement so a
        reader never sees a run's rows in one table without the others."""
        with self._read() as con:
            result = list(con.execute(catalog.SNAPSHOT_QUERY))
        files: dict[str, list[str]] = {name: [] for name in schema.tables()}
        names: dict[tuple[str, str], str] = {}
        generation = 0
        for path, table, model, gpu, gen in result:
            if path is None:
                generation = int(gen or 0)
                continue
            if table not in files:
                continue
            files[table].append(path)
            parts = Path(path).parts
            for part, real in zip(parts[1:3], (model, gpu)):
                key, _, value = part.partition("=")
                if real is not None and key in ("model", "gpu") and unquote(value) != real:
                    names[(key, value)] = real
        for paths in files.values():
            paths.sort()
        return Snapshot(files, names, generation)

    # -- writing ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self, name: str, purpose: str):
        """Hold the lock file `name`; a wait says who holds it and honours self.wait."""
        path = self.root / name
        try:
            handle = open(path, "a+")
        except OSError as exc:
            raise KwhError(f"{self.root}: cannot take the {purpose} lock ({exc.strerror}); "
                           "is the warehouse read-only? Reading commands still work") from None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another kwh process"
                limit = "" if self.wait is None else f" (at most {self.wait:g} s: --wait)"
                print(f"kwh: waiting for the {purpose} lock of {self.root}, held by {holder}{limit}",
                      file=sys.stderr, flush=True)
                deadline = None if self.wait is None else time.monotonic() + self.wait
                while True:
                    try:
                        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if deadline is not None and time.monotonic() >= deadline:
                            raise KwhError(f"{self.root}: gave up after {self.wait:g} s waiting for the {purpose} "
                                           f"lock, held by {holder}; try again later or raise --wait") from None
                        time.sleep(LOCK_POLL_SECONDS)
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()} ({' '.join(sys.argv[:2]) or 'python'}) since "
                             f"{datetime.now().isoformat(timespec='seconds')}\n")
                handle.flush()
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def links(self) -> list[Path]:
        """The folders and files kwh writes into that are symbolic links (see WRITTEN_FOLDERS)."""
        found = [self.root / name for name in (*WRITTEN_FOLDERS, *WRITTEN_FILES) if (self.root / name).is_symlink()]
        for top in (self.root, self.root / FILES):
            if top.is_symlink():
                continue        # named above
            for table in schema.tables():
                folder = top / table
                if folder.is_symlink():
                    found.append(folder)
                    continue
                # model=<m> folders, and gpu=<g> folders in them: directories only, never the files
                for model in _subfolders(folder):
                    if model.is_symlink():
                        found.append(model)
                        continue
                    found += [gpu for gpu in _subfolders(model) if gpu.is_symlink()]
        return found

    def refuse_links(self) -> None:
        """Refuse to write (before anything is written) where a folder or file kwh writes into is a
        symbolic link: kwh's files would land, or be deleted, wherever it points. Reading through
        such a link still works."""
        found = self.links()
        if found:
            link = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise KwhError(f"{link}: a symbolic link (to {os.readlink(link)}){more}; kwh writes only into the "
                           "warehouse's own folders: replace the link by what it points to (mv it there), or "
                           "link the whole warehouse folder instead. Reading commands still work")

    @contextlib.contextmanager
    def writer(self):
        """Hold the warehouse's write lock: one writer at a time; repair a crashed writer's leftovers
        first, and publish warehouse.duckdb last (also when the work failed).

        Yields the list of repairs made (one line each) so the caller can report them."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.refuse_links()
        with self._lock(".kwh.lock", "writer"):
            engine = self.engine
            self.claim_folder()
            repairs = self.repair()
            missing = self.missing_files()
            if missing:
                print(f"kwh: warning: {len(missing)} committed file(s) of {self.root} are missing (first: "
                      f"{missing[0]}): run kwh check --repair", file=sys.stderr)
            session = f"_staging/{uuid.uuid4().hex[:12]}"
            with engine.begin() as con:
                con.execute(write_intents.insert().values(path=session, kind="staging", created_at=catalog.now()))
            self.session_dir = self.root / session
            try:
                yield repairs
            except BaseException:
                with contextlib.suppress(Exception):
                    self.publish_if_stale()
                raise
            else:
                self.publish_if_stale()
            finally:
                shutil.rmtree(self.session_dir, ignore_errors=True)
                self.session_dir = None
                with contextlib.suppress(Exception), engine.begin() as con:
                    con.execute(write_intents.delete().where(write_intents.c.path == session))

    def claim_folder(self) -> None:
        """Refuse to write from a copy of the folder that writes a catalog outside it (catalog.py says
        how a copy is told apart); a catalog.sqlite inside the folder went along with any copy."""
        if catalog.catalog_in_folder(self.catalog_url, self.root):
            return
        try:
            catalog.claim_folder(self.engine, self.root, self.catalog_name)
        except sa.exc.DatabaseError as exc:
            raise _database_error(self.catalog_name, exc) from None

    def copy_problem(self) -> str | None:
        """Why this folder may not write its catalog (a copy of the folder that does), or None; reads only."""
        if catalog.catalog_in_folder(self.catalog_url, self.root):
            return None
        with self._read() as con:
            return catalog.copy_problem(con, self.root, self.catalog_name)

    def read_run(self, run_id: str) -> dict[str, pa.Table]:
        """The committed rows of one run, per table, partition columns included."""
        out = {}
        with self._read() as con:
            names = con.execute(sa.select(catalog_runs.c.model, catalog_runs.c.gpu)
                                .where(catalog_runs.c.run_id == run_id)).first()
        for name, spec in schema.tables().items():
            if name in schema.ROLLUP_TABLES:
                continue
            files = self.committed_files(name, run_id)
            if files:
                # a compacted file holds the rows of several runs: read only this run's
                out[name] = pa.concat_tables(
                    [_with_columns_of(_with_partitions(pq.read_table(f, filters=[("run_id", "=", run_id)]),
                                                       _table_relative(f.relative_to(self.root)),
                                                       dict(zip(("model", "gpu"), names or ()))), spec.arrow)
                     for f in files])
        return out

    def runs(self) -> list[tuple[str, str, str]]:
        """(run_id, model, gpu) of every committed run, oldest first."""
        if not self.exists:
            return []
        with self._read() as con:
            return [tuple(row) for row in con.execute(
                sa.select(catalog_runs.c.run_id, catalog_runs.c.model, catalog_runs.c.gpu)
                .order_by(catalog_runs.c.created_at, catalog_runs.c.run_id))]

    def commit_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table],
                   files: list[IngestedFile], supersedes: tuple[str, ...] = ()) -> None:
        """Replace run `run_id` by `tables` and record `files` as ingested, all or nothing.

        Call inside writer()."""
        self.commit_staged(self.stage_run(run_id, model, gpu, tables), files, supersedes)

    def stage_run(self, run_id: str, model: str, gpu: str, tables: dict[str, pa.Table]) -> StagedRun:
        """Write one run's Parquet files into the writer's staging folder, where no reader sees them.

        Inside writer(), or in an ingest fan-out worker whose session_dir the driver's writer gave."""
        if self.session_dir is None:
            raise KwhError("internal: stage_run outside a writer session")
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        staged = []
        for name, table in tables.items():
            table = schema.conform(name, table)
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"{run_id}-{txn}.parquet")
            relative = self._stage(stage, relative, name, table)
            staged.append((relative.as_posix(), name))
        return StagedRun(run_id, model, gpu, txn, tuple(staged), str(stage))

    def stage_runs(self, runs: list[tuple[str, str, str, dict[str, pa.Table]]]) -> list[StagedRun]:
        """stage_run for several runs, (run_id, model, gpu, tables) each, with one Parquet file per
        table and partition: the first StagedRun carries the files (`shared`), all of them commit
        together in one commit_many."""
        if self.session_dir is None:
            raise KwhError("internal: stage_runs outside a writer session")
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        parts: dict[tuple[str, str, str], list[tuple[str, pa.Table]]] = {}
        for run_id, model, gpu, tables in runs:
            for name, table in tables.items():
                parts.setdefault((name, model, gpu), []).append((run_id, table))
        shared = []
        for number, ((name, model, gpu), of_runs) in enumerate(parts.items()):
            relative = (Path(name) / f"model={partition_value(model)}" / f"gpu={partition_value(gpu)}"
                        / f"batch-{txn}-{number}.parquet")
            relative = self._stage(stage, relative, name, _conformed(name, pa.concat_tables([t for _, t in of_runs])))
            shared.append((relative.as_posix(), name, tuple(sorted({run_id for run_id, _ in of_runs}))))
        return [StagedRun(run_id, model, gpu, txn, (), str(stage), tuple(shared) if number == 0 else ())
                for number, (run_id, model, gpu, _) in enumerate(runs)]

    def discard_staged(self, staged: StagedRun) -> None:
        shutil.rmtree(staged.stage_dir, ignore_errors=True)

    def commit_staged(self, staged: StagedRun, files: list[IngestedFile], supersedes: tuple[str, ...] = ()) -> None:
        """Make a staged run the committed rows of its run id and record `files`, all or nothing.
        supersedes: runs this one replaces (partial versions of the same export): they are removed
        in the same transaction.

        Call inside writer()."""
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
        stage = (self.session_dir or self.staging) / txn
        # Files these runs share with other runs (after kwh compact) are rewritten without their rows.
        retired: list[str] = []
        with self._read() as con:
            old_paths = list(con.execute(sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name).where(
                catalog_parquet.c.path.in_(sa.select(catalog_parquet_runs.c.path)
                                           .where(catalog_parquet_runs.c.run_id.in_(replaced))))))
            for path, name in old_paths:
                others = {r for r in con.execute(sa.select(catalog_parquet_runs.c.run_id).where(
                    catalog_parquet_runs.c.path == path)).scalars()} - replaced
                retired.append(path)
                if others and self.read_path(path).is_file():   # (kwh check --repair takes out every run of a lost file)
                    spec = schema.tables()[name]
                    dropped = pa.array(sorted(replaced), pa.string())
                    kept = (chunk.filter(pc.invert(pc.is_in(chunk["run_id"], value_set=dropped)))
                            for chunk in _chunks([self.read_path(path)], spec.file_schema))
                    relative = Path(path).parent / f"compact-{txn}-{len(moves)}.parquet"
                    relative = self._stage_chunks(stage, relative, name, kept)
                    moves.append((stage / relative, relative, name, tuple(sorted(others))))
        self._place(moves)
        now = catalog.now()
        with self.engine.begin() as con:
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
        self._detach(retired)
        for staged, _ in batch:
            self.discard_staged(staged)
        shutil.rmtree(stage, ignore_errors=True)

    def _place(self, moves) -> None:
        """Record the destinations as write intents (committed first), then rename the staged files
        into their table folders: a crash in between leaves only files the intents name."""
        if not moves:
            return
        with self.engine.begin() as con:
            con.execute(write_intents.insert(), [{"path": path, "kind": "file", "created_at": catalog.now()}
                                                 for path in _intent_paths(moves)])
        for staged, relative, _, _ in moves:
            (self.root / relative).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, self.root / relative)
            self._link(relative)

    def _link(self, relative: Path | str) -> bool:
        """Give a file of a table folder its _files/ link (see FILES); False where the file system
        has no hard links (readers then read the table folder path)."""
        link = self.root / FILES / relative
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.exists():
                return True
            os.link(self.root / relative, link)
            return True
        except OSError:
            return False

    def _detach(self, retired: list[str]) -> None:
        """Take retired files out of their table folders (their _files/ links keep them readable for
        views bound before, until repair deletes them); a file that cannot be linked stays."""
        for path in retired:
            tree = self.root / path
            if tree.is_file() and not tree.is_symlink() and self._link(path):
                tree.unlink()

    def _stage(self, stage: Path, relative: Path, name: str, table: pa.Table) -> Path:
        """Write `table` under `stage`; returns the file's path relative to the root, which is
        `relative` with the schema mark (see current_schema_mark) when its columns are today's."""
        spec = schema.tables()[name]
        table = table.select(spec.file_schema.names)
        if _same_columns(table.schema, spec.file_schema):
            relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        # dictionaries for the text columns only: building one for every number (a dictionary page
        # per column, all its values hashed) cost a fifth of the metrics table's write; kwh compact
        # rewrites the files with every column's dictionary
        text = [f.name for f in table.schema if _stored_type(f.type) == pa.string()]
        _write_parquet(stage / relative, name, [table], table.schema, INGEST_COMPRESSION, dictionary=text)
        return relative

    def _stage_chunks(self, stage: Path, relative: Path, name: str, chunks) -> Path:
        """Like _stage, for a stream of tables that already have the table's file columns."""
        relative = relative.with_name(f"{relative.stem}.{current_schema_mark(name)}.parquet")
        _write_parquet(stage / relative, name, chunks, schema.tables()[name].file_schema)
        return relative

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

    def compact(self) -> list[str]:
        """Merge the files of each (table, model, gpu) partition into one; rows are unchanged.

        Call inside writer(). The new file and the old files' retirement commit in one catalog
        transaction; the old files stay on disk for readers of the previous view until a later writer
        finds them retired for longer than RETIRE_GRACE."""
        merged = []
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        with self._read() as con:
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
                                          _chunks([self.read_path(p) for p in sorted(paths)], spec.file_schema))
            runs = tuple(sorted(set().union(*(runs_of.get(p, set()) for p in paths))))
            moves.append((stage / relative, relative, name, runs))
            retired.extend(paths)
            merged.append(f"{folder}: {len(paths)} files into 1")
        if not moves:
            return merged
        self._place(moves)
        with self.engine.begin() as con:
            self._swap_files(con, retired, moves)
            catalog.bump_generation(con)
        self._detach(retired)
        shutil.rmtree(stage, ignore_errors=True)
        return merged

    def commit_rollup(self, tables: dict[tuple[str, str], pa.Table], coverage: dict[str, tuple[str, int] | None],
                      drop_days: dict[str, list[str]] | None = None) -> None:
        """Replace the rollup files of the given (table, day)s and record which runs each day now
        covers, all or nothing.

        Call inside writer(). coverage: day -> (runs_hash, number of runs), None for a day no run has
        any more. drop_days: days whose rollup rows no longer exist, per table."""
        txn = uuid.uuid4().hex[:12]
        stage = self.session_dir / txn
        moves = []
        for (name, day), table in sorted(tables.items()):
            relative = Path(name) / f"day={day}" / f"{txn}.parquet"
            relative = self._stage(stage, relative, name, schema.conform(name, table))
            moves.append((stage / relative, relative, name, day))
        self._place(moves)
        replaced = [(name, day) for _, _, name, day in moves] + [
            (name, day) for name, days in (drop_days or {}).items() for day in days]
        retired: list[str] = []
        with self.engine.begin() as con:
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
        self._detach(retired)
        shutil.rmtree(stage, ignore_errors=True)

    def remove_runs(self, run_ids: list[str]) -> None:
        """Take runs out of the warehouse in one transaction: their files are retired (files they
        share with other runs are rewritten without them) and their source files forgotten, so
        ingesting those again brings the runs back. Call inside writer()."""
        if run_ids:
            self.commit_many([], tuple(run_ids))

    def rollup_coverage(self) -> dict[str, str]:
        """day -> runs_hash of the runs each day's rollup rows were computed from."""
        with self._read() as con:
            return catalog.rollup_coverage(con)

    def rollup_days(self) -> dict[str, list[str]]:
        with self._read() as con:
            out: dict[str, list[str]] = {}
            for name, day in con.execute(sa.select(catalog_rollup_files.c.table_name, catalog_rollup_files.c.day)):
                out.setdefault(name, []).append(day)
            return out

    def run_identities(self) -> dict[str, str]:
        """run_id -> its identity (catalog.run_identities): what kwh rollup compares with what each
        day's rollup covered."""
        with self._read() as con:
            return catalog.run_identities(con)

    def has_leftovers(self) -> bool:
        """Whether an interrupted writer left work to undo (repair() does), or warehouse.duckdb is
        stale: what even an ingest with nothing new must fix."""
        if not self.exists:
            return False
        with self._read() as con:
            if con.execute(sa.select(sa.func.count()).select_from(write_intents)).scalar():
                return True
        from kwarehouse.store import publish
        return publish.is_stale(self)

    def repair(self) -> list[str]:
        """Undo what an interrupted writer left (its staging folder, files it meant to commit) and
        delete retired files older than RETIRE_GRACE that no published view names. Call under the
        writer lock: every intent then belongs to a dead writer."""
        from kwarehouse.store import publish
        repairs = []
        with self._read() as con:
            intents = list(con.execute(sa.select(write_intents.c.path, write_intents.c.kind)))
            known = set(con.execute(sa.select(catalog_parquet.c.path)).scalars())
            known |= set(con.execute(sa.select(catalog_rollup_files.c.path)).scalars())
            retired = dict(con.execute(sa.select(catalog_retired.c.path, catalog_retired.c.retired_at)).all())
        staged_files = 0
        for path, kind in intents:
            target = self.root / path
            if kind == "staging" and target.is_dir() and not target.is_symlink():
                staged_files += sum(1 for p in target.rglob("*") if p.is_file())
                shutil.rmtree(target, ignore_errors=True)
            elif (kind == "file" and path not in known and path.removeprefix(f"{FILES}/") not in known
                  and target.is_file() and not target.is_symlink()):
                target.unlink()
                if not path.startswith(f"{FILES}/"):
                    repairs.append(f"removed {path}: written by an interrupted ingest and never committed")
        if staged_files:
            repairs.append(f"removed {staged_files} staged file(s) of an interrupted ingest")
        if intents:
            with self.engine.begin() as con:
                con.execute(write_intents.delete().where(write_intents.c.path.in_([p for p, _ in intents])))
        self._detach([p for p in retired if (self.root / p).is_file()])   # a crash after their commit
        with self.engine.connect() as con:      # the clock they were retired on, not this writer's
            now = catalog.clock(con) if retired else None
        expired = [p for p, at in retired.items() if now - at > RETIRE_GRACE]
        if expired:
            # warehouse.duckdb may still name them (its last rebuild failed): rebuild it first, and
            # keep them while it cannot be rebuilt
            publish.publish_if_stale(self)
            if publish.is_stale(self):
                return repairs
            with self.engine.begin() as con:
                con.execute(catalog_retired.delete().where(catalog_retired.c.path.in_(expired)))
            for path in expired:
                for target in (self.root / path, self.root / FILES / path):
                    if not target.is_symlink():
                        target.unlink(missing_ok=True)
        return repairs

    # -- reading ---------------------------------------------------------------------------------
    def view_sql(self, snapshot: Snapshot | None = None) -> list[str]:
        """CREATE VIEW statements exposing every table over exactly the committed Parquet files of
        one catalog snapshot. Files that went missing are left out (kwh check reports them)."""
        snapshot = snapshot or self.snapshot()
        statements = []
        for name, spec in schema.tables().items():
            relative_of = {self.read_path(p): Path(p) for p in snapshot.files.get(name, [])}
            files = [f for f in relative_of if f.exists()]
            columns = ", ".join(f'"{c}"' for c, _ in spec.sql_types)
            typed = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in spec.sql_types)
            if not files:
                statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {typed} WHERE false')
                continue
            hive_types = ", ".join(f"'{c}': {dict(spec.sql_types)[c]}" for c in spec.partition_columns)
            mark = f".{current_schema_mark(name)}.parquet"
            # Files in folders whose names abbreviate the model or GPU (long or odd names) get the
            # real names from the catalog, one read per such folder.
            renamed: dict[Path, dict[str, str]] = {}
            plain = []
            for f in files:
                real = _real_names(relative_of[f], snapshot.names)
                if real:
                    renamed.setdefault(f.parent, real)
                else:
                    plain.append(f)
            current = [f for f in plain if f.name.endswith(mark)]
            older = [f for f in plain if not f.name.endswith(mark)]
            # Files with today's columns are read as one schema: DuckDB then opens only the first
            # file's footer to bind the view. Older files (written before a column was added; kwh
            # renormalize rewrites them) need union_by_name, which reads every footer, on every bind.
            sources = [f"SELECT * FROM read_parquet([{', '.join(sql_string(str(f)) for f in group)}], "
                       f"hive_partitioning = true, union_by_name = {str(by_name).lower()}, "
                       f"hive_types = {{{hive_types}}})"
                       for group, by_name in ((current, False), (older, True)) if group]
            for folder, real in sorted(renamed.items()):
                group = [f for f in files if f.parent == folder]
                replace = ", ".join(f'{sql_string(v)} AS "{k}"' for k, v in sorted(real.items()))
                sources.append(f"SELECT * REPLACE ({replace}) FROM read_parquet("
                               f"[{', '.join(sql_string(str(f)) for f in group)}], hive_partitioning = true, "
                               f"union_by_name = true, hive_types = {{{hive_types}}})")
            # The empty typed row set first, so old files' missing columns read as NULL of their type.
            statements.append(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {columns} FROM '
                              f'(SELECT {typed} WHERE false UNION ALL BY NAME '
                              f'{" UNION ALL BY NAME ".join(sources)})')
        return statements

    def missing_files(self, snapshot: Snapshot | None = None) -> list[str]:
        """Committed files that are not on disk (kwh check --repair takes their runs out)."""
        snapshot = snapshot or self.snapshot()
        return [p for paths in snapshot.files.values() for p in paths if not self.read_path(p).exists()]

    def refresh_published_if_free(self) -> None:
        """Rebuild a stale warehouse.duckdb (a moved or copied warehouse, a failed rebuild) when no
        writer is busy and the folder is writable; otherwise leave it to the next writer. Readers
        call this, so a moved warehouse opens in the DuckDB shell after any kwh command."""
        from kwarehouse.store import publish
        try:
            if self.session_dir is not None or not publish.is_stale(self) or self.copy_problem():
                return      # a copy of the folder never writes the catalog it shares, readers' publishing included
            self.refuse_links()
            with open(self.root / ".kwh.lock", "a+") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return
                try:
                    self.engine
                    publish.publish_if_stale(self)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except (OSError, KwhError, sa.exc.DatabaseError):
            return     # read-only, busy, or full: readers answer from their own in-memory views

    def connect(self) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with every warehouse table as a view."""
        if not self.catalog_url and self.session_dir is None:
            # warehouse.duckdb current by the default catalog, read with sqlite3 (fast_read): the same
            # answer as below without a catalog round trip through SQLAlchemy
            from kwarehouse.store import fast_read
            published = fast_read.connect(self.root)
            if published is not None:
                return published
        self.refresh_published_if_free()
        snapshot = self.snapshot()
        missing = self.missing_files(snapshot)
        if missing:
            print(f"kwh: warning: {len(missing)} committed file(s) of {self.root} are missing (first: {missing[0]}); "
                  "their rows are left out of every answer: run kwh check", file=sys.stderr)
        if not missing:
            from kwarehouse.store import publish
            published, problem = publish.open_published(self, snapshot)
            if published is not None:
                return published
            if problem is not None and problem.startswith(publish.CHANGED_OUTSIDE):
                # the rebuild above could not run (a writer is busy, the folder is read-only, a session holds it)
                print(f"kwh: warning: {self.duckdb_path.name} was {problem}: DuckDB sessions reading it get other "
                      "answers than kwh, which answers from the catalog; kwh check --repair rebuilds it (open it "
                      "with duckdb -readonly)", file=sys.stderr)
        con = duckdb.connect()
        for statement in self.view_sql(snapshot):
            try:
                con.execute(statement)
            except duckdb.Error as exc:
                con.close()
                raise KwhError(f"{self.root}: a committed Parquet file cannot be read ({first_line(exc)}); "
                               "run kwh check --repair") from None
        _add_reference_tables(con)
        views.create_all(con, self.root)
        views.plan_quickly(con)
        return con

    def publish_if_stale(self) -> bool:
        from kwarehouse.store import publish
        return publish.publish_if_stale(self)

    def refresh_duckdb(self) -> None:
        """Rebuild warehouse.duckdb now (see publish.py)."""
        from kwarehouse.store import publish
        publish.publish(self)


def _subfolders(folder: Path) -> list[Path]:
    """The folders (and links) in `folder`; none when it is missing or not a folder."""
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_symlink() or e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def canonical_root(root: Path | str) -> Path:
    """The warehouse folder by its real path (symlinks, "." and ".." resolved)."""
    return Path(os.path.realpath(root))


def _intent_paths(moves) -> list[str]:
    """The write intents of files being placed: each table-folder path and its _files/ link."""
    return [path for _, relative, _, _ in moves for path in (relative.as_posix(), f"{FILES}/{relative.as_posix()}")]


def _catalog_version(engine: sa.Engine) -> int:
    with engine.connect() as con:
        return int(con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "version")).scalar() or 0)


def _table_relative(relative: Path) -> Path:
    """A file's path from the root without the _files/ prefix its link has."""
    return Path(*relative.parts[1:]) if relative.parts and relative.parts[0] == FILES else relative


def _real_names(relative: Path, names: dict[tuple[str, str], str]) -> dict[str, str]:
    """The real model/GPU of a file whose folder abbreviates them ({} for ordinary folders)."""
    out = {}
    for part in relative.parts[1:-1]:
        key, sep, value = part.partition("=")
        if sep and (key, value) in names:
            out[key] = names[(key, value)]
    return out


def _add_reference_tables(con: duckdb.DuckDBPyConnection) -> None:
    """metric_catalog: every canonical metric with its other names, base unit and meaning;
    gpu_peaks: the published peaks of normalize/gpu_peaks.csv, one row per GPU model and dtype."""
    from kwarehouse.normalize import peaks
    for name, frame in (("metric_catalog", normalize.metric_catalog()), ("gpu_peaks", peaks.peak_frame())):
        con.register(f"{name}_rows", frame.to_arrow())
        con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM "{name}_rows"')
        con.unregister(f"{name}_rows")


@functools.cache
def current_schema_mark(table: str) -> str:
    """A short hash of a table's file columns and types, put in the names of the Parquet files
    written with exactly those columns ("<run>-<txn>.s1a2b3c4d.parquet"), so views can read them
    without opening every file to compare schemas."""
    text = ";".join(f"{f.name}:{f.type}" for f in schema.tables()[table].file_schema)
    return "s" + hashlib.sha256(text.encode()).hexdigest()[:8]


def _write_parquet(path: Path, name: str, tables, file_schema: pa.Schema, compression: str = "zstd",
                   dictionary: bool | list[str] = True) -> None:
    """Write `tables` (an iterable) into one Parquet file (zstd unless told; dictionary: pyarrow's
    use_dictionary); clustered tables (CLUSTER_ORDER) are sorted per table and cut into small row groups."""
    order = CLUSTER_ORDER.get(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    # string_view columns (polars' strings handed over without a copy; only in tables of flat strings and
    # numbers) are stored as plain strings, without the Arrow schema that would make pyarrow read them
    # back as views: every reader then sees the file as if it had been written from strings
    views = any(f.type == pa.string_view() for f in file_schema)
    with pq.ParquetWriter(path, file_schema, compression=compression, store_schema=not views,
                          use_dictionary=dictionary) as writer:
        for table in tables:
            if order and not _in_order(table, order):
                table = _taken(table, _cluster_indices(table, order))
            writer.write_table(table, row_group_size=CLUSTERED_ROW_GROUP_ROWS if order else None)


def _taken(table: pa.Table, indices) -> pa.Table:
    """table.take(indices), also for string_view columns, which Arrow's take does not handle: they go
    through plain strings and back. A batch's table comes in order but for one case: two runs of one
    model and GPU in one batch (the corpus's two gpt2 reports), whose rows are ordered run by run."""
    views = [f.name for f in table.schema if f.type == pa.string_view()]
    if not views:
        return table.take(indices)
    plain = pa.schema([f.with_type(pa.string()) if f.name in views else f for f in table.schema])
    return table.cast(plain).take(indices).cast(table.schema)


def _in_order(table: pa.Table, order: tuple[str, ...]) -> bool:
    """Whether the rows are sorted by `order` already, ascending, without nulls in those columns (an
    ingest builds its metrics rows so): a comparison of each row with the next, far cheaper than the
    sort and the take it saves."""
    rows = table.num_rows
    if rows < 2:
        return True
    before = equal = None
    for column in order:
        values = table.column(column)
        if values.null_count:
            return False
        this, following = values.slice(0, rows - 1), values.slice(1)
        less, same = pc.less(this, following), pc.equal(this, following)
        before = less if before is None else pc.or_(before, pc.and_(equal, less))
        equal = same if equal is None else pc.and_(equal, same)
    return pc.all(pc.or_(before, equal)).as_py()


def _cluster_indices(table: pa.Table, order: tuple[str, ...]):
    """The row order of table.sort_by(order), ascending: each key column is replaced by its rank
    among its distinct values and the ranks are packed into one integer, whose sort costs a fraction
    of a multi-column sort on strings. Falls back to Arrow's sort where the ranks do not fit 63 bits
    or a key has nulls."""
    import polars as pl
    keys = pl.from_arrow(table.select(list(order)))
    packed, bits = None, 0
    for column in order:
        values = keys[column]
        if values.null_count():
            return pc.sort_indices(table, [(c, "ascending") for c in order])
        distinct = values.unique().sort()
        width = max(1, (distinct.len() - 1).bit_length())
        rank = values.replace_strict(distinct, pl.int_range(distinct.len(), dtype=pl.Int64, eager=True),
                                     return_dtype=pl.Int64)
        packed = rank if packed is None else packed * (1 << width) + rank
        bits += width
        if bits > 63:
            return pc.sort_indices(table, [(c, "ascending") for c in order])
    order = pl.DataFrame({"_key": packed}).with_row_index("_row").sort("_key", maintain_order=True)
    return order["_row"].to_arrow()


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


def _conformed(name: str, table: pa.Table) -> pa.Table:
    """schema.conform, skipped (but for its NULL check) where the table has the exact columns already."""
    spec = schema.tables()[name]
    if not _same_columns(table.schema, spec.arrow) or any(table.column(c).null_count for c in spec.not_null):
        return schema.conform(name, table)
    return table


def _same_columns(one: pa.Schema, other: pa.Schema) -> bool:
    """Same names and types, string_view counting as string (it is written as one: see _write_parquet)."""
    return one.names == other.names and all(_stored_type(a.type) == _stored_type(b.type) for a, b in zip(one, other))


def _stored_type(arrow_type: pa.DataType) -> pa.DataType:
    return pa.string() if arrow_type == pa.string_view() else arrow_type


def _with_partitions(table: pa.Table, relative: Path, real: dict[str, str] | None = None) -> pa.Table:
    """Add the hive partition columns a Parquet file's directory names (relative to the root) carry;
    `real` gives the real values of those a folder name abbreviates."""
    spec = schema.tables()[relative.parts[0]]
    for part in relative.parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            if key in spec.partition_columns:
                field = spec.arrow.field(key)
                column = pa.array([(real or {}).get(key, unquote(value))] * table.num_rows, pa.string())
                table = table.append_column(key, column.cast(field.type) if field.type != pa.string() else column)
    return table


def _with_columns_of(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `target`: a file written before a column was added to the
    schema gets it as nulls (`kwh renormalize` then fills it)."""
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in target]
    return pa.table({f.name: c for f, c in zip(target, columns)})
