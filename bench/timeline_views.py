"""Latency of the real-GPU-time views (issue 20) at fleet scale: N timeline runs and N ncu runs.

bench/run.py builds its fleet by re-exporting and ingesting real files, which costs about an hour per
10,000 ncu runs and replicates no timelines. This bench replicates already-ingested real rows instead:
it ingests the corpus (its PyTorch traces and ncu exports) once, then writes N copies of each timeline
run's kernel_launches rows and of each ncu run's kernels rows as new runs (new run ids; model names
spread over --models x 6 models, so the fleet has as many (model, GPU) partitions as bench/run.py's),
one Parquet file per (table, model, GPU) partition, as `kwh compact` leaves a warehouse. Every value but
run_id and model is a real value of the corpus. The views then run in DuckDB over read_parquet of those
files, as kwh's sessions read a compacted warehouse; each result is fetched whole as an Arrow table.
As `kwh ingest` publishes warehouse.duckdb, the fleet's views go into a DuckDB file once, with the
views of views.MATERIALIZED computed into tables (timed: that cost is paid once per commit); every
reader then attaches that file read-only, as kwh's readers do. Cold = a fresh connection attaching it,
warm = median of 3 on one connection. --no-materialize measures the plain views instead.

    python bench/timeline_views.py /tmp/corpus/a --runs 10000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from kwarehouse import schema, views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import bind
from kwarehouse.store.warehouse import Warehouse

VIEWS = ["kernel_time", "kernel_popularity", "library_share", "speed_of_light", "time_weighted_kernels", "coverage",
         "bottleneck_share", "design_signals", "what_to_fix_first",
         "gpu_timeline", "launch_bound", "fusion_candidates", "nvtx_gpu_time", "rank_balance"]
REPLICATED = {"kernel_launches", "kernels", "runs"}


def build(corpus: Path, work: Path, runs: int, models: int) -> Path:
    """Ingest the corpus, then write the replicated fleet's Parquet under work/fleet; returns that folder."""
    warehouse = Warehouse(work / "wh")
    report = ingest_job.ingest([corpus], warehouse)
    if report.failed:
        print(f"(ignored {len(report.failed)} file(s) the ingest refused)")
    con = warehouse.connect()
    fleet = work / "fleet"
    fleet.mkdir(parents=True, exist_ok=True)
    timeline_runs = [r for (r,) in con.execute("SELECT DISTINCT run_id FROM kernel_launches ORDER BY 1").fetchall()]
    ncu_runs = [r for (r,) in con.execute("SELECT DISTINCT run_id FROM kernels ORDER BY 1").fetchall()]
    # copy i of source run s becomes run '<s>-<i>' of model '<model>_<i % models>'
    copies = con.sql(f"SELECT range AS copy FROM range({max(1, runs // max(len(timeline_runs), 1))})").to_arrow_table()
    con.register("copies", copies)
    for table in schema.tables():
        target = fleet / table
        if table in REPLICATED:
            sql = (f"SELECT * REPLACE (concat(run_id, '-', CAST(c.copy AS VARCHAR)) AS run_id, "
                   f"concat(model, '_', CAST(c.copy % {models} AS VARCHAR)) AS model) "
                   f"FROM {table} CROSS JOIN copies c")
        else:
            sql = f"SELECT * FROM {table}"
        count = con.execute(f"SELECT count(*) FROM ({sql})").fetchall()[0][0]
        if count == 0:
            continue
        if table.startswith("rollup"):
            continue
        partition = "PARTITION_BY (model, gpu), " if "model" in [c for c, _ in schema.tables()[table].sql_types] else ""
        con.execute(f"COPY ({sql}) TO '{target}' (FORMAT PARQUET, {partition}OVERWRITE_OR_IGNORE)")
    counts = {t: con.execute(f"SELECT count(*) FROM read_parquet('{fleet / t}/**/*.parquet')").fetchall()[0][0]
              for t in ("kernel_launches", "kernels", "runs") if (fleet / t).exists()}
    print(f"fleet: {len(timeline_runs)} timeline and {len(ncu_runs)} ncu runs x {copies.num_rows} copies; rows {counts}")
    con.close()
    return fleet


