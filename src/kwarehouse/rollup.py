"""`kwh rollup`: daily aggregates of every source's kernels, materialized as Parquet partitioned by day.

One row per day, model, GPU, kernel identity and tool: ncu runs give their replayed launches with counters
(SOL, hit rates, occupancy, stall reason, the share of time in each bottleneck class); nsys and PyTorch
runs give real timeline time (their launches, or an nsys stats export's kernel summary) and no counters.
The tools are never added together: ncu replay time and timeline time are different clocks.

The day of a run is its manifest date, else the day its export records (an nsys export's session start),
else the UTC day it was ingested. A rollup run reads the
catalog's per-run update times, finds the days touched by runs committed (ingested, merged or
renormalized) since the last rollup, and recomputes exactly those days from all runs of those days:
a day is always computed the same way from the same runs, so an incremental rollup equals `--full`,
a second rollup with nothing new writes nothing, and a late run for an old day rewrites that day
only. `--full` recomputes every day and drops days no run has any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from kwarehouse.store import Warehouse

WATERMARK = "runs_updated_through"
ROLLUP_TABLES = ("rollup_kernels_daily", "rollup_libraries_daily")

# every run that can hold kernels (telemetry runs hold GPU samples only)
RUN_DAYS = """
SELECT run_id, tool, coalesce(run_date, CAST(ingested_at AS DATE)) AS day FROM runs WHERE tool <> 'telemetry'
"""
# Timeline kernels of the days asked for: launches of nsys/PyTorch runs, and the kernel summary of an nsys
# run exported as `nsys stats` only (instances and total time per kernel).
TIMELINE_KERNELS = """
timeline_kernels AS (
    SELECT d.day, d.tool, l.run_id, l.model, l.gpu, l.kernel_id, l.library, l.op_class, l.kernel_base,
           CAST(1 AS BIGINT) AS launches, CAST(l.duration_ns AS DOUBLE) AS total_ns
    FROM kernel_launches l JOIN run_days d USING (run_id)
    WHERE l.activity = 'kernel' AND list_contains($days, CAST(d.day AS VARCHAR))
    UNION ALL
    SELECT d.day, d.tool, s.run_id, s.model, s.gpu, s.kernel_id, s.library, s.op_class, s.kernel_base,
           s.instances, s.total_ns
    FROM kernel_summaries s JOIN run_days d USING (run_id)
    WHERE s.report = 'cuda_gpu_kern_sum' AND list_contains($days, CAST(d.day AS VARCHAR))
      AND s.run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)
)"""
# Per day, model, GPU, kernel identity and tool. Averages weight each launch by its duration.
KERNELS_DAILY = """
WITH run_days AS ({run_days}),
day_kernels AS (
    SELECT d.day, d.tool, k.* FROM kernels k JOIN run_days d USING (run_id) WHERE list_contains($days, CAST(d.day AS VARCHAR))
), stalls AS (
    SELECT k.day, k.model, k.gpu, k.kernel_id,
           regexp_extract(m.metric, '^smsp__average_warps_issue_stalled_(.+)_per_issue_active[.]ratio$', 1) AS reason,
           sum(m.value * k.duration_ns) AS weight
    FROM metrics m JOIN day_kernels k ON k.run_id = m.run_id AND k.launch_id = m.launch_id
    WHERE m.metric LIKE 'smsp__average_warps_issue_stalled_%_per_issue_active.ratio' AND m.value IS NOT NULL
      AND m.metric NOT LIKE '%stalled_selected_per%'
    GROUP BY ALL
), top_stall AS (
    SELECT day, model, gpu, kernel_id, arg_max(reason, weight) AS top_stall_reason FROM stalls GROUP BY ALL
), classes AS (
    SELECT d.day, b.model, b.gpu, b.kernel_id, b.bottleneck, sum(b.duration_ns) AS ns
    FROM bottleneck_class b JOIN run_days d USING (run_id) WHERE list_contains($days, CAST(d.day AS VARCHAR))
    GROUP BY ALL
), shares AS (
    SELECT day, model, gpu, kernel_id,
           100 * sum(ns) FILTER (WHERE bottleneck = 'compute-bound') / sum(ns) AS compute_bound_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'memory-bound') / sum(ns) AS memory_bound_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'cache-inefficient') / sum(ns) AS cache_inefficient_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'latency-bound') / sum(ns) AS latency_bound_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'launch-overhead') / sum(ns) AS launch_overhead_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'mixed') / sum(ns) AS mixed_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'occupancy-limited') / sum(ns) AS occupancy_limited_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'grid-too-small') / sum(ns) AS grid_too_small_pct,
           100 * sum(ns) FILTER (WHERE bottleneck = 'not enough data') / sum(ns) AS not_enough_data_pct
    FROM classes GROUP BY ALL
), main AS (
    SELECT day, model, gpu, kernel_id, 'ncu' AS tool, min(library) AS library, min(op_class) AS op_class,
           min(kernel_base) AS kernel_base, count(*) AS launches, count(DISTINCT run_id) AS runs,
           CAST(coalesce(sum(duration_ns), 0) AS DOUBLE) AS total_ns, avg(duration_ns) AS mean_ns,
           sum(sm_pct * duration_ns) / NULLIF(sum(CASE WHEN sm_pct IS NOT NULL THEN duration_ns END), 0) AS sm_pct,
           sum(dram_pct * duration_ns) / NULLIF(sum(CASE WHEN dram_pct IS NOT NULL THEN duration_ns END), 0) AS dram_pct,
           sum(mem_pct * duration_ns) / NULLIF(sum(CASE WHEN mem_pct IS NOT NULL THEN duration_ns END), 0) AS mem_pct,
           sum(l1_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l1_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l1_hit_pct,
           sum(l2_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l2_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l2_hit_pct,
           sum(achieved_occupancy_pct * duration_ns)
               / NULLIF(sum(CASE WHEN achieved_occupancy_pct IS NOT NULL THEN duration_ns END), 0) AS achieved_occupancy_pct
    FROM day_kernels GROUP BY day, model, gpu, kernel_id
), ncu_rows AS (
    SELECT m.*, t.top_stall_reason, s.compute_bound_pct, s.memory_bound_pct, s.cache_inefficient_pct,
           s.latency_bound_pct, s.launch_overhead_pct, s.mixed_pct, s.occupancy_limited_pct, s.grid_too_small_pct,
           s.not_enough_data_pct
    FROM main m
    LEFT JOIN top_stall t USING (day, model, gpu, kernel_id)
    LEFT JOIN shares s USING (day, model, gpu, kernel_id)
), """ + TIMELINE_KERNELS.strip() + """, timeline_rows AS (
    -- real time of nsys and PyTorch runs: no counters, so no rates, stall reason or classes
    SELECT day, model, gpu, kernel_id, tool, min(library) AS library, min(op_class) AS op_class,
           min(kernel_base) AS kernel_base, CAST(sum(launches) AS BIGINT) AS launches, count(DISTINCT run_id) AS runs,
           sum(total_ns) AS total_ns, sum(total_ns) / NULLIF(sum(launches), 0) AS mean_ns,
           CAST(NULL AS DOUBLE) AS sm_pct, CAST(NULL AS DOUBLE) AS dram_pct, CAST(NULL AS DOUBLE) AS mem_pct,
           CAST(NULL AS DOUBLE) AS l1_hit_pct, CAST(NULL AS DOUBLE) AS l2_hit_pct,
           CAST(NULL AS DOUBLE) AS achieved_occupancy_pct, CAST(NULL AS VARCHAR) AS top_stall_reason,
           CAST(NULL AS DOUBLE) AS compute_bound_pct, CAST(NULL AS DOUBLE) AS memory_bound_pct,
           CAST(NULL AS DOUBLE) AS cache_inefficient_pct, CAST(NULL AS DOUBLE) AS latency_bound_pct,
           CAST(NULL AS DOUBLE) AS launch_overhead_pct, CAST(NULL AS DOUBLE) AS mixed_pct,
           CAST(NULL AS DOUBLE) AS occupancy_limited_pct, CAST(NULL AS DOUBLE) AS grid_too_small_pct,
           CAST(NULL AS DOUBLE) AS not_enough_data_pct
    FROM timeline_kernels GROUP BY day, model, gpu, kernel_id, tool
)
SELECT * FROM ncu_rows
UNION ALL
SELECT * FROM timeline_rows
ORDER BY day, model, gpu, kernel_id, tool
"""
LIBRARIES_DAILY = """
WITH run_days AS ({run_days}),
""" + TIMELINE_KERNELS.strip() + """, all_kernels AS (
    SELECT d.day, 'ncu' AS tool, k.run_id, k.model, k.gpu, k.kernel_id, k.library, CAST(1 AS BIGINT) AS launches,
           CAST(k.duration_ns AS DOUBLE) AS total_ns
    FROM kernels k JOIN run_days d USING (run_id)
    WHERE list_contains($days, CAST(d.day AS VARCHAR))
    UNION ALL
    SELECT day, tool, run_id, model, gpu, kernel_id, library, launches, total_ns FROM timeline_kernels
)
SELECT day, model, gpu, tool, library, CAST(sum(launches) AS BIGINT) AS launches, count(DISTINCT run_id) AS runs,
       count(DISTINCT kernel_id) AS kernel_ids, CAST(coalesce(sum(total_ns), 0) AS DOUBLE) AS total_ns,
       100 * sum(total_ns) / NULLIF(sum(sum(total_ns)) OVER (PARTITION BY day, model, gpu, tool), 0) AS time_pct
FROM all_kernels
GROUP BY day, model, gpu, tool, library
ORDER BY 1, 2, 3, 4, 5
"""


@dataclass
class RollupReport:
    days: list[str] = field(default_factory=list)        # days recomputed
    dropped: list[str] = field(default_factory=list)     # days removed (--full: no run left)
    repairs: list[str] = field(default_factory=list)


def rollup(warehouse: Warehouse, full: bool = False) -> RollupReport:
    """Recompute the daily rollups of the days touched since the last rollup (all with full)."""
    report = RollupReport()
    if not warehouse.exists:
        return report
    with warehouse.writer() as repairs:
        report.repairs.extend(repairs)
        updates = dict(warehouse.run_updates())
        if not updates:
            return report
        state = warehouse.rollup_state()
        watermark = None if full or WATERMARK not in state else datetime.fromisoformat(state[WATERMARK])
        con = warehouse.connect()
        # one thread: sums add up in file order, so a day computes to the same bits every time
        con.execute("SET threads = 1")
        try:
            run_days = dict((r, str(d)) for r, _, d in con.execute(RUN_DAYS).fetchall())
            changed = [r for r, at in updates.items() if watermark is None or at > watermark]
            days = sorted({run_days[r] for r in changed if r in run_days} if not full else set(run_days.values()))
            tables: dict[tuple[str, str], pa.Table] = {}
            if days:
                for name, sql in (("rollup_kernels_daily", KERNELS_DAILY), ("rollup_libraries_daily", LIBRARIES_DAILY)):
                    result = con.sql(sql.format(run_days=RUN_DAYS), params={"days": days}).to_arrow_table()
                    for day in days:
                        rows = result.filter(pc.equal(pc.cast(result["day"], pa.string()), day))
                        tables[(name, day)] = rows
        finally:
            con.close()
        drop: dict[str, list[str]] = {}
        for (name, day), rows in list(tables.items()):
            if rows.num_rows == 0:      # a day whose runs are gone: its rollup files go too
                del tables[(name, day)]
                drop.setdefault(name, []).append(day)
        if full:
            present = warehouse.rollup_days()
            for name in ROLLUP_TABLES:
                stale = sorted(set(present.get(name, [])) - set(days))
                drop.setdefault(name, []).extend(stale)
                report.dropped.extend(stale)
        newest = max(updates.values()).isoformat()
        if tables or any(drop.values()) or state.get(WATERMARK) != newest:
            warehouse.commit_rollup(tables, {WATERMARK: newest}, drop)
        report.days = days
    return report
