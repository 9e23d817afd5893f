"""kwarehouse benchmark: ingest throughput and query latency on a synthetic fleet built from real exports.

The fleet replicates the real H100 corpus exports (raw and details pages of gpt2, gpt2_train, llama,
resnet18: ~110 kernels x ~830 metrics each) under new runs: each copy gets its own manifest (model
name, GPU, date) and its own process id in the CSV rows, so names, shapes and value distributions
stay real while every file is a distinct export. Baselines run on the same files in the same run:

  polars   bare polars.read_csv of the raw pages (the floor any CSV ingest pays)
  duckdb   DuckDB read_csv of the raw pages
  pandas   what users write today: read each details CSV, pivot metrics per kernel, write Parquet

Ratios compare kernels per second (the pages differ in bytes per kernel). Query latency is the median
of 5 runs of every view and queries/ file, warm (same connection) and cold (a fresh connection).
Peak RSS is measured on the ingest and query subprocesses. Usage:

    python bench/run.py                      # sizes 10,100,1000,10000
    python bench/run.py --sizes 10,100 --results bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "h100-2026-11"
MODELS = ("gpt2", "gpt2_train", "llama", "resnet18")
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")


def sources(work: Path) -> dict[str, Path]:
    """Folder per model with <m>.raw.csv and <m>.details.csv: from the corpus tarballs, else examples/runs."""
    out = {}
    for model in MODELS:
        tarball = CORPUS / f"{model}.tar.xz"
        if tarball.exists():
            with tarfile.open(tarball) as archive:
                members = [m for m in archive.getmembers() if m.name.endswith((f"{model}.raw.csv", f"{model}.details.csv"))]
                archive.extractall(work / "src", members=members, filter="data")
            out[model] = work / "src" / model
        else:
            out[model] = ROOT / "examples" / "runs" / model
    return out


def build_fleet(folder: Path, size: int, originals: dict[str, Path]) -> list[Path]:
    texts = {m: {page: (originals[m] / f"{m}.{page}.csv").read_text() for page in ("raw", "details")}
             for m in MODELS}
    pids = {m: texts[m]["raw"].splitlines()[2].split('","')[1] for m in MODELS}
    runs = []
    for i in range(size):
        model = MODELS[i % len(MODELS)]
        run = folder / f"run{i:05d}"
        run.mkdir(parents=True)
        pid = str(1_000_000 + i)
        for page in ("raw", "details"):
            (run / f"{model}.{page}.csv").write_text(texts[model][page].replace(f'","{pids[model]}","', f'","{pid}","'))
        (run / "manifest.json").write_text(json.dumps({"model": f"{model}-v{i % 25}", "gpu": GPUS[i % len(GPUS)],
                                                       "date": f"2026-11-{1 + i % 28:02d}"}))
        runs.append(run)
    return runs


def child(code: str, *args: str) -> tuple[float, int, str]:
    """Run Python code in a fresh process: (seconds, peak RSS in MiB, stdout)."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{result.stderr[-2000:]}")
    peak = int(result.stdout.strip().splitlines()[-1])
    return elapsed, peak, "\n".join(result.stdout.strip().splitlines()[:-1])


PEAK = "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
KWH_INGEST = f"""
import sys
from pathlib import Path
from kwarehouse import pipeline
from kwarehouse.store import Warehouse
report = pipeline.ingest([Path(sys.argv[1])], Warehouse(sys.argv[2]))
assert not report.failed, report.failed[:3]
print(sum(r.kernels for r in report.runs))
{PEAK}
"""
POLARS = f"""
import sys, polars as pl
from pathlib import Path
n = 0
for p in sorted(Path(sys.argv[1]).glob("*/*.raw.csv")):
    n += pl.read_csv(p, infer_schema=False, skip_rows_after_header=1).height
print(n)
{PEAK}
"""
DUCKDB = f"""
import sys, duckdb
from pathlib import Path
con = duckdb.connect()
n = 0
for p in sorted(Path(sys.argv[1]).glob("*/*.raw.csv")):
    n += con.execute("SELECT count(*) - 1 FROM read_csv(?, all_varchar = true, header = true)", [str(p)]).fetchall()[0][0]
print(n)
{PEAK}
"""
PANDAS = f"""
import sys, pandas as pd
from pathlib import Path
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
n = 0
for i, p in enumerate(sorted(Path(sys.argv[1]).glob("*/*.details.csv"))):
    frame = pd.read_csv(p, dtype=str)
    frame = frame[frame["Metric Name"].notna()]
    wide = frame.pivot_table(index=["ID", "Kernel Name"], columns="Metric Name", values="Metric Value", aggfunc="first")
    wide.columns = [str(c) for c in wide.columns]
    wide.reset_index().to_parquet(out / f"{{i}}.parquet")
    n += len(wide)
print(n)
{PEAK}
"""
QUERIES = f"""
import sys, time, statistics, json
from pathlib import Path
from kwarehouse import views
from kwarehouse.store import Warehouse
warehouse = Warehouse(sys.argv[1])
sql = {{f"view {{v}}": f"SELECT * FROM {{v}}" for v in views.all_views()}}
sql.update({{f"query {{p.stem}}": p.read_text() for p in sorted(Path(sys.argv[2]).glob("*.sql"))}})
results = {{}}
for name, text in sql.items():
    started = time.perf_counter(); con = warehouse.connect(); con.execute("SET enable_progress_bar = false")
    con.execute(text).fetchall(); cold = time.perf_counter() - started
    warm = []
    for _ in range(5):
        started = time.perf_counter(); con.execute(text).fetchall(); warm.append(time.perf_counter() - started)
    con.close()
    results[name] = (cold, statistics.median(warm))
print(json.dumps(results))
{PEAK}
"""


