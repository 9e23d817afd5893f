"""The short overview `kwh summary` prints after an ingest: kernels per model, top kernels by GPU time."""

from __future__ import annotations

from kwarehouse.store import Warehouse

PER_MODEL = """
SELECT model, gpu, count(DISTINCT run_id) AS runs, count(*) AS kernels,
       count(DISTINCT kernel_name) AS distinct_kernels,
       round(sum(duration_ns) / 1e3, 1) AS gpu_time_us
FROM kernels GROUP BY ALL ORDER BY model, gpu
"""
TOP_KERNELS = """
SELECT left(kernel_name, 70) AS kernel, count(*) AS launches, count(DISTINCT model) AS models,
       round(sum(duration_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(duration_ns) / sum(sum(duration_ns)) OVER (), 1) AS share_pct,
       round(sum(sm_pct * duration_ns) / nullif(sum(duration_ns), 0), 1) AS sm_pct,
       round(sum(dram_pct * duration_ns) / nullif(sum(duration_ns), 0), 1) AS dram_pct
FROM kernels GROUP BY kernel_name ORDER BY gpu_time_us DESC NULLS LAST LIMIT ?
"""


def summary_tables(warehouse: Warehouse, top: int = 10):
    """(per-model table, top-kernels table) as DuckDB relations' column names and rows."""
    con = warehouse.connect()
    out = []
    for sql, params in ((PER_MODEL, []), (TOP_KERNELS, [top])):
        cursor = con.execute(sql, params)
        out.append(([d[0] for d in cursor.description], cursor.fetchall()))
    con.close()
    return out
