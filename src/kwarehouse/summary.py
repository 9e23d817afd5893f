"""Overviews the CLI prints: kernels per model, top kernels by GPU time, the kernel list by identity."""

from __future__ import annotations

from kwarehouse.store import Warehouse

# runs counts every run of the model (ncu, nsys, torch). The kernel columns rest on the model's real GPU
# time (views/kernel_time.sql): its timelines (nsys, PyTorch traces) where it has any on that GPU, else
# its ncu launches (time_basis 'ncu replay'); counter_coverage_pct is the share of that time with ncu
# counters (this model's or borrowed from another model's run of the same kernel on the same GPU).
PER_MODEL = """
WITH all_runs AS (SELECT model, gpu, count(*) AS runs,
                         string_agg(DISTINCT tool, ', ' ORDER BY tool) AS tools FROM runs GROUP BY ALL)
SELECT r.model, r.gpu, r.runs, r.tools, coalesce(k.kernels, 0) AS kernels,
       coalesce(k.distinct_kernels, 0) AS distinct_kernels, k.gpu_time_us, k.time_basis, k.counter_coverage_pct
FROM all_runs r LEFT JOIN (
    SELECT model, gpu, sum(launches) AS kernels, count(DISTINCT kernel_id) AS distinct_kernels,
           round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us, min(time_basis) AS time_basis,
           round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
                 / nullif(sum(gpu_time_ns), 0), 1) AS counter_coverage_pct
    FROM kernel_time GROUP BY ALL) k USING (model, gpu)
ORDER BY r.model, r.gpu
"""
# sm_pct and dram_pct are weighted by real time over the time that has counters
# Readable, unique names (kernels.kernel_display) and each identity's verdict, by its longest ncu time
DISPLAY_AND_VERDICT = """
displays AS (
    SELECT kernel_id, min(kernel_display) AS kernel_display
    FROM (SELECT kernel_id, kernel_display FROM kernels UNION ALL SELECT kernel_id, kernel_display FROM kernel_launches)
    GROUP BY kernel_id),
verdicts AS (
    -- a launch without a duration (an ncu --metrics list) still has a verdict: "not enough data: ..."
    SELECT kernel_id, arg_max(CASE WHEN bottleneck = 'not enough data' THEN decided_by
                                   ELSE bottleneck || coalesce(' (' || limiting_unit || ')', '') END,
                              coalesce(duration_ns, -1)) AS bottleneck,
           arg_max(fix, coalesce(duration_ns, -1)) AS fix
    FROM bottleneck_class GROUP BY kernel_id)
"""
TOP_KERNELS = """
WITH """ + DISPLAY_AND_VERDICT + """
SELECT left(coalesce(any_value(d.kernel_display), any_value(t.kernel_base)), 60) AS kernel, library, op_class,
       sum(launches) AS launches,
       count(DISTINCT model) AS models, round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(gpu_time_ns) / sum(sum(gpu_time_ns)) OVER (), 1) AS share_pct,
       round(sum(sm_pct * gpu_time_ns) / nullif(sum(gpu_time_ns) FILTER (WHERE sm_pct IS NOT NULL), 0), 1) AS sm_pct,
       round(sum(dram_pct * gpu_time_ns) / nullif(sum(gpu_time_ns) FILTER (WHERE dram_pct IS NOT NULL), 0), 1) AS dram_pct,
       any_value(v.bottleneck) AS bottleneck,
       CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis,
       round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) / nullif(sum(gpu_time_ns), 0), 1)
           AS counter_coverage_pct
FROM kernel_time t LEFT JOIN displays d USING (kernel_id) LEFT JOIN verdicts v USING (kernel_id)
WHERE op_class IS DISTINCT FROM 'autotune'   -- XLA's compile-time autotuning (op_class_rules.csv): not the model's work
GROUP BY t.kernel_id, library, op_class ORDER BY gpu_time_us DESC NULLS LAST LIMIT ?
"""
# How well each model uses the GPU, the headline of `kwh summary` (views/model_efficiency.sql): MFU over
# the traced span and over busy time, tensor-core busy share, executed/useful FLOPs, throttled share, and
# the span at the roof / below it / idle. One row per run; ncu-only models rest on replay time.
MODEL_EFFICIENCY = """
SELECT model, left(run_id, 8) AS run, time_basis, round(mfu_pct, 1) AS mfu_pct, round(mfu_busy_pct, 1) AS mfu_busy_pct,
       round(tensor_busy_pct, 1) AS tensor_busy_pct, round(padding_factor, 2) AS padding_factor,
       round(throttled_pct, 1) AS throttled_pct, round(at_roof_pct, 1) AS at_roof_pct,
       round(below_roof_pct, 1) AS below_roof_pct, round(unplaced_pct, 1) AS unplaced_pct,
       round(idle_pct, 1) AS idle_pct, round(flops_coverage_pct, 1) AS flops_coverage_pct
FROM model_efficiency
ORDER BY model, time_basis DESC, run_id
"""
# The fleet's first fixes, by estimated time saved (what_to_fix_first)
FIX_FIRST = """
SELECT rank, signal, subject, model_list AS models, round(est_time_saved_ns / 1e3, 1) AS saved_us, saves,
       time_basis, fix
FROM what_to_fix_first ORDER BY rank LIMIT ?
"""
# One row per kernel identity (and classification); share_pct is of all GPU time in the selection.
KERNELS = """
WITH selected AS (SELECT * FROM kernel_time WHERE (? IS NULL OR model = ?)),""" + DISPLAY_AND_VERDICT + """
SELECT s.kernel_id, library, op_class, sum(launches) AS launches, count(DISTINCT model) AS models,
       round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(gpu_time_ns) / nullif((SELECT sum(gpu_time_ns) FROM selected), 0), 2) AS share_pct,
       coalesce(any_value(d.kernel_display), any_value(s.kernel_base)) AS kernel_display,
       any_value(v.bottleneck) AS bottleneck, any_value(v.fix) AS fix,
       any_value(s.kernel_base) AS kernel_base, any_value(kernel_signature) AS kernel_signature,
       CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis,
       round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) / nullif(sum(gpu_time_ns), 0), 1)
           AS counter_coverage_pct
FROM selected s LEFT JOIN displays d USING (kernel_id) LEFT JOIN verdicts v USING (kernel_id)
WHERE NOT ? OR library = 'unknown' OR op_class = 'unknown'
GROUP BY s.kernel_id, library, op_class
ORDER BY gpu_time_us DESC NULLS LAST, s.kernel_id
LIMIT ?
"""
# Models (and GPUs) whose answers rest on ncu's replayed durations only: no timeline on that GPU.
REPLAY_ONLY = """
SELECT DISTINCT model, gpu FROM kernel_time WHERE time_basis = 'ncu replay' AND (? IS NULL OR model = ?)
ORDER BY model, gpu
"""