def measure(size: int, work: Path, originals: dict[str, Path]) -> dict:
    fleet = work / f"fleet{size}"
    build_fleet(fleet, size, originals)
    megabytes = sum(p.stat().st_size for p in fleet.rglob("*.csv")) / 1e6
    raw_mb = sum(p.stat().st_size for p in fleet.rglob("*.raw.csv")) / 1e6
    row = {"runs": size, "input_mb": megabytes}
    seconds, peak, out = child(POLARS, str(fleet))
    row["polars"] = (int(out), seconds, peak)
    seconds, peak, out = child(DUCKDB, str(fleet))
    row["duckdb"] = (int(out), seconds, peak)
    seconds, peak, out = child(PANDAS, str(fleet), str(work / f"pandas{size}"))
    row["pandas"] = (int(out), seconds, peak)
    seconds, peak, out = child(KWH_INGEST, str(fleet), str(work / f"wh{size}"))
    row["kwh"] = (int(out), seconds, peak)
    row["raw_mb"] = raw_mb
    seconds, peak, out = child(QUERIES, str(work / f"wh{size}"), str(ROOT / "queries"))
    row["queries"] = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    row["query_peak_mb"] = peak
    shutil.rmtree(fleet)
    shutil.rmtree(work / f"pandas{size}", ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    lines = ["| runs | input MB | kwh kernels/s | kwh MB/s | polars kernels/s | duckdb kernels/s | pandas kernels/s | "
             "kwh / polars | kwh / pandas | kwh peak RSS MiB | slowest query cold / warm (s) | query peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = {k: r[k][0] / r[k][1] for k in ("kwh", "polars", "duckdb", "pandas")}
        slowest = max(r["queries"].items(), key=lambda kv: kv[1][0])
        lines.append(f"| {r['runs']} | {r['input_mb']:.0f} | {rate['kwh']:,.0f} | {r['input_mb'] / r['kwh'][1]:.1f} | "
                     f"{rate['polars']:,.0f} | {rate['duckdb']:,.0f} | {rate['pandas']:,.0f} | "
                     f"{rate['kwh'] / rate['polars']:.2f}x | {rate['kwh'] / rate['pandas']:.2f}x | {r['kwh'][2]} | "
                     f"{slowest[0]}: {slowest[1][0]:.3f} / {slowest[1][1]:.3f} | {r['query_peak_mb']} |")
    return "\n".join(lines)


def latency_table(rows: list[dict]) -> str:
    names = list(rows[0]["queries"])
    header = "| view or query | " + " | ".join(f"{r['runs']} runs cold / warm (s)" for r in rows) + " |"
    lines = [header, "|---|" + "---|" * len(rows)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{r['queries'][name][0]:.3f} / {r['queries'][name][1]:.3f}"
                                                 for r in rows) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000", help="fleet sizes in runs")
    parser.add_argument("--results", type=Path, help="also write the tables to this Markdown file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="kwh-bench-") as tmp:
        work = Path(tmp)
        originals = sources(work)
        rows = []
        for size in sizes:
            rows.append(measure(size, work, originals))
            print(table(rows[-1:]), flush=True)
    machine = (f"{platform.node()}: {os.cpu_count()} CPUs, "
               f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, Python {platform.python_version()}")
    text = (f"# kwarehouse benchmark\n\nMachine: {machine}. Sizes: {args.sizes} runs. One run of bench/run.py.\n\n"
            f"## Ingest and query summary\n\n{table(rows)}\n\n## Query latency per view and query\n\n{latency_table(rows)}\n")
    print("\n" + text)
    if args.results:
        args.results.write_text(text)


if __name__ == "__main__":
    main()
