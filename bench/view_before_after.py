"""A view's SQL at an earlier commit against today's, on one warehouse: paired rounds (A B A B ...), each
a fresh connection to the published warehouse.duckdb (cold: nothing bound or cached), CPU of the process
and wall per query, and a row-for-row comparison of the answers (floats to 9 significant digits: parallel sums differ in
the last bits between runs of the same query).

    python bench/view_before_after.py WAREHOUSE --rev 954f0d6 --views design_signals,bottleneck_class

The earlier definition is created as a temporary view of the same name in the connection (it shadows the
published one for that connection alone), reading today's views beneath it: what is measured is the
change to the named views' own SQL.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import duckdb

from kwarehouse import views
from kwarehouse.store import fast_read

ROOT = Path(__file__).resolve().parents[1]


def earlier_sql(rev: str, name: str) -> str:
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:src/kwarehouse/views/{name}.sql"],
                          capture_output=True, text=True, check=True).stdout
    return text.strip().rstrip(";")


def one_query(warehouse: Path, name: str, sql: str | None) -> tuple[float, float, list]:
    con = fast_read.connect(warehouse)
    if con is None:
        raise SystemExit(f"{warehouse}: warehouse.duckdb is not current; run kwh check --repair")
    try:
        if sql is not None:
            con.execute(f'CREATE TEMP VIEW "{name}" AS {sql}')
        wall, cpu = time.perf_counter(), time.process_time()
        rows = con.execute(f'SELECT * FROM "{name}"').fetchall()
        return time.process_time() - cpu, time.perf_counter() - wall, rows
    finally:
        con.close()


def _comparable(rows: list) -> list[str]:
    # floats to 9 significant digits: DuckDB's parallel sums differ in the last bits from run to run
    return sorted(repr(tuple(float(f"{x:.9g}") if isinstance(x, float) else x for x in row)) for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse", type=Path)
    parser.add_argument("--rev", required=True, help="the commit whose definitions are 'before'")
    parser.add_argument("--views", default="design_signals", help="comma-separated view names")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    names = [n for n in args.views.split(",") if n]
    known = {v.name for v in views.creation_order()}
    print("| view | before CPU-s (median) | after CPU-s (median) | before wall-s | after wall-s | rows | same rows |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        if name not in known:
            raise SystemExit(f"no view {name}")
        before_sql = earlier_sql(args.rev, name)
        samples: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        answers = {}
        for _ in range(args.rounds):
            for label, sql in (("before", before_sql), ("after", None)):
                cpu, wall, rows = one_query(args.warehouse, name, sql)
                samples[label].append((cpu, wall))
                answers[label] = _comparable(rows)
        med = {label: (statistics.median(c for c, _ in s), statistics.median(w for _, w in s))
               for label, s in samples.items()}
        print(f"| {name} | {med['before'][0]:.2f} | {med['after'][0]:.2f} | {med['before'][1]:.2f} | "
              f"{med['after'][1]:.2f} | {len(answers['after'])} | {answers['before'] == answers['after']} |")


if __name__ == "__main__":
    main()
