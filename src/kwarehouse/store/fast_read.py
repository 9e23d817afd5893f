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
(store/connect.py), which rebuilds, warns or raises as it always did.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from urllib.parse import quote

from kwarehouse.store.layout import (CATALOG_BUSY_SECONDS, CATALOG_VERSION, CHANGED_OUTSIDE,
                                    IDENTITY_FILE, PUBLISHED_FILE, PUBLISHED_KEY, canonical_root, changed_objects,
                                    object_tags, published_problem, read_path, reader_tags, recorded_publish,
                                    sql_string)

# Every committed file: Parquet files of runs and of the daily rollups (catalog.SNAPSHOT_QUERY).
COMMITTED_FILES_SQL = "SELECT path FROM parquet_files UNION ALL SELECT path FROM rollup_files"


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
        con.execute(f"ATTACH {sql_string(str(root / PUBLISHED_FILE))} AS kwh_published (READ_ONLY)")
        changes = changed_objects(reader_tags(recorded.get("tags")), object_tags(con, "kwh_published", macros=False))
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
    root = canonical_root(root)       # the path publish recorded
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
