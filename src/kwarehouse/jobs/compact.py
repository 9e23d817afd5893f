"""`kwh compact`: the small Parquet files of every partition merged, under the writer lock."""

from __future__ import annotations

from kwarehouse.store.warehouse import Warehouse


def compact(warehouse: Warehouse) -> list[str]:
    """Merge the small Parquet files of every partition (see WriteSession.compact)."""
    with warehouse.writer() as session:
        return session.compact()
