"""Overviews the CLI prints: kernels per model, top kernels by GPU time, the kernel list by identity."""

from __future__ import annotations

from kwarehouse.store import Warehouse

# runs counts every run of the model (ncu, nsys, torch); the kernel columns are ncu's profiled launches.
PER_MODEL = """
WITH all_runs AS (SELECT model, gpu, count(*) AS runs,
                         string_agg(DISTINCT tool, ', ' ORDER BY tool) AS tools FROM runs GROUP BY ALL)
SELECT r.model, r.gpu, r.runs, r.tools, coalesce(k.kernels, 0) AS kernels,
       coalesce(k.distinct_kernels, 0) AS distinct_kernels, k.gpu_time_us
FROM all_runs r LEFT JOIN (
    SELECT model, gpu, count(*) AS kernels, count(DISTINCT kernel_id) AS distinct_kernels,
           round(sum(duration_ns) / 1e3, 1) AS gpu_time_us
    FROM kernels GROUP BY ALL) k USING (model, gpu)
ORDER BY r.model, r.gpu
"""
TOP_KERNELS = """
SELECT left(any_value(kernel_base), 60) AS kernel, library, op_class, count(*) AS launches,
       count(DISTINCT model) AS models, round(sum(duration_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(duration_ns) / sum(sum(duration_ns)) OVER (), 1) AS share_pct,
       round(sum(sm_pct * duration_ns) / nullif(sum(duration_ns), 0), 1) AS sm_pct,
       round(sum(dram_pct * duration_ns) / nullif(sum(duration_ns), 0), 1) AS dram_pct
FROM kernels GROUP BY kernel_id, library, op_class ORDER BY gpu_time_us DESC NULLS LAST LIMIT ?
"""
# One row per kernel identity (and classification); share_pct is of all GPU time in the selection.
KERNELS = """
WITH selected AS (SELECT * FROM kernels WHERE (? IS NULL OR model = ?))
SELECT kernel_id, library, op_class, count(*) AS launches, count(DISTINCT model) AS models,
       round(sum(duration_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(duration_ns) / nullif((SELECT sum(duration_ns) FROM selected), 0), 2) AS share_pct,
       any_value(kernel_base) AS kernel_base, any_value(kernel_signature) AS kernel_signature
FROM selected
WHERE NOT ? OR library = 'unknown' OR op_class = 'unknown'
GROUP BY kernel_id, library, op_class
ORDER BY gpu_time_us DESC NULLS LAST, kernel_id
LIMIT ?
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


def kernel_list(warehouse: Warehouse, *, unclassified: bool = False, model: str | None = None,
                limit: int = 50):
    """Kernels by identity with their GPU time share; `unclassified` keeps those whose library or
    op class no rule matched (what to add to the rules files)."""
    return _query(warehouse, KERNELS, [model, model, unclassified, limit])
