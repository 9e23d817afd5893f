"""New runs of ncu exports built together in one vectorized pass (build_ncu_batch), else run by run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from kwarehouse import normalize, schema
from kwarehouse.build.isolate import one_line, warehouse_fault
from kwarehouse.build.report import IngestReport
from kwarehouse.build.run import BuiltRun, in_page_order, run_record
from kwarehouse.build.sources import Source
from kwarehouse.errors import KwhError, display_path
from kwarehouse.normalize.launches import kernel_rows, launch_frames, merged_launch_rows, rule_rows, with_dims
from kwarehouse.settings import Settings
from kwarehouse.store import files as store_files
from kwarehouse.store.warehouse import Warehouse

log = logging.getLogger(__name__)
T = TypeVar("T")


# In a batch, a launch's id carries its run's position above these bits (ncu numbers launches from 0).
LAUNCH_BITS = 32


def batch_full(groups: dict[str, list[Source]], settings: Settings) -> bool:
    """Whether `groups` make a batch (Settings.batch_runs runs or Settings.batch_bytes of input: why those)."""
    return (len(groups) >= settings.batch_runs
            or sum(m.size or 0 for ms in groups.values() for m in ms) >= settings.batch_bytes)


def fresh_members(run_id: str, members: list[Source], warehouse: Warehouse, report: IngestReport) -> list[Source]:
    """The members no other writer committed while we were reading them: checked again under the
    lock, so two concurrent ingests never record a file twice."""
    fresh = []
    for member in members:
        done = warehouse.ingested_run(member.sha256)
        if done is None:
            fresh.append(member)
        else:
            report.skipped.append((display_path(member.result.path), f"already ingested (run {done})"))
    return fresh


def supersedes(run_id: str, members: list[Source]) -> tuple[str, ...]:
    return tuple(sorted({m.supersedes for m in members if m.supersedes} - {run_id}))


@dataclass
class BuiltBatch:
    groups: dict[str, list[Source]]       # every run of the batch, in folder order
    batch: dict[str, list[Source]]        # the new runs built together (their fresh members)...
    built: dict[str, BuiltRun]             # ...and what they became (empty: they go one by one)
    single: dict[str, list[Source]]       # the runs committed one by one


def build_batch(groups: dict[str, list[Source]], warehouse: Warehouse, model: str | None,
                tags: dict[str, str], report: IngestReport) -> BuiltBatch:
    """commit_batch's first half: build the new runs of ncu exports together (nothing is written)."""
    known = {run_id for run_id, _, _ in warehouse.runs()}
    batch, single = {}, {}
    for run_id, members in groups.items():
        if run_id in known or supersedes(run_id, members) or not batchable(members):
            single[run_id] = members
        elif fresh := fresh_members(run_id, members, warehouse, report):
            batch[run_id] = fresh
    built = build_together(batch, normalize.KernelRules.load(warehouse.rules_dir), model, tags, report,
                           warehouse.root) if len(batch) > 1 else {}
    return BuiltBatch(groups, batch, built, single if built else {**single, **batch})


def build_together(runs: dict[str, list[Source]], rules: normalize.KernelRules, model: str | None,
                   tags: dict[str, str], report: IngestReport, root) -> dict[str, BuiltRun]:
    """The new ncu runs `runs` (batchable) built in one batch (build_ncu_batch), or {} when they go one
    by one: fewer than two, or building them together failed for a reason of theirs (see together)."""
    if len(runs) < 2:
        return {}
    return together(runs, "building", lambda: build_ncu_batch(list(runs.items()), rules, model, tags),
                    report, root) or {}


def together(runs: dict[str, list[Source]], step: str, attempt: Callable[[], T], report: IngestReport,
             root) -> T | None:
    """Batch, else run by run: attempt() does `step` (building, staging) to the runs of a batch together.
    Its answer; or None when it failed for a reason of the runs (a file, a bug of the batch path): the
    runs then go one by one (where a bad file fails alone), and why is recorded in report.fallbacks
    (fell_back). A failure of the warehouse at `root` (warehouse_fault: disk full, catalog gone) is no
    run's: it stops the ingest, one line, with nothing of the runs committed."""
    try:
        return attempt()
    except Exception as exc:   # noqa: BLE001 - sorted here: only a warehouse's failure is raised
        if not warehouse_fault(exc):
            fell_back(report, runs, step, exc)
            return None
        if isinstance(exc, KwhError):
            raise
        raise KwhError(f"{root}: could not write runs {', '.join(runs)} ({one_line(exc)}); nothing of them was "
                       "committed and runs committed before them are kept") from None


