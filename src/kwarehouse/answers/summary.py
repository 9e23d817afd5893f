"""Overviews the CLI prints: kernels per model, top kernels by GPU time, the kernel list by identity."""

from __future__ import annotations

from dataclasses import dataclass

from kwarehouse import views
from kwarehouse.answers import queries
from kwarehouse.store.warehouse import Warehouse


def _query(warehouse: Warehouse, name: str, params: list | dict, con=None):
    """(column names, rows) of the query answers/sql/NAME.sql, on `con` or a connection of its own."""
    own = con is None
    con = warehouse.connect() if own else con
    try:
        cursor = con.execute(queries.load(name), params)
        return [d[0] for d in cursor.description], cursor.fetchall()
    finally:
        if own:
            con.close()


@dataclass
class Overview:
    """kwh summary's tables, each (column names, rows), and the (model, gpu) pairs on replay time only."""
    efficiency: tuple
    per_model: tuple
    top_kernels: tuple
    fix_first: tuple
    replay_only: list[tuple[str, str]]


def overview(warehouse: Warehouse, top: int = 10, fixes: int = 5) -> Overview:
    """Everything kwh summary prints, from one connection in which the views it reads several times are
    computed once."""
    con = warehouse.connect()
    try:
        views.compute_once(con, views.READ_BY_MANY_ANSWERS)
        return Overview(_query(warehouse, "model_efficiency", {"model": None, "gpu": None, "since": None}, con),
                        _query(warehouse, "summary_per_model", [], con),
                        _query(warehouse, "summary_top_kernels", [top], con),
                        _query(warehouse, "summary_fix_first", [fixes], con),
                        _query(warehouse, "replay_only", [None, None], con)[1])
    finally:
        con.close()


def summary_tables(warehouse: Warehouse, top: int = 10):
    """(per-model table, top-kernels table), each as (column names, rows)."""
    return [_query(warehouse, "summary_per_model", []), _query(warehouse, "summary_top_kernels", [top])]


def kernel_list(warehouse: Warehouse, *, unclassified: bool = False, model: str | None = None,
                limit: int = 50):
    """Kernels by identity with their GPU time share; `unclassified` keeps those whose library or
    op class no rule matched (what to add to the rules files)."""
    return _query(warehouse, "kernel_list", [model, model, unclassified, limit])


def replay_only(warehouse: Warehouse, model: str | None = None) -> list[tuple[str, str]]:
    """(model, gpu) pairs whose kernel times are ncu replay durations only (no nsys or PyTorch timeline)."""
    return _query(warehouse, "replay_only", [model, model])[1]


def replay_note(pairs: list[tuple[str, str]]) -> str | None:
    """One plain sentence for the CLI and report when some answers rest on ncu replay time only."""
    if not pairs:
        return None
    models = sorted({m for m, _ in pairs})
    return (f"Note: {', '.join(models)} rest{'s' if len(models) == 1 else ''} on ncu replay time only (no nsys or PyTorch "
            "timeline of that model on that GPU): ncu serialises kernels and flushes caches, so small kernels read "
            "longer than in a real run and kernels outside its launch range are missing. Ingest a timeline "
            "(time_basis says which rows rest on which).")
