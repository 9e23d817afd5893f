"""The metrics table's layout, measured (issue 35 item 1): kwh's long table (one row per launch and metric,
clustered by metric, as store/files.write_parquet writes it) against a narrow fact table (run_id, launch_id,
metric_id, value, value_text) plus a per-run dimension (metric_id -> section, metric, source_metric, label,
unit, source_page), built from the same rows of an existing warehouse. Prints, for each layout: the CPU of
writing every run's file(s), the bytes on disk, and the CPU and wall of the metrics reads the views make
(one metric, ten metrics, every row), best of --repeat, each layout's files read by one DuckDB view
(`metrics` over the narrow layout is the join). Both layouts answer the same numbers (checked).

    .venv/bin/python bench/metrics_layout.py /tmp/fleet/wh          # a bench/run.py warehouse
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.parquet as pq

from kwarehouse import schema
from kwarehouse.settings import DEFAULT_SETTINGS
from kwarehouse.store.files import with_columns_of, write_parquet

DESCRIBED_BY = ["section", "metric", "source_metric", "label", "unit", "source_page"]
QUERIES = {
    "one metric (warp_stalls)": "SELECT count(*), sum(value) FROM {} WHERE metric = 'smsp__inst_executed.sum'",
    "ten metrics": "SELECT metric, count(*), sum(value) FROM {} WHERE metric IN ('smsp__inst_executed.sum', "
                   "'dram__bytes_read.sum', 'dram__bytes_write.sum', 'sm__throughput.avg.pct_of_peak_sustained_elapsed', "
                   "'gpu__time_duration.sum', 'launch__registers_per_thread', "
                   "'sm__warps_active.avg.pct_of_peak_sustained_active', 'l1tex__t_bytes.sum', 'lts__t_bytes.sum', "
                   "'device__attribute_l2_cache_size') GROUP BY 1 ORDER BY 1",
    "every row": "SELECT count(*), sum(value), count(value_text), count(DISTINCT section) FROM {}",
}


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def size(paths) -> int:
    return sum(os.path.getsize(p) for p in paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    stored = sorted((args.warehouse / "metrics").rglob("*.parquet"))
    spec = schema.tables()["metrics"]
    with tempfile.TemporaryDirectory(prefix="kwh-layout-") as tmp:
        work = Path(tmp)
        (work / "long").mkdir()
        (work / "values").mkdir()
        (work / "names").mkdir()
        long_cpu = narrow_cpu = 0.0
        for i, path in enumerate(stored):
            rows = with_columns_of(pq.read_table(path), spec.file_schema)
            started = cpu()
            write_parquet(work / "long" / f"{i}.parquet", "metrics", [rows], spec.file_schema, DEFAULT_SETTINGS)
            long_cpu += cpu() - started
            frame = pl.from_arrow(rows)
            # metric_id in metric-name order, values clustered by it: the narrow layout's best case for a
            # filter on the metric (its row groups' metric_id ranges then follow the names)
            names = (frame.select(DESCRIBED_BY).unique().sort("metric", "source_page", nulls_last=True)
                     .with_row_index("metric_id").with_columns(pl.col("metric_id").cast(pl.Int32)))
            values = (frame.join(names, on=DESCRIBED_BY, how="left", nulls_equal=True)
                      .select("run_id", "launch_id", "metric_id", "value", "value_text").sort("metric_id", "launch_id"))
            started = cpu()     # the write only: an ingest would build the dimension while parsing
            pq.write_table(values.to_arrow(), work / "values" / f"{i}.parquet", compression="zstd",
                           row_group_size=DEFAULT_SETTINGS.clustered_row_group_rows)
            pq.write_table(names.with_columns(pl.lit(frame["run_id"][0]).alias("run_id")).to_arrow(),
                           work / "names" / f"{i}.parquet", compression="zstd")
            narrow_cpu += cpu() - started
        con = duckdb.connect()
        con.execute(f"CREATE VIEW long_layout AS SELECT * FROM read_parquet('{work}/long/*.parquet')")
        con.execute(f"""CREATE VIEW narrow_layout AS
            SELECT v.run_id, v.launch_id, n.section, n.metric, n.source_metric, n.label, n.unit, v.value,
                   v.value_text, n.source_page
            FROM read_parquet('{work}/values/*.parquet') v
            JOIN read_parquet('{work}/names/*.parquet') n ON v.run_id = n.run_id AND v.metric_id = n.metric_id""")
        rows = pl.read_parquet(stored).height if stored else 0
        print(f"{len(stored)} runs, {rows:,} metric rows")
        print("| layout | write CPU-s (all runs) | MB on disk | " + " | ".join(f"{q} CPU-s / wall-s" for q in QUERIES) + " |")
        print("|---|---|---|" + "---|" * len(QUERIES))
        answers = {}
        for view, written, files in (("long_layout", long_cpu, list((work / "long").iterdir())),
                                     ("narrow_layout", narrow_cpu, [*(work / "values").iterdir(), *(work / "names").iterdir()])):
            cells = []
            for name, sql in QUERIES.items():
                best_cpu = best_wall = float("inf")
                for _ in range(args.repeat):
                    started, wall = cpu(), time.perf_counter()
                    answer = con.execute(sql.format(view)).fetchall()
                    best_cpu, best_wall = min(best_cpu, cpu() - started), min(best_wall, time.perf_counter() - wall)
                answers.setdefault(name, []).append(answer)
                cells.append(f"{best_cpu:.3f} / {best_wall:.3f}")
            print(f"| {view.split('_')[0]} | {written:.2f} | {size(files) / 1e6:.1f} | " + " | ".join(cells) + " |")
        for name, (long_answer, narrow_answer) in answers.items():
            # (sums in parallel differ in the last bits between any two runs)
            assert all(a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
                       for x, y in zip(long_answer, narrow_answer, strict=True)
                       for a, b in zip(x, y, strict=True)), (name, long_answer[:3], narrow_answer[:3])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