def fell_back(report: IngestReport, runs: dict[str, list[Source]], step: str, exc: BaseException) -> None:
    """Record that the runs of a batch go one by one because `step` them together failed: in the report
    (one line; the CLI prints it) and, with the traceback, in the debug log. A file at fault then
    fails alone (commit_groups narrows it down); a clean batch that falls back is a bug of the batch
    path, which only this line shows (its rows are the same, only slower)."""
    log.debug("%s runs %s together failed; they go one by one", step, ", ".join(runs), exc_info=exc)
    files = sorted({display_path(m.result.path) for members in runs.values() for m in members})
    report.fallbacks.append(f"{len(runs)} runs ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}) "
                            f"were committed one by one: {step} them together failed ({one_line(exc)})")


def batchable(members: list[Source]) -> bool:
    """Whether a new run can be built in a batch: ncu pages whose launch ids fit below LAUNCH_BITS."""
    for member in members:
        result = member.result
        if result.tool != "ncu" or result.metrics is None or result.launches is None:
            return False
        ids = result.launches["launch_id"]
        if ids.len() and (ids.null_count() or ids.min() < 0 or ids.max() >= 1 << (LAUNCH_BITS - 1)):
            return False
        ids = result.metrics["launch_id"]
        if ids.len() and (ids.null_count() or ids.min() < 0 or ids.max() >= 1 << (LAUNCH_BITS - 1)):
            return False
    return True