def session(fleet: Path, root: Path, path: str = ":memory:"):
    """A DuckDB connection (on `path`) with the base tables over the fleet's Parquet and every view."""
    con = duckdb.connect(path)
    for table, spec in schema.tables().items():
        folder = fleet / table
        if folder.exists():
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{folder}/**/*.parquet', "
                        "hive_partitioning = true, union_by_name = true)")
        else:
            columns = ", ".join(f'"{c}" {t}' for c, t in spec.sql_types)
            con.execute(f"CREATE TABLE {table} ({columns})")
    bind.add_reference_tables(con)          # metric_catalog, gpu_peaks: as kwh's own sessions
    views.create_all(con, root)
    return con


def publish(fleet: Path, root: Path, path: Path) -> float:
    """Write the published file as kwh's publish does (materialized views included); its seconds."""
    start = time.perf_counter()
    con = session(fleet, root, str(path))
    for view in views.creation_order():       # one at a time, in materialize's order, to show each cost
        if view.name in views.MATERIALIZED:
            began = time.perf_counter()
            views.materialize(con, (view.name,))
            print(f"  materialize {view.name:22s} {time.perf_counter() - began:6.2f} s", flush=True)
    con.execute("CHECKPOINT")
    con.close()
    return time.perf_counter() - start


def reader(published: Path | None, fleet: Path, root: Path):
    if published is None:
        return session(fleet, root)
    con = duckdb.connect()
    con.execute(f"ATTACH '{published}' AS kwh_published (READ_ONLY)")
    con.execute("SET search_path = 'memory.main,kwh_published.main'")
    return con


def measure(fleet: Path, root: Path, published: Path | None) -> list[tuple[str, float, float, int]]:
    out = []
    for name in VIEWS:
        con = reader(published, fleet, root)
        start = time.perf_counter()
        rows = con.sql(f"SELECT * FROM {name}").to_arrow_table().num_rows
        cold = time.perf_counter() - start
        warm, cpu = [], []
        for _ in range(3):
            start, started_cpu = time.perf_counter(), time.process_time()
            con.sql(f"SELECT * FROM {name}").to_arrow_table()
            warm.append(time.perf_counter() - start)
            cpu.append(time.process_time() - started_cpu)     # DuckDB's threads included
        con.close()
        out.append((name, cold, statistics.median(warm), rows))
        print(f"{name:24s} cold {cold:6.3f} s  warm {statistics.median(warm):6.3f} s  "
              f"(CPU {statistics.median(cpu):6.3f} s)  {rows:,} rows  load {os.getloadavg()[0]:.1f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a folder of real exports with PyTorch traces (the corpus)")
    parser.add_argument("--runs", type=int, default=10000, help="timeline runs in the fleet (as many ncu runs)")
    parser.add_argument("--models", type=int, default=50, help="copies of each model name (x 6 models)")
    parser.add_argument("--no-materialize", action="store_true", help="time the plain views (no published file)")
    parser.add_argument("--keep", type=Path, help="build the fleet in this folder and keep it; a fleet already "
                        "there is reused (its --runs and --models as built)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kwh-bench-timeline-") as tmp:
        if args.keep is not None and (args.keep / "fleet" / "kernel_launches").is_dir():
            fleet = args.keep / "fleet"
            print(f"fleet: reused {fleet}")
        else:
            fleet = build(args.corpus, args.keep or Path(tmp), args.runs, args.models)
        published = None
        if not args.no_materialize:
            published = (args.keep or Path(tmp)) / "published.duckdb"
            published.unlink(missing_ok=True)
            print(f"publish (views + {len(views.MATERIALIZED)} materialized): "
                  f"{publish(fleet, Path(tmp) / 'wh', published):.2f} s", flush=True)
        measure(fleet, Path(tmp) / "wh", published)


if __name__ == "__main__":
    main()
