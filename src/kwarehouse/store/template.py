"""The views template: a DuckDB file holding every view, bound once over empty base tables, with the
reference tables. publish copies it and swaps in a snapshot's tables instead of binding ~40 nested
views again, which costs a process 1.1-1.5 CPU-s: the fixed cost of the first publish of every
`kwh ingest` process, most of a small ingest's CPU (issue 35, fixed cost).

It is made once per machine, not once per process: kept in the user's cache folder under a name that
hashes everything it is made from (the packaged definitions, the code that writes it, the DuckDB
version and storage format), beside the sha256 of its bytes. A cached file is used only when its
bytes still hash to that sha256; anything else (a half-written, damaged or edited file, no cache
folder, a read-only home) makes a new one, in a temporary folder when the cache cannot take it.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import shutil
import tempfile
from pathlib import Path

import duckdb

from kwarehouse import cache, schema, views
from kwarehouse.errors import KwhError
from kwarehouse.store import bind, layout

# in the storage format DuckDB 1.0 and later read, so that the DuckDB shell users install (often older
# than the duckdb Python package kwh runs on) opens the published file made from it
STORAGE_VERSION = "v1.0.0"
# the table publish adds: which catalog generation the file holds
PUBLISHED_TABLE = "kwh_published"
# the modules whose code decides what the template holds: a change to any makes a new one
_WRITERS = ("store/template.py", "store/bind.py", "store/layout.py", "views/__init__.py", "schema.py")


def key() -> str:
    """The hash that names the template: what it is made from and what makes it."""
    package = Path(__file__).parents[1]
    digest = hashlib.sha256(layout.packaged_definitions().encode())
    digest.update(f"\0{duckdb.__version__}\0{STORAGE_VERSION}".encode())
    for module in _WRITERS:
        digest.update(b"\0" + (package / module).read_bytes())
    return digest.hexdigest()[:24]


@functools.cache
def views_template() -> Path | None:
    """The template's path (read it, never write it); None where it cannot be made (publish then
    builds from scratch). Looked up once per process."""
    name = f"views-{key()}"
    folder = cache.folder()
    cached = folder / f"{name}.duckdb"
    if _intact(cached, folder / f"{name}.sha256"):
        return cached
    made = _make()
    if made is None:
        return None
    try:
        _keep(made, folder, name)
        return cached
    except OSError:         # no cache folder to be had: this process keeps its own copy
        return made


def open_over(path: Path, root: Path, snapshot: bind.Snapshot) -> duckdb.DuckDBPyConnection:
    """A new DuckDB file at `path` holding every view over the files of `snapshot`: a copy of the views
    template whose empty base tables are swapped for views over those files (nothing re-binds: DuckDB
    views keep no dependencies), with the warehouse's own thresholds; where no template can be made,
    every view created anew."""
    template = views_template()
    if template is not None:
        shutil.copyfile(template, path)
    con = duckdb.connect(str(path), config={"storage_compatibility_version": STORAGE_VERSION})
    try:
        if template is not None:
            for name in schema.tables():
                con.execute(f'DROP TABLE "{name}"')
        for statement in bind.view_sql(root, snapshot):
            con.execute(statement)
        if template is not None:
            views.fill_thresholds(con, root)
        else:
            bind.add_reference_tables(con)
            views.create_all(con, root)
    except BaseException:
        con.close()
        raise
    return con


def _intact(path: Path, checksum: Path) -> bool:
    try:
        expected = checksum.read_text().strip()
        return hashlib.sha256(path.read_bytes()).hexdigest() == expected
    except OSError:
        return False


def _make() -> Path | None:
    """A new template in a temporary folder of this process's (removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="kwh-views-"))
    path = folder / "views.duckdb"
    try:
        con = duckdb.connect(str(path), config={"storage_compatibility_version": STORAGE_VERSION})
        try:
            con.execute(schema.schema_sql())
            bind.add_reference_tables(con)
            views.create_all(con, None)
            tag_own_objects(con)       # (those publish creates again get theirs there)
            con.execute("CHECKPOINT")
        finally:
            con.close()
    except (duckdb.Error, OSError, KwhError):
        shutil.rmtree(folder, ignore_errors=True)
        return None
    atexit.register(shutil.rmtree, folder, True)
    return path


def _keep(made: Path, folder: Path, name: str) -> None:
    """Put `made` in the cache under `name`: the file first, then its checksum, each written under a
    name of its own and renamed into place, so a process that looks meanwhile finds the old pair, no
    pair, or a pair whose checksum does not match (and makes its own)."""
    data = made.read_bytes()
    cache.write(folder / f"{name}.duckdb", data)
    cache.write(folder / f"{name}.sha256", hashlib.sha256(data).hexdigest().encode())


def own_objects() -> set[str]:
    """Names kwh creates in warehouse.duckdb (everything else is a user's)."""
    return {*schema.tables(), *views.all_views(), *views.all_macros(), *views.reference_tables(), "metric_catalog",
            "bottleneck_thresholds", "gpu_peaks", PUBLISHED_TABLE}


def tag_own_objects(con: duckdb.DuckDBPyConnection, macros: bool = True) -> None:
    """Comment each of kwh's tables, views and macros that lacks it with layout.OWN_TAG (see
    layout._TAGS_SQL): what a user creates again in its place has no comment, which every reader
    notices. In one transaction: a comment costs DuckDB a commit of its own otherwise (~2 ms each).
    macros=False: the macros are tagged already (a copy of the template), which spares listing them."""
    database = con.execute("SELECT current_database()").fetchall()[0][0]
    ours = own_objects()
    untagged = [key.split(" ", 1) for key, tag in layout.object_tags(con, database, macros=macros).items()
                if tag != layout.OWN_TAG and key.split(" ", 1)[1] in ours]
    if untagged:
        con.execute("BEGIN TRANSACTION")
        for kind, name in untagged:
            con.execute(f"COMMENT ON {kind.upper()} \"{name}\" IS {layout.sql_string(layout.OWN_TAG)}")
        con.execute("COMMIT")
