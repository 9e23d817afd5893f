"""The catalog: which runs, source files and Parquet files the warehouse holds (SQLAlchemy, so SQLite
or PostgreSQL), and the identity that ties a catalog to its warehouse folder.

Why an identity: the catalog is the only proof of which Parquet files kwh committed. A missing, empty
or foreign catalog (a moved catalog.sqlite, a misspelt --catalog database, a cron job that forgot
KWH_CATALOG) must never look like a new warehouse: a writer would then treat every committed file as
garbage. So a warehouse folder carries warehouse.json with a random id, its catalog carries the same
id, and kwh refuses to read or write when they disagree or one is missing.

A warehouse folder is one warehouse; folders.py keeps a copy of the folder from writing the
catalog its original writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from kwarehouse import schema
from kwarehouse.errors import KwhError, first_line
# (layout.py holds CATALOG_VERSION's history: fast_read.py reads both without SQLAlchemy)
from kwarehouse.store.layout import CATALOG_VERSION, IDENTITY_FILE


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
    # bytes read: a later, longer file at the same path whose first `size` bytes hash to sha256
    # is the complete version of a file that was ingested while still being copied
    sa.Column("size", sa.BigInteger, nullable=True),
)
# Captures that legitimately hold no CUDA data (nsys of a CPU-only run, a trace without GPU events,
# an ncu run that profiled no kernel), by content: nothing of them is stored, and later ingests skip
# them ("already ingested (nothing to store: <reason>)") instead of failing on them every time.
catalog_empty_files = sa.Table(
    "empty_files", _meta,
    sa.Column("sha256", sa.String, primary_key=True),
    sa.Column("path", sa.String, nullable=False),             # where it was first found
    sa.Column("format", sa.String, nullable=False),           # the reader that recognised it, or "ncu-log"
    sa.Column("reason", sa.String, nullable=False),           # why there is nothing to store, and what to do
    sa.Column("size", sa.BigInteger, nullable=True),
    sa.Column("recorded_at", sa.DateTime, nullable=False),
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
# read: deleted by a later writer once Settings.retire_grace has passed.
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
# Which runs each day's rollup rows were computed from: kwh rollup recomputes exactly the days whose
# runs (added, taken out, replaced) differ from what their rollup covered, whatever any writer's
# clock said when it committed (issue 32). runs_hash: see runs_hash().
catalog_rollup_coverage = sa.Table(
    "rollup_coverage", _meta,
    sa.Column("day", sa.String, primary_key=True),
    sa.Column("runs_hash", sa.String, nullable=False),
    sa.Column("runs", sa.Integer, nullable=False),
)
# The commit that last wrote each run's rows: a random id that every commit of the run (an ingest, a
# re-ingest that replaces it, kwh renormalize) changes and kwh compact, which only moves its rows
# between files, does not.
catalog_run_commits = sa.Table(
    "run_commits", _meta,
    sa.Column("run_id", sa.String, primary_key=True),
    sa.Column("commit_id", sa.String, nullable=False),
)
catalog_rollup_state = sa.Table(
    "rollup_state", _meta,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("value", sa.String, nullable=False),
)
# What a writer is about to create, recorded (and committed) before the first byte is written: the
# only files kwh ever deletes as "never committed" are the ones listed here. kind "staging": a
# writer's private folder under _staging/; kind "file": a Parquet file being moved into a table folder.
write_intents = sa.Table(
    "write_intents", _meta,
    sa.Column("path", sa.String, primary_key=True),           # relative to the warehouse root
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("created_at", sa.DateTime, nullable=False),
)
# The folders that write or wrote the catalog when it is outside the warehouse folder: one "current"
# (whose seal the folder must hold to write), refused "copy" folders, and "displaced" folders that were
# current until `kwh attach --moved` in another one. A catalog created before this table gets it from
# create_or_upgrade's create_all, as empty_files came.
catalog_folders = sa.Table(
    "warehouse_folders", _meta,
    sa.Column("host", sa.String, primary_key=True),
    sa.Column("path", sa.String, primary_key=True),
    sa.Column("role", sa.String, nullable=False),            # current, copy or displaced
    sa.Column("seal", sa.String, nullable=True),             # the current folder's
    sa.Column("seen_at", sa.DateTime, nullable=False),
)


def tables() -> list[sa.Table]:
    """Every catalog table, each after the tables it refers to (kwh detach copies them in this order)."""
    return list(_meta.sorted_tables)


def database_error(where: str, exc: Exception) -> KwhError:
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


def engine_url(url: str) -> str:
    """postgresql://... uses the psycopg (3) driver unless the URL names one."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def clock(con: sa.Connection) -> datetime:
    """The catalog's clock (UTC): what the retire grace is measured on, so that a writer whose own
    clock is off (a second host, an NTP step) neither deletes files early nor keeps them for ever.

    PostgreSQL: the server's clock. SQLite: the clock of the file system holding catalog.sqlite, read
    as the time it stamps on a file touched there (on a network share the server's, as PostgreSQL's);
    a writer process's clock (catalog.now) never enters it. Falls back to now() for a catalog with no
    file (sqlite://) or a folder that cannot be written."""
    if con.dialect.name == "postgresql":
        return con.execute(sa.text("SELECT timezone('UTC', clock_timestamp())")).scalar()
    database = con.engine.url.database if con.dialect.name == "sqlite" else None
    if database and database != ":memory:" and not database.startswith("file:"):
        stamp = Path(database).with_name(f".{Path(database).name}.clock")
        try:
            stamp.touch()
            os.utime(stamp)     # times=None: the file system's "now" (NFS: the server's)
            return datetime.fromtimestamp(stamp.stat().st_mtime_ns / 1e9, UTC).replace(tzinfo=None)
        except OSError:
            pass
    return now()


