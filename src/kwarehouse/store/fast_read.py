"""The read path of kwh sql / kwh query without SQLAlchemy, polars or pyarrow: when the default
catalog (catalog.sqlite) says that warehouse.duckdb is exactly the published snapshot, attach it
READ_ONLY and answer from it.

Why a second path: importing SQLAlchemy, polars and pyarrow and verifying the catalog through them
cost more than the query itself (kwh sql "select 1" took 1.5 s). This module reads the catalog with
the standard library's sqlite3 (mode=ro, as the SQLAlchemy reader does, so a read-only warehouse
works) and imports only duckdb. It answers only in the plain case; anything else (no catalog, a
PostgreSQL catalog, an identity that does not match, an older catalog version, a stale or missing
warehouse.duckdb, a WAL beside it, a file whose tables and views are not what kwh published, a
committed file missing on disk) returns None, and the caller takes the full path
(store.Warehouse.connect), which rebuilds, warns or raises as it always did.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
from importlib import resources
from pathlib import Path
from urllib.parse import quote

# catalog.py's CATALOG_VERSION and IDENTITY_FILE (catalog.py imports SQLAlchemy; a test keeps them equal)
CATALOG_VERSION = 3
IDENTITY_FILE = "warehouse.json"
PUBLISHED_KEY = "published"
FILES = "_files"
# How long a reader waits for a writer's catalog transaction (store.CATALOG_BUSY_SECONDS).
CATALOG_BUSY_SECONDS = 120

# Every committed file: Parquet files of runs and of the daily rollups (store.Warehouse.snapshot).
COMMITTED_FILES_SQL = "SELECT path FROM parquet_files UNION ALL SELECT path FROM rollup_files"


def definitions(warehouse_root: Path) -> str:
    """A hash of everything kwh puts in warehouse.duckdb besides the data: the table schema, every
    view's SQL, the reference tables and thresholds (the warehouse's own overrides included), the
    peaks and the metric catalog. A kwh upgrade that changes any of them makes the published file stale."""
    from kwarehouse import views
    digest = hashlib.sha256(_packaged_definitions().encode())
    digest.update(repr(views.thresholds(warehouse_root)).encode())
    return digest.hexdigest()[:16]


@functools.cache
def _packaged_definitions() -> str:
    """The packaged part of definitions(), from the files themselves: the metric catalog and the
    peaks are hashed as the CSV files (and the code) they are built from, so no polars is loaded."""
    from kwarehouse import views
    package = Path(__file__).parents[1]      # src/kwarehouse (this module lives in store/)
    digest = hashlib.sha256(resources.files("kwarehouse").joinpath("schema.sql").read_bytes())
    for view in views.creation_order():
        digest.update(f"\0{view.name}\0{view.sql}".encode())
    digest.update(repr(sorted(views.reference_tables().items())).encode())
    for name in ("metric_catalog.csv", "gpu_peaks.csv", "peaks.py"):
        digest.update(b"\0" + (package / "normalize" / name).read_bytes())
    return digest.hexdigest()


def file_stat(path: Path) -> list[int] | None:
    """(size, mtime_ns) of a file as publish records it, or None when it does not exist."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return [info.st_size, info.st_mtime_ns]


def folder_id(root: Path) -> str | None:
    """The id in <root>/warehouse.json; None when it is missing or unreadable (the full path then
    says why)."""
    try:
        value = json.loads((root / IDENTITY_FILE).read_text(encoding="utf-8"))["warehouse_id"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, str) and value else None


def read_catalog(root: Path) -> tuple[dict[str, str], list[str]] | None:
    """(catalog_info, every committed file) of catalog.sqlite, read in one transaction; None when
    there is no such catalog or it cannot be read."""
    path = root / "catalog.sqlite"
    if not path.is_file():
        return None
    try:
        # mode=ro: works on a read-only warehouse and never creates the file
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=CATALOG_BUSY_SECONDS,
                              isolation_level=None)
        try:
            con.execute("BEGIN")       # one read transaction: the info and the files of one commit
            info = {key: value for key, value in con.execute("SELECT key, value FROM catalog_info")}
            files = [row[0] for row in con.execute(COMMITTED_FILES_SQL)]
            con.execute("COMMIT")
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return info, files


