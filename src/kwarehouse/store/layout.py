"""The warehouse folder and its published file, for every module of the store (standard library only,
so fast_read.py, which answers `kwh sql` without SQLAlchemy, polars or pyarrow, shares them).

Layout (root defaults to ./warehouse):
    <table>/model=<m>/gpu=<g>/<run_id>-<txn>.parquet   one file per run and table (committed now)
    _files/<the same paths>                           a hard link to each committed (or retired) file: views read these
    warehouse.json                                    the warehouse's id (its catalog holds the same)
    catalog.sqlite                                    runs, ingested files, committed Parquet files
    warehouse.duckdb                                  views over exactly the committed files (publish.py)
    _staging/<session>/                               a writer's files being written; never read
    _quarantine/                                      what kwh moved aside instead of deleting

And the one test of "the published file is current" (published_problem), which readers (fast_read,
connect), writers (publish) and kwh check all ask.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from importlib import resources
from pathlib import Path
from urllib.parse import quote

# 2: parquet_runs, retired_files, rollup_files, rollup_state
# 3: warehouse_id and generation in catalog_info, ingested_files.size, write_intents
# (empty_files, run_commits and rollup_coverage came without a new version: create_or_upgrade's
# create_all adds them to any catalog a writer opens, and an older kwh sharing the catalog loses
# nothing by not knowing them: runs it commits change their updated_at, which a run's identity includes)
CATALOG_VERSION = 3
IDENTITY_FILE = "warehouse.json"
# catalog_info's key of what publish recorded of warehouse.duckdb
PUBLISHED_KEY = "published"
PUBLISHED_FILE = "warehouse.duckdb"
STAGING = "_staging"
QUARANTINE = "_quarantine"
WRITER_LOCK = ".kwh.lock"
CATALOG_LOCK = ".kwh.catalog.lock"
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
WRITTEN_FOLDERS = (STAGING, FILES, QUARANTINE)
WRITTEN_FILES = (WRITER_LOCK, CATALOG_LOCK)
# How long a command waits for a catalog.sqlite another process holds locked (without --wait).
CATALOG_BUSY_SECONDS = 120
# ...and at least this long with --wait: the threads of one ingest wait for each other's catalog statements.
OWN_BUSY_SECONDS = 10


def canonical_root(root: Path | str) -> Path:
    """The warehouse folder by its real path (symlinks, "." and ".." resolved)."""
    return Path(os.path.realpath(root))


def read_path(root: Path, relative: str | Path) -> Path:
    """Where readers read a committed (or retired) file: its _files/ link, else (a file an older
    kwh wrote, or a file system without hard links) its table folder path."""
    link = root / FILES / relative
    return link if link.exists() else root / relative


def table_relative(relative: Path) -> Path:
    """A file's path from the root without the _files/ prefix its link has."""
    return Path(*relative.parts[1:]) if relative.parts and relative.parts[0] == FILES else relative


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


# -- the published file ----------------------------------------------------------------------------

# The start of every problem that means someone other than kwh changed warehouse.duckdb (readers
# warn about those: the DuckDB shell's answers then differ from kwh's).
CHANGED_OUTSIDE = "changed outside kwh"
OWN_TAG = "kwh: rebuilt by kwh after every commit; open this file with duckdb -readonly"
# Every table, view and macro in a DuckDB database, with what defines it: a view's SQL; a table's
# columns and its row count (a user who deletes gpu_peaks rows changes what the views answer); a
# macro's parameters and body (the views call kwh's macros: views/macros/); and each one's comment.
_OBJECTS_SQL = ("SELECT 'view', view_name, sql, coalesce(comment, '') FROM duckdb_views() "
                "WHERE database_name = $1 AND NOT internal "
                "UNION ALL SELECT 'table', table_name, sql || ' -- rows ' || CAST(estimated_size AS VARCHAR), "
                "coalesce(comment, '') FROM duckdb_tables() WHERE database_name = $1 AND NOT internal "
                "UNION ALL SELECT 'macro', function_name, array_to_string(parameters, ',') || ' AS ' || "
                "macro_definition, coalesce(comment, '') FROM duckdb_functions() "
                "WHERE database_name = $1 AND function_type = 'macro' AND NOT internal")