def record_commits(con: sa.Connection, run_ids: list[str], commit_id: str) -> None:
    """Give runs just committed a new commit id (see catalog_run_commits)."""
    if run_ids:
        con.execute(catalog_run_commits.delete().where(catalog_run_commits.c.run_id.in_(run_ids)))
        con.execute(catalog_run_commits.insert(), [{"run_id": r, "commit_id": commit_id} for r in run_ids])


def forget_commits(con: sa.Connection, run_ids: list[str]) -> None:
    if run_ids:
        con.execute(catalog_run_commits.delete().where(catalog_run_commits.c.run_id.in_(run_ids)))


def run_identities(con: sa.Connection) -> dict[str, str]:
    """run_id -> what changes whenever the run's rows change: its commit id and its updated_at (the
    latter for runs an older kwh committed, which records no commit id). Compared for equality only,
    never ordered, so no clock decides whether a run is new."""
    commits = dict(con.execute(sa.select(catalog_run_commits.c.run_id, catalog_run_commits.c.commit_id)).all()) \
        if sa.inspect(con).has_table(catalog_run_commits.name) else {}
    return {run_id: f"{commits.get(run_id, '')}@{updated_at.isoformat()}"
            for run_id, updated_at in con.execute(sa.select(catalog_runs.c.run_id, catalog_runs.c.updated_at))}


def runs_hash(identities: list[tuple[str, str]]) -> str:
    """One day's runs as one value: a hash of its sorted (run_id, identity) pairs."""
    return hashlib.sha256(json.dumps(sorted(identities)).encode()).hexdigest()


def rollup_coverage(con: sa.Connection) -> dict[str, str]:
    """day -> runs_hash of the runs its rollup rows were computed from ({} on a catalog no writer of
    this kwh has opened yet)."""
    if not sa.inspect(con).has_table(catalog_rollup_coverage.name):
        return {}
    return dict(con.execute(sa.select(catalog_rollup_coverage.c.day, catalog_rollup_coverage.c.runs_hash)).all())


def describe(url: str | None, root: Path) -> str:
    """How a catalog is named in messages (no password)."""
    if url is None:
        return str(root / "catalog.sqlite")
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def read_folder_id(root: Path) -> str | None:
    """The id in <root>/warehouse.json, or None when there is none."""
    path = root / IDENTITY_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KwhError(f"{path}: cannot read the warehouse identity ({exc}); restore it from a backup") from None
    try:
        value = json.loads(text)["warehouse_id"]
        if not isinstance(value, str) or not value:
            raise ValueError
        return value
    except (ValueError, KeyError, TypeError):
        raise KwhError(f"{path}: not a kwh warehouse identity (expected {{\"warehouse_id\": ...}}); "
                       "restore it from a backup") from None


def write_folder_id(root: Path, warehouse_id: str) -> None:
    """Write warehouse.json atomically (a reader never sees half of it)."""
    path = root / IDENTITY_FILE
    partial = root / f".{IDENTITY_FILE}.{uuid.uuid4().hex[:8]}"
    partial.write_text(json.dumps({"warehouse_id": warehouse_id, "created_at": now().isoformat(),
                                   "note": "kwh warehouse identity: its catalog holds the same id"}, indent=1)
                       + "\n", encoding="utf-8")
    os.replace(partial, path)


def folder_has_data(root: Path) -> bool:
    """Whether `root` holds what a kwh writer leaves: table folders, warehouse.duckdb, staging."""
    if not root.is_dir():
        return False
    names = [*schema.tables(), "_staging", "_files", "warehouse.duckdb"]
    return any((root / name).exists() for name in names)


