"""`kwh rollup`: daily aggregates of every source's kernels, materialized as Parquet partitioned by day.

One row per day, model, GPU, kernel identity and tool: ncu runs give their replayed launches with counters
(SOL, hit rates, occupancy, stall reason, the share of time in each bottleneck class); nsys and PyTorch
runs give real timeline time (their launches, or an nsys stats export's kernel summary) and no counters.
The tools are never added together: ncu replay time and timeline time are different clocks.

The day of a run is its manifest date, else the day its export records (an nsys export's session start),
else the UTC day it was ingested. Each rollup records, per day, which runs it was computed from (a
hash of their ids and commit identities, catalog.rollup_coverage); a rollup run recomputes exactly the
days whose runs differ from that (a run added, taken out by check --repair, replaced by a re-ingest or
kwh renormalize) from all runs of those days, and drops the days no run has any more. No clock enters
the choice: a writer whose clock is behind or ahead commits runs that are rolled up all the same. A day
is always computed the same way from the same runs, so an incremental rollup equals `--full`, a second
rollup with nothing new writes nothing, and a late run for an old day rewrites that day only. `--full`
recomputes every day. `kwh check` recomputes a sample of days in memory (verify_sample).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from kwarehouse import schema
from kwarehouse.store import catalog
from kwarehouse.store.warehouse import Warehouse

ROLLUP_TABLES = ("rollup_kernels_daily", "rollup_libraries_daily")
# How many days kwh check recomputes: days an older kwh rolled up (no coverage recorded) first, then
# the newest, then days at random, so that successive checks go over all of them.
CHECK_SAMPLE_DAYS = 3
# Sums over the same rows in another file order (after kwh compact) differ in the last bits.
CHECK_RELATIVE_TOLERANCE = 1e-9

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
           time_weighted(sm_pct, duration_ns) AS sm_pct,
           time_weighted(dram_pct, duration_ns) AS dram_pct,
           time_weighted(mem_pct, duration_ns) AS mem_pct,
           time_weighted(l1_hit_pct, duration_ns) AS l1_hit_pct,
           time_weighted(l2_hit_pct, duration_ns) AS l2_hit_pct,
           time_weighted(achieved_occupancy_pct, duration_ns) AS achieved_occupancy_pct
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
    dropped: list[str] = field(default_factory=list)     # days removed: no run has them any more
    repairs: list[str] = field(default_factory=list)


def rollup(warehouse: Warehouse, full: bool = False) -> RollupReport:
    """Recompute the daily rollups of the days whose runs changed since their last rollup (all with full)."""
    report = RollupReport()
    if not warehouse.exists:
        return report
    with warehouse.writer() as session:
        report.repairs.extend(session.repairs)
        covered = {} if full else warehouse.rollup_coverage()
        present = warehouse.rollup_days()
        con = _connect(warehouse)
        try:
            current = _current_coverage(warehouse, con)
            days = sorted(day for day, runs in current.items() if covered.get(day) != runs[0])
            tables = compute(con, days)
        finally:
            con.close()
        drop: dict[str, list[str]] = {}
        for (name, day), rows in list(tables.items()):
            if rows.num_rows == 0:      # a day whose runs hold no kernels: no rollup file
                del tables[(name, day)]
                if day in present.get(name, []):
                    drop.setdefault(name, []).append(day)
        gone = sorted((set(covered) | {d for days_of in present.values() for d in days_of}) - set(current))
        for name in ROLLUP_TABLES:
            drop.setdefault(name, []).extend(d for d in gone if d in present.get(name, []))
        coverage: dict[str, tuple[str, int] | None] = {day: current[day] for day in days}
        coverage.update({day: None for day in gone})
        if tables or coverage:
            session.commit_rollup(tables, coverage, drop)
        report.days, report.dropped = days, gone
    return report


def _connect(warehouse: Warehouse) -> duckdb.DuckDBPyConnection:
    con = warehouse.connect()
    # one thread: sums add up in file order, so a day computes to the same bits every time
    con.execute("SET threads = 1")
    return con


def _current_coverage(warehouse: Warehouse, con: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, int]]:
    """day -> (runs_hash, number of runs) of the runs the connection's snapshot holds for each day."""
    identities = warehouse.run_identities()
    of_day: dict[str, list[tuple[str, str]]] = {}
    for run_id, _, day in con.execute(RUN_DAYS).fetchall():
        of_day.setdefault(str(day), []).append((run_id, identities.get(run_id, "")))
    return {day: (catalog.runs_hash(runs), len(runs)) for day, runs in of_day.items()}