def build_ncu_batch(runs: list[tuple[str, list[Source]]], rules: normalize.KernelRules,
                    model_option: str | None, tags: dict[str, str]) -> dict[str, BuiltRun]:
    """build_run for several new runs of ncu exports in one vectorized pass: the rows of every run go
    through each normalization step together (a launch id carries its run's position above
    LAUNCH_BITS; steps whose answer is per run or per export group by normalize.BATCH_RUN or
    BATCH_MEMBER), then the tables are cut back into runs. The rows equal build_run's, run by run."""
    runs = [(run_id, in_page_order(members)) for run_id, members in runs]
    results = [(index, m.result) for index, (_, members) in enumerate(runs) for m in members]
    run_of_export = np.array([index for index, _ in results], dtype=np.int64)

    def per_row(frames: list[pl.DataFrame], values: np.ndarray, dtype=pl.Int64) -> pl.Series:
        """values[i] repeated for every row of frames[i], the frames concatenated."""
        return pl.Series(np.repeat(values, [f.height for f in frames]), dtype=dtype)

    shift = run_of_export << LAUNCH_BITS
    # The exports' metric rows, normalized by page: raw pages (section-less) skip the label map, and the
    # pages go in PAGE_PRIORITY order, so the rows of one launch and metric keep build_run's order.
    by_page: dict[int, list[int]] = {}
    for number, (_, result) in enumerate(results):
        by_page.setdefault(normalize.PAGE_PRIORITY.get(result.page, 9), []).append(number)
    pages = []
    for _, numbers in sorted(by_page.items()):
        raw = [results[n][1].metrics for n in numbers]
        metrics = pl.concat(raw, how="vertical_relaxed").with_columns(
            pl.col("launch_id") + per_row(raw, shift[numbers]),
            per_row(raw, np.array(numbers, dtype=np.int64)).alias(normalize.BATCH_MEMBER))
        pages.append(normalize.normalize_batch_metrics(metrics, [results[n][1].page for n in numbers], raw))
    metrics = normalize.merge_ordered_metrics(pages)

    frames = [launch_frames(r.launches) for _, r in results]
    shifts = np.repeat(shift, [len(f) for f in frames])
    frames = [f for of_export in frames for f in of_export]
    launches = pl.concat(frames, how="diagonal_relaxed").with_columns(pl.col("launch_id") + per_row(frames, shifts))
    launches = merged_launch_rows(with_dims(launches)).with_columns(
        (pl.col("launch_id") // (1 << LAUNCH_BITS)).alias(normalize.BATCH_RUN))
    kernels = kernel_rows(launches, metrics, rules)

    raw = [r.rules for _, r in results]
    rule_table = rule_rows(pl.concat(raw, how="vertical_relaxed").with_columns(
        pl.col("launch_id") + per_row(raw, shift), per_row(raw, run_of_export).alias(normalize.BATCH_RUN))
    ).unique(maintain_order=True)

    kernels_of = kernels.partition_by(normalize.BATCH_RUN, as_dict=True, maintain_order=True)
    built = {}
    for index, (run_id, members) in enumerate(runs):
        of_run = kernels_of.get((index,), kernels.clear())
        built[run_id] = run_record(run_id, members, {}, of_run, of_run.height,
                                    of_run["compute_capability"].drop_nulls().first(), model_option, tags)
    names = pl.DataFrame({normalize.BATCH_RUN: np.arange(len(runs), dtype=np.int64),
                          "run_id": [run_id for run_id, _ in runs], "model": [b.model for b in built.values()],
                          "gpu": [b.gpu for b in built.values()]})

    def by_run(name: str, frame: pl.DataFrame) -> list[pa.Table]:
        """The batch's rows of a table, tagged with their run, cut into one Arrow table per run."""
        if normalize.BATCH_RUN not in frame.columns:
            frame = frame.with_columns((pl.col("launch_id") // (1 << LAUNCH_BITS)).alias(normalize.BATCH_RUN))
        order = _write_order(name, frame)
        if order is not None:
            frame = frame[order]
        frame = (frame.with_columns(pl.col("launch_id") % (1 << LAUNCH_BITS))
                 .join(names, on=normalize.BATCH_RUN, how="left", maintain_order="left"))
        ends = np.cumsum(np.bincount(frame[normalize.BATCH_RUN].to_numpy(), minlength=len(runs)))
        frame = frame.drop(normalize.BATCH_RUN)
        if name == "metrics":   # flat strings and numbers: its strings go to the writer as polars holds them
            table = schema.conform(name, frame.to_arrow(compat_level=pl.CompatLevel.newest()), keep_views=True)
        else:
            table = schema.conform(name, frame.to_arrow())   # once, not per run
        return [table.slice(end - length, length) for end, length in zip(ends, np.diff(ends, prepend=0))]

    for name, frame in (("kernels", kernels), ("metrics", metrics), ("rules", rule_table)):
        for (_, one), table in zip(built.items(), by_run(name, frame)):
            one.tables[name] = table
    return built


def _write_order(name: str, frame: pl.DataFrame) -> pl.Series | None:
    """The row order by_run cuts a batch table in (None: the order it has): by run, and within a run,
    for a table the writer clusters (store/files.CLUSTER_ORDER: metrics by metric, run_id, launch_id), in
    that order, so the writer finds its rows ordered and does not sort them again; other tables keep
    their row order.

    A batch of raw pages usually has that order already (the reader keeps their metric columns in name
    order): a comparison of each row with the next finds it so. Otherwise one sort of one integer key
    (run, the metric's rank among the batch's names, launch) and one gather: sorting on the metric
    text, and sorting again before the write, cost several times that. The order is needed, not only
    cheaper: the metrics table reaches the writer with string_view columns, which Arrow's take (the
    writer's own sort) does not handle."""
    run = frame[normalize.BATCH_RUN]
    if store_files.CLUSTER_ORDER.get(name) != ("metric", "run_id", "launch_id") or frame.height == 0:
        return None if run.is_sorted() else frame.select(pl.arg_sort_by(normalize.BATCH_RUN, maintain_order=True)).to_series()
    keys = (normalize.BATCH_RUN, "metric", "launch_id")
    if store_files.in_order(frame.select(keys).to_arrow(compat_level=pl.CompatLevel.newest()), keys):
        return None
    order = None
    if not frame["metric"].null_count():
        launch = frame["launch_id"] % (1 << LAUNCH_BITS)
        order = store_files.packed_order([(run, max(1, int(run.max()).bit_length())), store_files.rank(frame["metric"]),
                                          (launch, LAUNCH_BITS)])
    if order is None:
        return frame.select(pl.arg_sort_by(normalize.BATCH_RUN, "metric", "launch_id", maintain_order=True)).to_series()
    return order