# ...and what readers and writers compare instead: each object's DuckDB comment. Writing out the
# views' SQL costs DuckDB ~1 ms per view (~40 ms for the file); reading comments costs nothing.
# kwh comments each of its objects with OWN_TAG, and DuckDB drops the comment of a view or table
# that is created again (CREATE OR REPLACE), so a redefined object has none.
_TAGS_SQL = ("SELECT 'view', view_name, coalesce(comment, '') FROM duckdb_views() "
             "WHERE database_name = $1 AND NOT internal "
             "UNION ALL SELECT 'table', table_name, coalesce(comment, '') FROM duckdb_tables() "
             "WHERE database_name = $1 AND NOT internal")
# Macros' comments cost ten times the rest (~10 ms against ~1 ms: duckdb_functions() lists every built-in
# function as well), so readers, which compare tags on every start, leave them to writers and kwh check.
_MACRO_TAGS_SQL = ("SELECT 'macro', function_name, coalesce(comment, '') FROM duckdb_functions() "
                   "WHERE database_name = $1 AND function_type = 'macro' AND NOT internal")


def definitions(warehouse_root: Path) -> str:
    """A hash of everything kwh puts in warehouse.duckdb besides the data: the table schema, every
    view's and macro's SQL, the reference tables and thresholds (the warehouse's own overrides
    included), the peaks and the metric catalog. A kwh upgrade that changes any of them makes the
    published file stale."""
    from kwarehouse import views
    digest = hashlib.sha256(packaged_definitions().encode())
    digest.update(repr(views.thresholds(warehouse_root)).encode())
    return digest.hexdigest()[:16]


@functools.cache
def packaged_definitions() -> str:
    """The packaged part of definitions(), from the files themselves: the metric catalog and the
    peaks are hashed as the CSV files (and the code) they are built from, so no polars is loaded."""
    from kwarehouse import views
    package = Path(__file__).parents[1]      # src/kwarehouse (this module lives in store/)
    digest = hashlib.sha256(resources.files("kwarehouse").joinpath("schema.sql").read_bytes())
    for view in views.creation_order():
        digest.update(f"\0{view.name}\0{view.sql}".encode())
    for macro in views.all_macros().values():
        digest.update(f"\0{macro.name}\0{macro.sql}".encode())
    digest.update(repr(sorted(views.reference_tables().items())).encode())
    # which views a published file holds as tables, and which of them it keeps per partition
    digest.update(repr((views.PARTITION_LOCAL, views.FLEET)).encode())
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


def inventory(con, database: str) -> tuple[dict[str, str], dict[str, str]]:
    """(object_digests, object_tags) of one database of `con`, from one listing (duckdb_functions(),
    ~10 ms a listing since it lists every built-in function, once instead of twice)."""
    rows = con.execute(_OBJECTS_SQL, [database]).fetchall()
    return ({f"{kind} {name}": _digest(text) for kind, name, text, _ in rows},
            {f"{kind} {name}": comment for kind, name, _, comment in rows})


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def object_digests(con, database: str) -> dict[str, str]:
    """{"view kernels": hash of its SQL, "table gpu_peaks": ..., ...} of one database of `con`."""
    return inventory(con, database)[0]


def object_tags(con, database: str, macros: bool = True) -> dict[str, str]:
    """{"view kernels": its comment (OWN_TAG for kwh's; "" when none), ...}: what readers compare
    (see _TAGS_SQL); macros=False leaves the macros out (reader_tags)."""
    rows = con.execute(_TAGS_SQL, [database]).fetchall()
    if macros:
        rows += con.execute(_MACRO_TAGS_SQL, [database]).fetchall()
    return {f"{kind} {name}": text for kind, name, text in rows}


def reader_tags(tags: dict | None) -> dict | None:
    """The tags a reader compares: those of tables and views (object_tags with macros=False)."""
    return {key: tag for key, tag in tags.items() if not key.startswith("macro ")} if isinstance(tags, dict) else tags


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

