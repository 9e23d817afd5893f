"""Views over a warehouse whose warehouse.duckdb keeps the heavy views as tables (store/materialize.py):
what each view costs a reader cold, what a commit costs, and the proof that the tables hold their views'
rows.

    python bench/materialized_views.py WAREHOUSE [--add RUN_FOLDER ...] [--compare] [--views a,b]

1. every view cold: a fresh connection each (kwh's reader: warehouse.duckdb attached when current), the
   whole result fetched as Arrow; wall and CPU of this process;
2. --add: each folder ingested as its own commit (kwh ingest in this process), wall and CPU, and how many
   partitions its publish computed;
3. --compare: every materialized table against its view computed in memory over the catalog's files (row
   for row in any order, floats to 1e-8 relative: per-partition sums add in another order).
The warehouse is changed by --add: run it on a copy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import duckdb

from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import connect, materialize
from kwarehouse.store.warehouse import Warehouse


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def cold_views(warehouse: Warehouse, names: list[str]) -> dict[str, tuple[float, float, int]]:
    out = {}
    for name in names:
        wall, started = time.perf_counter(), cpu()
        con = warehouse.connect()
        con.execute("SET enable_progress_bar = false")
        rows = con.sql(f'SELECT * FROM "{name}"').to_arrow_table().num_rows
        con.close()
        out[name] = (time.perf_counter() - wall, cpu() - started, rows)
    return out


def add(warehouse: Warehouse, folder: Path) -> dict:
    computed: list[int] = []
    refresh = materialize.refresh

    def counting(*args, **kwargs):
        computed.append(refresh(*args, **kwargs))
        return computed[-1]
    materialize.refresh = counting
    try:
        wall, started = time.perf_counter(), cpu()
        report = ingest_job.ingest([folder], warehouse)
        return {"folder": str(folder), "runs": len(report.runs),
                "wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(cpu() - started, 2),
                "partitions_computed": computed}
    finally:
        materialize.refresh = refresh


def _sort_key(row: tuple) -> tuple:
    return tuple(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in row)


def same_rows(got: list[tuple], want: list[tuple]) -> bool:
    """The same rows in any order, floats equal to 1e-8 relative: a sum taken per partition and then over
    partitions differs from the sum over launches in the last bits (0.167876562 against ...563)."""
    if len(got) != len(want):
        return False
    for a, b in zip(sorted(got, key=_sort_key), sorted(want, key=_sort_key)):
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-8, abs_tol=1e-12):
                    return False
            elif x != y:
                return False
    return True


def views_afresh(warehouse: Warehouse) -> duckdb.DuckDBPyConnection:
    """Every view computed as a view, in memory, over the catalog's files: what the tables must hold."""
    return connect.views_in_memory(warehouse.root, warehouse.snapshot())


def compare(warehouse: Warehouse) -> list[str]:
    published = warehouse.connect()
    expected = views_afresh(warehouse)
    differ = []
    for name in views.MATERIALIZED:
        rows = [con.execute(f'SELECT * FROM "{name}"').fetchall() for con in (published, expected)]
        if not same_rows(*rows):
            differ.append(f"{name} ({len(rows[0])} vs {len(rows[1])} rows)")
    return differ


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse", type=Path)
    parser.add_argument("--add", type=Path, nargs="*", default=[])
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--views", default="")
    args = parser.parse_args()
    warehouse = Warehouse(args.warehouse)
    names = args.views.split(",") if args.views else list(views.all_views())
    for folder in args.add:
        print(json.dumps({"commit": add(warehouse, folder)}), flush=True)
    for name, (wall, spent, rows) in cold_views(warehouse, names).items():
        print(f"{name:28s} cold {wall:6.2f} s wall {spent:6.2f} CPU-s {rows:>9,} rows", flush=True)
    if args.compare:
        differ = compare(warehouse)
        print("tables equal their views" if not differ else f"differ: {', '.join(differ)}")


if __name__ == "__main__":
    main()
