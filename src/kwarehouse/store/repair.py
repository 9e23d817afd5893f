"""What a writer repairs before it writes (Warehouse.writer() runs it under the writer lock, when every
write intent belongs to a dead writer): an interrupted writer's staging folder and the files it meant
to commit, retired files still in their table folders, and retired files older than
Settings.retire_grace that no published view names (deleted).
"""

from __future__ import annotations

import shutil

import sqlalchemy as sa

from kwarehouse.store import catalog, publish
from kwarehouse.store.catalog import catalog_parquet, catalog_retired, catalog_rollup_files, write_intents
from kwarehouse.store.files import detach
from kwarehouse.store.layout import FILES


def repair(warehouse) -> list[str]:
    """Undo what an interrupted writer left and delete expired retired files; returns one line per
    repair. Call under the writer lock."""
    repairs = []
    with warehouse.reading() as con:
        intents = list(con.execute(sa.select(write_intents.c.path, write_intents.c.kind)))
        known = set(con.execute(sa.select(catalog_parquet.c.path)).scalars())
        known |= set(con.execute(sa.select(catalog_rollup_files.c.path)).scalars())
        retired = dict(con.execute(sa.select(catalog_retired.c.path, catalog_retired.c.retired_at)).all())
    staged_files = 0
    for path, kind in intents:
        target = warehouse.root / path
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
        with warehouse.engine.begin() as con:
            con.execute(write_intents.delete().where(write_intents.c.path.in_([p for p, _ in intents])))
    detach(warehouse.root, [p for p in retired if (warehouse.root / p).is_file()])   # a crash after their commit
    with warehouse.engine.connect() as con:      # the clock they were retired on, not this writer's
        now = catalog.clock(con) if retired else None
    expired = [p for p, at in retired.items() if now - at > warehouse.settings.retire_grace]
    if expired:
        # warehouse.duckdb may still name them (its last rebuild failed): rebuild it first, and
        # keep them while it cannot be rebuilt
        publish.publish_if_stale(warehouse)
        if publish.is_stale(warehouse):
            return repairs
        with warehouse.engine.begin() as con:
            con.execute(catalog_retired.delete().where(catalog_retired.c.path.in_(expired)))
        for path in expired:
            for target in (warehouse.root / path, warehouse.root / FILES / path):
                if not target.is_symlink():
                    target.unlink(missing_ok=True)
    return repairs