def _query(warehouse: Warehouse, sql: str, params: list):
    con = warehouse.connect()
    try:
        cursor = con.execute(sql, params)
        return [d[0] for d in cursor.description], cursor.fetchall()
    finally:
        con.close()


def summary_tables(warehouse: Warehouse, top: int = 10):
    """(per-model table, top-kernels table), each as (column names, rows)."""
    return [_query(warehouse, PER_MODEL, []), _query(warehouse, TOP_KERNELS, [top])]


def model_efficiency(warehouse: Warehouse):
    """Model-level efficiency per model and run (views/model_efficiency.sql), as (column names, rows)."""
    return _query(warehouse, MODEL_EFFICIENCY, [])


def fix_first(warehouse: Warehouse, top: int = 5):
    """The fleet's first fixes by estimated time saved (what_to_fix_first), as (column names, rows)."""
    return _query(warehouse, FIX_FIRST, [top])


def kernel_list(warehouse: Warehouse, *, unclassified: bool = False, model: str | None = None,
                limit: int = 50):
    """Kernels by identity with their GPU time share; `unclassified` keeps those whose library or
    op class no rule matched (what to add to the rules files)."""
    return _query(warehouse, KERNELS, [model, model, unclassified, limit])


def replay_only(warehouse: Warehouse, model: str | None = None) -> list[tuple[str, str]]:
    """(model, gpu) pairs whose kernel times are ncu replay durations only (no nsys or PyTorch timeline)."""
    return _query(warehouse, REPLAY_ONLY, [model, model])[1]


def replay_note(pairs: list[tuple[str, str]]) -> str | None:
    """One plain sentence for the CLI and report when some answers rest on ncu replay time only."""
    if not pairs:
        return None
    models = sorted({m for m, _ in pairs})
    return (f"Note: {', '.join(models)} rest{'s' if len(models) == 1 else ''} on ncu replay time only (no nsys or PyTorch "
            "timeline of that model on that GPU): ncu serialises kernels and flushes caches, so small kernels read "
            "longer than in a real run and kernels outside its launch range are missing. Ingest a timeline "
            "(time_basis says which rows rest on which).")
