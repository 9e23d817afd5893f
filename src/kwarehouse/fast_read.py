"""The read path of kwh sql / kwh query without SQLAlchemy, polars or pyarrow: when the default
catalog (catalog.sqlite) says that warehouse.duckdb is exactly the published snapshot, attach it
READ_ONLY and answer from it.

Why a second path: importing SQLAlchemy, polars and pyarrow and verifying the catalog through them
cost more than the query itself (kwh sql "select 1" took 1.5 s). This module reads the catalog with
the standard library's sqlite3 (mode=ro, as the SQLAlchemy reader does, so a read-only warehouse
works) and imports only duckdb. It answers only in the plain case; anything else (no catalog, a
PostgreSQL catalog, an identity that does not match, an older catalog version, a stale or missing
warehouse.duckdb, a WAL beside it, a committed file missing on disk) returns None, and the caller
takes the full path (store.Warehouse.connect), which rebuilds, warns or raises as it always did.
"""

from __future__ import annotations

import functools
import hashlib
import json
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
    package = Path(__file__).parent
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


def published_is_current(root: Path, info: dict[str, str]) -> bool:
    """Whether warehouse.duckdb is exactly what kwh published for the catalog's generation, with
    today's definitions, untouched since (same size and mtime, no WAL)."""
    try:
        recorded = json.loads(info.get(PUBLISHED_KEY) or "{}")
    except ValueError:
        return False
    if not isinstance(recorded, dict):
        return False
    path = root / "warehouse.duckdb"
    return (recorded.get("generation") == int(info.get("generation") or 0)
            and recorded.get("root") == str(root)
            and recorded.get("stat") is not None and recorded.get("stat") == file_stat(path)
            and not Path(f"{path}.wal").exists()
            and recorded.get("definitions") == definitions(root))


def connect(root: Path | str):
    """An in-memory DuckDB connection reading warehouse.duckdb's tables and views (attached
    READ_ONLY), when the default catalog of the warehouse at `root` says it is current and every
    committed file is on disk; else None (see the module's docstring)."""
    root = Path(root).absolute()
    identity = folder_id(root)
    if identity is None:
        return None
    read = read_catalog(root)
    if read is None:
        return None
    info, files = read
    if (info.get("warehouse_id") != identity or info.get("version") != str(CATALOG_VERSION)
            or not published_is_current(root, info)):
        return None
    if any(not read_path(root, relative).exists() for relative in files):
        return None       # the full path warns about them
    import duckdb
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{str(root / 'warehouse.duckdb').replace(chr(39), chr(39) * 2)}' AS kwh_published (READ_ONLY)")
        con.execute("SET search_path = 'memory.main,kwh_published.main'")
    except duckdb.Error:
        con.close()      # held by a session that writes to it, or damaged: the full path decides
        return None
    return con
