"""`kwh hot-kernels`: the kernel functions with the most GPU time in the warehouse, and the ncu regex
that profiles them (the same selection and regex `kwh profile` builds from its discovery pass).

Without --model: the fleet's kernel_popularity (level = 'kernel'), every model and GPU together; with
--model: kernel_time of those models. GPU time is the views' real GPU time (timeline time where a
model has a timeline, else ncu replay time). Kernels are taken by GPU time, not by popularity_rank
(which ranks by how many models use a kernel first): --top and --cover mean the same as in kwh profile.
"""

from __future__ import annotations

from dataclasses import dataclass

from kwarehouse.collect import selection
from kwarehouse.errors import KwhError

COLUMNS = ("model", "function", "gpu_time_ns", "gpu_time_pct", "launches", "kernel_bases", "regex")


@dataclass
class HotKernels:
    selections: dict[str, selection.Selection]     # "all models" (merged) or one per model

    def rows(self) -> list[tuple]:
        out = []
        for model, chosen in self.selections.items():
            for kernel in chosen.kernels:
                out.append((model, kernel.function, kernel.gpu_time_ns,
                            round(100.0 * kernel.gpu_time_ns / chosen.total_ns, 2) if chosen.total_ns else None,
                            kernel.launches, "; ".join(kernel.names[:3]), chosen.regex))
        return out


def hot_kernels(warehouse, models: tuple[str, ...] = (), top: int | None = None, cover_pct: float | None = None,
                per_model: bool = False, con=None) -> HotKernels:
    """The selection per model (per_model) or merged over `models` (all models when empty). `con`: an
    open connection of the warehouse to use (several questions, one connection)."""
    own = con is None
    con = warehouse.connect() if own else con
    try:
        if models:
            marks = ", ".join("?" for _ in models)
            rows = con.execute(f"SELECT model, kernel_base, sum(gpu_time_ns), sum(launches) FROM kernel_time "
                               f"WHERE model IN ({marks}) GROUP BY model, kernel_base", list(models)).fetchall()
        elif per_model:
            rows = con.execute("SELECT model, kernel_base, sum(gpu_time_ns), sum(launches) FROM kernel_time "
                               "GROUP BY model, kernel_base").fetchall()
        else:
            rows = con.execute("SELECT 'all models', kernel_base, gpu_time_ns, launches FROM kernel_popularity "
                               "WHERE level = 'kernel'").fetchall()
    finally:
        if own:
            con.close()
    missing = [m for m in models if m not in {r[0] for r in rows}]
    if missing:
        raise KwhError(f"no kernels of model {', '.join(missing)} in the warehouse; kwh summary lists the models")
    if not rows:
        raise KwhError("the warehouse holds no kernels yet; run kwh ingest (or kwh profile --ingest) first")
    groups: dict[str, list[tuple]] = {}
    for model, base, time_ns, launches in rows:
        key = model if per_model else ("all models" if not models else ", ".join(models))
        groups.setdefault(key, []).append((base, int(time_ns or 0), int(launches or 0)))
    return HotKernels({key: selection.select(selection.aggregate(launches), top, cover_pct)
                       for key, launches in sorted(groups.items())})
