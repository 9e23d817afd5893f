"""The materialized views of warehouse.duckdb (views.MATERIALIZED), kept at each commit for the
partitions it changed.

A view of views.PARTITION_LOCAL gives, for one (model, gpu), exactly the rows it gives over that model
and GPU's base rows alone. So publish keeps each as a table in the published file and, at the next
commit, replaces only the rows of the partitions whose committed files changed (a run added or
removed, a partition compacted or renormalized): those are computed in a scratch database whose base
tables hold only those partitions' files, and merged with the previous file's rows of the others. The
views of views.FLEET read across partitions and are computed whole, from the local tables.

What was computed from which files is recorded with the published file (PARTITIONS_KEY in the
catalog: a digest of each partition's committed files, those missing on disk marked). A commit then
recomputes the partitions whose digest differs; a change of any definition, threshold or DuckDB
version, or a file that is not exactly what kwh published, starts again from the views template and
computes every partition (publish decides; this module only computes).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb

from kwarehouse import views
from kwarehouse.store import bind, template
from kwarehouse.store.layout import read_path, sql_string

# catalog_info key of the partition digests the published file's tables were computed from (apart from
# the publish record, which every reader parses: 10,000 partitions make ~1 MB of digests)
PARTITIONS_KEY = "published_partitions"


class Incomplete(Exception):
    """A partition's rows could not be computed (a damaged or missing file): publish computes every
    view whole instead, leaving the failing ones as views, which then give the query's own error."""


def partition_digests(root: Path, snapshot: bind.Snapshot) -> dict[str, str]:
    """{json [model, gpu]: digest of the partition's committed files} of `snapshot`; a file missing on
    disk counts as another file (views leave it out, so its coming back must recompute the partition)."""
    files: dict[tuple[str, str], list[str]] = {}
    for paths in snapshot.files.values():
        for path in paths:
            partition = snapshot.partition_of.get(path)
            if partition is not None:
                files.setdefault(partition, []).append(path if read_path(root, path).exists() else f"{path} (missing)")
    return {json.dumps(list(partition)): hashlib.sha256("\n".join(sorted(paths)).encode()).hexdigest()[:20]
            for partition, paths in files.items()}


def materialize_all(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every materialized view computed whole in `con` (its views over the snapshot's base tables);
    returns those left as views (views.materialize)."""
    views.plan_quickly(con)
    return views.materialize(con, views.MATERIALIZED)


def refresh(con: duckdb.DuckDBPyConnection, root: Path, snapshot: bind.Snapshot, digests: dict[str, str],
            done: dict[str, str], scratch: Path) -> int:
    """Bring the tables of `con` (a copy of the previous published file, its base tables now over
    `snapshot`), computed from the partitions `done` describes, to `digests`: the local views' rows of
    changed and removed partitions replaced, the fleet views computed again. `scratch`: a path for the
    scratch database, removed after. Returns how many partitions were computed; raises Incomplete."""
    changed = {tuple(json.loads(key)) for key, digest in digests.items() if done.get(key) != digest}
    replaced = changed | {tuple(json.loads(key)) for key in done.keys() - digests.keys()}
    if not replaced:        # nothing any view reads changed (no view reads the rollups)
        return 0
    views.plan_quickly(con)
    try:
        _replace_partitions(con, root, snapshot, changed, replaced, scratch)
        for view in views.creation_order():
            if view.name in views.FLEET:
                _swap_in(con, view.name, views.body(view.sql))
    except duckdb.Error as exc:
        raise Incomplete(str(exc).splitlines()[0]) from None
    finally:
        for path in (scratch, Path(f"{scratch}.wal")):
            path.unlink(missing_ok=True)
    return len(changed)


def _replace_partitions(con, root: Path, snapshot: bind.Snapshot, changed: set, replaced: set, scratch: Path) -> None:
    con.execute("CREATE OR REPLACE TEMP TABLE kwh_replaced (model VARCHAR, gpu VARCHAR)")
    con.executemany("INSERT INTO kwh_replaced VALUES (?, ?)", sorted(replaced))
    if changed:
        _compute_partitions(root, snapshot.of_partitions(changed), scratch)
        con.execute(f"ATTACH {sql_string(str(scratch))} AS kwh_scratch (READ_ONLY)")
    try:
        for view in views.creation_order():
            if view.name not in views.PARTITION_LOCAL:
                continue
            kept = (f'SELECT * FROM main."{view.name}" v WHERE NOT EXISTS '
                    '(SELECT 1 FROM kwh_replaced r WHERE r.model = v.model AND r.gpu = v.gpu)')
            rows = f'{kept} UNION ALL BY NAME SELECT * FROM kwh_scratch."{view.name}"' if changed else kept
            order = views.row_order(view)
            _swap_in(con, view.name, f"SELECT * FROM ({rows})" + (f" ORDER BY {order}" if order else ""))
    finally:
        if changed:
            con.execute("DETACH kwh_scratch")
        con.execute("DROP TABLE kwh_replaced")


def _swap_in(con, name: str, select: str) -> None:
    """Table `name` made the rows of `select` (which may read it)."""
    con.execute(f'CREATE TABLE "{name}__rows" AS {select}')
    con.execute(f'DROP TABLE "{name}"')
    con.execute(f'ALTER TABLE "{name}__rows" RENAME TO "{name}"')


def _compute_partitions(root: Path, snapshot: bind.Snapshot, path: Path) -> None:
    """A database at `path` holding the local views' rows over `snapshot` (the changed partitions'
    files) as tables."""
    con = template.open_over(path, root, snapshot)
    try:
        views.plan_quickly(con)
        left = views.materialize(con, views.PARTITION_LOCAL)
        if left:
            raise Incomplete(f"could not compute {', '.join(left)} for the changed partitions")
        con.execute("CHECKPOINT")
    finally:
        con.close()
