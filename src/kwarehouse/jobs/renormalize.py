"""`kwh renormalize`: normalization applied again to every stored run, from the rows it stored."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from kwarehouse import normalize, schema
from kwarehouse.build.report import RunSummary
from kwarehouse.build.run import tag
from kwarehouse.ingest.base import TIMELINE_COLUMNS
from kwarehouse.normalize.launches import LAUNCH_COLUMNS, kernel_rows
from kwarehouse.store.warehouse import Warehouse


@dataclass
class RenormalizeReport:
    changed: list[RunSummary] = field(default_factory=list)
    unchanged: int = 0
    repairs: list[str] = field(default_factory=list)


def renormalize(warehouse: Warehouse, progress: Callable[[str], None] | None = None) -> RenormalizeReport:
    """Re-apply normalization (metric catalog, identity, NVTX context, classification rules, derived
    columns) to every run already in `warehouse`, from the rows it stored. A run whose rows come out
    the same is left alone; a changed one is replaced atomically, like an ingest."""
    report = RenormalizeReport()
    if not warehouse.exists:
        return report
    rules = normalize.KernelRules.load(warehouse.rules_dir)
    pending: list = []
    with warehouse.writer() as session:
        report.repairs.extend(session.repairs)
        for run_id, model, gpu in warehouse.runs():
            if progress:
                progress(run_id)
            stored = warehouse.read_run(run_id)
            if "kernels" not in stored and "kernel_launches" not in stored:
                continue
            tables, names, count = dict(stored), [], 0
            if "kernels" in stored:
                metrics = pl.from_arrow(stored["metrics"]).drop("run_id", "model", "gpu")
                metrics = normalize.merge_metrics([normalize.canonical_metric_names(
                    metrics.with_columns(pl.coalesce("source_metric", "metric").alias("source_metric")))])
                old_kernels = pl.from_arrow(stored["kernels"])
                kernels = kernel_rows(old_kernels.select(LAUNCH_COLUMNS), metrics, rules)
                tables.update(kernels=tag(kernels, run_id, model, gpu), metrics=tag(metrics, run_id, model, gpu))
                names += ["kernels", "metrics"]
                count = kernels.height
            if "kernel_launches" in stored:
                launches = renormalize_timeline(pl.from_arrow(stored["kernel_launches"]), rules)
                tables["kernel_launches"] = tag(launches, run_id, model, gpu)
                names.append("kernel_launches")
                count = count or launches.filter(pl.col("activity") == "kernel").height
            if all(_same_rows(name, stored[name], tables[name]) for name in names):
                report.unchanged += 1
                continue
            pending.append((session.stage_run(run_id, model, gpu, tables), []))
            report.changed.append(RunSummary(run_id, model, gpu, count, [], new=False))
            # committed Settings.renormalize_batch at a time: a compacted file shared by many runs is
            # rewritten once per batch, not once per run (which made renormalize quadratic in time and disk)
            if len(pending) >= warehouse.settings.renormalize_batch:
                session.commit_many(pending)
                pending = []
        session.commit_many(pending)
    return report


def renormalize_timeline(stored: pl.DataFrame, rules: normalize.KernelRules) -> pl.DataFrame:
    """kernel_launches rows normalized again from the reader's columns they keep (a column an older kwh
    did not write is NULL: its FLOPs then come from the shapes alone)."""
    reader = {**TIMELINE_COLUMNS, "launch_index": pl.Int64, "grid_size": pl.Int64, "block_size": pl.Int64}
    rows = stored.select([pl.col(c).cast(t) if c in stored.columns else pl.lit(None, dtype=t).alias(c)
                          for c, t in reader.items()])
    normalized = normalize.normalize_timeline(rows, rules)
    return normalized.select([c for c in schema.tables()["kernel_launches"].arrow.names
                              if c not in ("run_id", "model", "gpu")])


def _same_rows(name: str, old: pa.Table, new: pa.Table) -> bool:
    """Equal once both have the stored column order and types (old rows may lack new columns)."""
    new = schema.conform(name, new)
    try:
        old = old.select(new.column_names).cast(new.schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    keys = [(c, "ascending") for c in ("launch_id", "launch_index", "metric") if c in new.column_names]
    return old.sort_by(keys).equals(new.sort_by(keys))
