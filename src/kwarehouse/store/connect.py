"""A reader's DuckDB connection: warehouse.duckdb attached read-only when it is what kwh published for
the catalog's snapshot (fast_read, publish.open_published), else the views over the snapshot's files
(bind.view_sql): a private copy of the views template built for them and attached read-only (_over_template),
or, where none can be had, every view created in memory. What is wrong on the way (committed files
missing, a published file changed outside kwh) goes to the warehouse's warnings, never to stderr.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import duckdb

from kwarehouse import views
from kwarehouse.errors import KwhError, first_line
from kwarehouse.store import bind, fast_read, migrate, publish, template
from kwarehouse.store.layout import sql_string


def connect(warehouse) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with every warehouse table as a view."""
    if not warehouse.catalog_url and warehouse.session is None:
        # warehouse.duckdb current by the default catalog, read with sqlite3 (fast_read): the same
        # answer as below without a catalog round trip through SQLAlchemy
        published = fast_read.connect(warehouse.root)
        if published is not None:
            return published
    warehouse.refresh_published_if_free()
    snapshot = warehouse.snapshot()
    missing = warehouse.missing_files(snapshot)
    if missing:
        warehouse.warn(f"warning: {len(missing)} committed file(s) of {warehouse.root} are missing (first: "
                       f"{missing[0]}); their rows are left out of every answer: run kwh check")
    old_layout = migrate.reader_warning(snapshot)
    if old_layout:
        warehouse.warn(old_layout)
    if not missing:
        published, problem = publish.open_published(warehouse, snapshot)
        if published is not None:
            return published
        if problem is not None and problem.startswith(publish.CHANGED_OUTSIDE):
            # the rebuild above could not run (a writer is busy, the folder is read-only, a session holds it)
            warehouse.warn(f"warning: {warehouse.duckdb_path.name} was {problem}: DuckDB sessions reading it get "
                           "other answers than kwh, which answers from the catalog; kwh check --repair rebuilds it "
                           "(open it with duckdb -readonly)")
    con = _over_template(warehouse.root, snapshot)
    return con if con is not None else views_in_memory(warehouse.root, snapshot)


def views_in_memory(root: Path, snapshot) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with every table and view of `snapshot` created anew (each view bound:
    ~1.2 CPU-s). The reader's last resort, and what bench/materialized_views.py and the tests compare the
    published tables and the template-backed reader with."""
    con = duckdb.connect()
    for statement in bind.view_sql(root, snapshot):
        try:
            con.execute(statement)
        except duckdb.Error as exc:
            con.close()
            raise KwhError(f"{root}: a committed Parquet file cannot be read ({first_line(exc)}); "
                           "run kwh check --repair") from None
    bind.add_reference_tables(con)
    views.create_all(con, root)
    views.plan_quickly(con)
    return con


def _over_template(root: Path, snapshot) -> duckdb.DuckDBPyConnection | None:
    """The in-memory reader's views without binding any: a private copy of the views template
    (template.open_over, as publish makes warehouse.duckdb) over the snapshot's files, attached
    READ_ONLY as the published file is (fast_read.attach_published). Creating every view in memory
    binds each (views.create_all: 1.1-1.3 CPU-s, the nested verdict views most of it); this costs
    ~0.1. The copy is removed at once: the attached file stays readable through DuckDB's open handle,
    and a read-only database writes nothing beside it. None where there is no template or a file
    cannot be read: the caller creates the views itself, and says which file."""
    if template.views_template() is None:
        return None
    try:
        folder = Path(tempfile.mkdtemp(prefix="kwh-reader-"))
    except OSError:         # no temporary folder to be had
        return None
    try:
        path = folder / "views.duckdb"
        try:
            template.open_over(path, root, snapshot).close()
        except (duckdb.Error, OSError):     # a file that cannot be read, or no room for the copy
            return None
        con = duckdb.connect()
        try:
            con.execute(f"ATTACH {sql_string(str(path))} AS kwh_views (READ_ONLY)")
            con.execute("SET search_path = 'memory.main,kwh_views.main'")
        except duckdb.Error:
            con.close()
            return None
        views.plan_quickly(con)
        return con
    finally:
        shutil.rmtree(folder, ignore_errors=True)