def read_path(root: Path, relative: str) -> Path:
    """store.Warehouse.read_path: a committed file's _files/ link, else its table folder path."""
    link = root / FILES / relative
    return link if link.exists() else root / relative


# The start of every problem that means someone other than kwh changed warehouse.duckdb (readers
# warn about those: the DuckDB shell's answers then differ from kwh's).
CHANGED_OUTSIDE = "changed outside kwh"
OWN_TAG = "kwh: rebuilt by kwh after every commit; open this file with duckdb -readonly"
PUBLISHED_FILE = "warehouse.duckdb"
# Every table and view in a DuckDB database, with what defines it: a view's SQL; a table's columns
# and its row count (a user who deletes gpu_peaks rows changes what the views answer).
_OBJECTS_SQL = ("SELECT 'view', view_name, sql FROM duckdb_views() WHERE database_name = $1 AND NOT internal "
                "UNION ALL SELECT 'table', table_name, sql || ' -- rows ' || CAST(estimated_size AS VARCHAR) "
                "FROM duckdb_tables() WHERE database_name = $1 AND NOT internal")
# ...and what readers and writers compare instead: each object's DuckDB comment. Writing out the
# views' SQL costs DuckDB ~1 ms per view (~40 ms for the file); reading comments costs nothing.
# kwh comments each of its objects with OWN_TAG, and DuckDB drops the comment of a view or table
# that is created again (CREATE OR REPLACE), so a redefined object has none.
_TAGS_SQL = ("SELECT 'view', view_name, coalesce(comment, '') FROM duckdb_views() "
             "WHERE database_name = $1 AND NOT internal "
             "UNION ALL SELECT 'table', table_name, coalesce(comment, '') FROM duckdb_tables() "
             "WHERE database_name = $1 AND NOT internal")


def recorded_publish(value) -> dict:
    """What publish recorded in the catalog (catalog_info's "published" value, as text or parsed)."""
    if isinstance(value, dict):
        return value
    try:
        recorded = json.loads(value or "{}")
    except ValueError:
        return {}
    return recorded if isinstance(recorded, dict) else {}


def published_problem(root: Path, recorded, generation: int | None, look_inside: bool = False,
                      thorough: bool = False) -> str | None:
    """Why warehouse.duckdb is not exactly what kwh published (for catalog generation `generation`;
    None: any generation), as one line; None when it is. The one test of "the published file is
    current": fast_read.connect, publish.problem (is_stale), publish.open_published and
    publish._previous all ask it.

    Without look_inside it looks only at the catalog's record and the file's size, mtime and WAL;
    with it, when those agree (or only the size or mtime differ), it also opens the file read-only
    and compares its tables and views, by name and comment (object_tags), with what kwh published
    (a file system with coarse times can keep size and mtime through a change), and names what
    changed ("view kernels redefined"); `thorough` (kwh check) compares the hash of every table's
    and view's definition too (object_digests). attach_published compares the names and comments
    of the file a reader attaches."""
    recorded = recorded_publish(recorded)
    path = root / PUBLISHED_FILE
    stat = file_stat(path)
    if stat is None:
        return "missing"
    if not recorded:
        return "not recorded in the catalog (an older kwh's, or its rebuild failed)"
    if recorded.get("root") != str(root):
        return "built for another folder (a moved or copied warehouse)"
    if Path(f"{path}.wal").exists():
        return f"{CHANGED_OUTSIDE} (a {path.name}.wal beside it: a DuckDB session wrote to it and did not close)"
    if generation is not None and recorded.get("generation") != generation:
        return "older than the catalog"
    if recorded.get("definitions") != definitions(root) or "objects" not in recorded or "tags" not in recorded:
        return "built by another kwh (other view definitions, thresholds or checks)"
    problem = None
    if recorded.get("stat") != stat:
        problem = f"{CHANGED_OUTSIDE} (its size or time is not what kwh published)"
    if look_inside or thorough:
        changes = _changes_inside(path, recorded, thorough)
        if changes:
            return f"{CHANGED_OUTSIDE} ({', '.join(changes)})"
    return problem