def compute(con: duckdb.DuckDBPyConnection, days: list[str]) -> dict[tuple[str, str], pa.Table]:
    """(rollup table, day) -> its rows, computed from every run of those days."""
    tables: dict[tuple[str, str], pa.Table] = {}
    if not days:
        return tables
    for name, sql in (("rollup_kernels_daily", KERNELS_DAILY), ("rollup_libraries_daily", LIBRARIES_DAILY)):
        result = con.sql(sql.format(run_days=RUN_DAYS), params={"days": days}).to_arrow_table()
        for day in days:
            tables[(name, day)] = result.filter(pc.equal(pc.cast(result["day"], pa.string()), day))
    return tables


@dataclass
class RollupCheck:
    wrong: list[tuple[str, str]] = field(default_factory=list)   # (table, day) whose rows differ from a recompute
    checked: list[str] = field(default_factory=list)              # days recomputed
    pending: list[str] = field(default_factory=list)              # days whose runs changed since their rollup
    changed_meanwhile: bool = False                               # a writer committed during the check


def verify_sample(warehouse: Warehouse, sample: int = CHECK_SAMPLE_DAYS) -> RollupCheck:
    """Recompute a sample of rolled-up days in memory and compare them with their rollup rows; list the
    days whose runs changed since their last rollup (the next kwh rollup recomputes those)."""
    result = RollupCheck()
    present = warehouse.rollup_days()
    covered = warehouse.rollup_coverage()
    if not present and not covered:
        return result       # never rolled up
    generation = warehouse.snapshot().generation
    con = _connect(warehouse)
    try:
        current = _current_coverage(warehouse, con)
        rolled = {d for days_of in present.values() for d in days_of}
        # runs added, replaced or taken out since the day's rollup; a day an older kwh rolled up (no
        # coverage recorded) is not known to be stale: the sample below recomputes it
        changed = set()
        for day, (runs, _) in current.items():
            if covered.get(day) != runs and (day in covered or day not in rolled):
                changed.add(day)
        result.pending = sorted(changed | (set(covered) | rolled) - set(current))
        trusted = sorted(d for d in current if covered.get(d) == current[d][0])
        uncovered = sorted(d for d in rolled & set(current) if d not in covered)
        chosen = uncovered[:sample]
        rest = [d for d in trusted if d not in chosen]
        if rest and len(chosen) < sample:
            chosen.append(rest.pop())           # the newest
        chosen += random.sample(rest, min(len(rest), sample - len(chosen)))
        result.checked = sorted(chosen)
        computed = compute(con, result.checked)
        for name in ROLLUP_TABLES:
            for day in result.checked:
                stored = con.sql(f"SELECT * FROM {name} WHERE CAST(day AS VARCHAR) = $day",
                                 params={"day": day}).to_arrow_table()
                if not _same_rows(stored, schema.conform(name, computed[(name, day)])):
                    result.wrong.append((name, day))
    finally:
        con.close()
    if warehouse.snapshot().generation != generation:
        # a writer committed meanwhile: the connection's files and the identities read may disagree
        return RollupCheck(changed_meanwhile=True)
    return result


def _same_rows(stored: pa.Table, computed: pa.Table) -> bool:
    """Whether two tables hold the same rows (any order; numbers equal within CHECK_RELATIVE_TOLERANCE)."""
    columns = [c for c in stored.column_names if c in computed.column_names]
    if stored.num_rows != computed.num_rows or len(columns) != len(stored.column_names):
        return False

    def keyed(table: pa.Table) -> list[tuple]:
        rows = list(zip(*(table[c].to_pylist() for c in columns))) if table.num_rows else []
        return sorted(rows, key=lambda row: tuple(repr(v) for v in row if not isinstance(v, float)))

    for one, other in zip(keyed(stored), keyed(computed)):
        for a, b in zip(one, other):
            if isinstance(a, float) and isinstance(b, float):
                if not (a == b or math.isclose(a, b, rel_tol=CHECK_RELATIVE_TOLERANCE)
                        or (math.isnan(a) and math.isnan(b))):
                    return False
            elif str(a) != str(b):
                return False
    return True