def catalog_state(engine: sa.Engine) -> tuple[bool, str | None, int]:
    """(has kwh's tables, warehouse id or None, number of runs)."""
    inspector = sa.inspect(engine)
    if not inspector.has_table("catalog_info"):
        return False, None, 0
    with engine.connect() as con:
        info = dict(con.execute(sa.select(catalog_info.c.key, catalog_info.c.value)).all())
        runs = con.execute(sa.select(sa.func.count()).select_from(catalog_runs)).scalar() \
            if inspector.has_table("runs") else 0
    return True, info.get("warehouse_id"), int(runs or 0)


def create_or_upgrade(engine: sa.Engine, root: Path) -> None:
    """Create the catalog tables, or upgrade an older catalog (versioned migrations)."""
    _meta.create_all(engine)
    with engine.begin() as con:
        version = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "version")).scalar()
        if version is None:
            con.execute(catalog_info.insert().values(key="version", value=str(CATALOG_VERSION)))
            return
        if int(version) > CATALOG_VERSION:
            raise KwhError(f"{root}: catalog version {version} is newer than this kwh understands "
                           f"({CATALOG_VERSION}); upgrade kwarehouse")
        if int(version) < 2:
            # version 1 kept one run per file in parquet_files.run_id
            con.execute(catalog_parquet_runs.insert().from_select(
                ["path", "run_id"], sa.select(catalog_parquet.c.path, catalog_parquet.c.run_id)))
        if int(version) < 3:
            columns = {c["name"] for c in sa.inspect(con).get_columns("ingested_files")}
            if "size" not in columns:
                con.execute(sa.text("ALTER TABLE ingested_files ADD COLUMN size BIGINT"))
        if int(version) < CATALOG_VERSION:
            con.execute(catalog_info.update().where(catalog_info.c.key == "version")
                        .values(value=str(CATALOG_VERSION)))


def set_warehouse_id(con: sa.Connection, warehouse_id: str) -> None:
    con.execute(catalog_info.insert().values(key="warehouse_id", value=warehouse_id))


def bump_generation(con: sa.Connection) -> None:
    """Every commit changes the generation: warehouse.duckdb records the one it was built from, so
    any writer can tell that it is stale."""
    current = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "generation")).scalar()
    if current is None:
        con.execute(catalog_info.insert().values(key="generation", value="1"))
    else:
        con.execute(catalog_info.update().where(catalog_info.c.key == "generation")
                    .values(value=str(int(current) + 1)))


def generation(con: sa.Connection) -> int:
    value = con.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "generation")).scalar()
    return int(value or 0)


# One statement, so one snapshot on every database: each committed Parquet file with its table,
# and the model and GPU of a run it holds (the real names, which long or odd names' folders only
# abbreviate).
SNAPSHOT_QUERY = sa.union_all(
    sa.select(catalog_parquet.c.path, catalog_parquet.c.table_name, catalog_runs.c.model, catalog_runs.c.gpu,
              sa.null().label("generation"))
    .select_from(catalog_parquet.outerjoin(catalog_runs, catalog_runs.c.run_id == catalog_parquet.c.run_id)),
    sa.select(catalog_rollup_files.c.path, catalog_rollup_files.c.table_name, sa.null(), sa.null(),
              sa.null()),
    # a row even for an empty catalog, to carry the generation
    sa.select(sa.null(), sa.null(), sa.null(), sa.null(), catalog_info.c.value)
    .where(catalog_info.c.key == "generation"),
)


def empty_captures(con: sa.Connection) -> dict[str, str]:
    """sha256 -> reason of every capture recorded as holding nothing to store ({} on a catalog no
    writer of this kwh has opened yet, which has no such table)."""
    if not sa.inspect(con).has_table(catalog_empty_files.name):
        return {}
    return dict(con.execute(sa.select(catalog_empty_files.c.sha256, catalog_empty_files.c.reason)).all())


def record_empty(con: sa.Connection, captures: list[dict]) -> None:
    """Record captures with nothing to store (dicts of the table's columns but recorded_at); one
    recorded already, by this ingest or another, keeps its first record."""
    shas = list(dict.fromkeys(c["sha256"] for c in captures))
    known = set(con.execute(sa.select(catalog_empty_files.c.sha256)
                            .where(catalog_empty_files.c.sha256.in_(shas))).scalars())
    new = {c["sha256"]: c for c in captures if c["sha256"] not in known}
    if new:
        con.execute(catalog_empty_files.insert(), [{**c, "recorded_at": now()} for c in new.values()])