def object_digests(con, database: str) -> dict[str, str]:
    """{"view kernels": hash of its SQL, "table gpu_peaks": ..., ...} of one database of `con`."""
    return {f"{kind} {name}": hashlib.sha256(text.encode()).hexdigest()[:16]
            for kind, name, text in con.execute(_OBJECTS_SQL, [database]).fetchall()}


def object_tags(con, database: str) -> dict[str, str]:
    """{"view kernels": its comment (OWN_TAG for kwh's; "" when none), ...}: what readers compare
    (see _TAGS_SQL)."""
    return {f"{kind} {name}": text for kind, name, text in con.execute(_TAGS_SQL, [database]).fetchall()}


def changed_objects(recorded: dict | None, found: dict[str, str]) -> list[str]:
    """What differs between the objects kwh published and those found: "view kernels redefined",
    "view runs dropped", "table my_notes added" (sorted by kind and name within each)."""
    if not isinstance(recorded, dict):
        return []
    return ([f"{key} redefined" for key in sorted(recorded) if key in found and found[key] != recorded[key]]
            + [f"{key} dropped" for key in sorted(recorded) if key not in found]
            + [f"{key} added" for key in sorted(found) if key not in recorded])


def _changes_inside(path: Path, recorded: dict, thorough: bool) -> list[str]:
    """changed_objects of the file at `path`, by comment and (thorough) by definition; [] where it
    cannot be opened (a DuckDB session that writes to it holds it: nothing can be compared, nor
    rebuilt, until it closes)."""
    import duckdb
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return []
    try:
        database = con.execute("SELECT current_database()").fetchall()[0][0]
        changes = changed_objects(recorded.get("tags"), object_tags(con, database))
        if thorough:
            changes += [c for c in changed_objects(recorded.get("objects"), object_digests(con, database))
                        if c not in changes]
        return changes
    except duckdb.Error:
        return []
    finally:
        con.close()


def attach_published(root: Path, recorded) -> tuple[object | None, str | None]:
    """(an in-memory DuckDB connection with warehouse.duckdb attached READ_ONLY and first on the
    search path, None) when its tables and views are those kwh published (the same names, each with
    the comment kwh gave it: object_tags); (None, the problem) when they are not; (None, None) when
    it cannot be attached (a session that writes to it holds it, or it is damaged: the caller builds
    its views in memory). Call it after published_problem found nothing."""
    import duckdb
    recorded = recorded_publish(recorded)
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{str(root / PUBLISHED_FILE).replace(chr(39), chr(39) * 2)}' AS kwh_published (READ_ONLY)")
        changes = changed_objects(recorded.get("tags"), object_tags(con, "kwh_published"))
        if not changes:
            con.execute("SET search_path = 'memory.main,kwh_published.main'")
            from kwarehouse.views import plan_quickly
            plan_quickly(con)
            return con, None
    except duckdb.Error:
        changes = None
    con.close()
    return None, (f"{CHANGED_OUTSIDE} ({', '.join(changes)})" if changes else None)


def connect(root: Path | str):
    """An in-memory DuckDB connection reading warehouse.duckdb's tables and views (attached
    READ_ONLY), when the default catalog of the warehouse at `root` says it is current and every
    committed file is on disk; else None (see the module's docstring)."""
    root = Path(os.path.realpath(root))       # store.canonical_root: the path publish recorded
    identity = folder_id(root)
    if identity is None:
        return None
    read = read_catalog(root)
    if read is None:
        return None
    info, files = read
    if info.get("warehouse_id") != identity or info.get("version") != str(CATALOG_VERSION):
        return None
    recorded = recorded_publish(info.get(PUBLISHED_KEY))
    if published_problem(root, recorded, int(info.get("generation") or 0)) is not None:
        return None
    if any(not read_path(root, relative).exists() for relative in files):
        return None       # the full path warns about them
    con, _ = attach_published(root, recorded)
    return con       # None: a changed, held or damaged file; the full path rebuilds it or says so
