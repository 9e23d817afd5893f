"""kwarehouse benchmark: ingest throughput and query latency on a synthetic fleet built from real exports.

The fleet replicates the real H100 corpus exports (raw and details pages of gpt2, gpt2_train, llama,
resnet18: ~110 kernels x ~830 metrics each) under new runs: each copy gets its own manifest (model
name, GPU, date) and its own process id in the CSV rows, so names, shapes and value distributions
stay real while every file is a distinct export. Baselines run on the same files in the same run:

  polars   bare polars.read_csv of the raw pages (the floor any CSV ingest pays)
  duckdb   DuckDB read_csv of the raw pages
  pandas   the script a user writes: read each details CSV, its metric values to numbers (thousands
           separators taken out, the rest NaN), pivot one row per kernel, write Parquet (issue 35's baseline)
  pandas_strings  the same pivot keeping the values as strings (this bench's baseline before issue 35;
           1.5-1.8x slower than the numeric one, so ratios against it flattered kwh)
  pandas_both  the strings script reading and writing both pages (the raw page as it is, one row per kernel)
  duckdb_pivot DuckDB read_csv + PIVOT + COPY TO parquet of each details page, one statement per run
(The "floor" baseline is gone: a prototype keeping strictly more than it, issue 35 measured, took 0.68x its
CPU, so it was no floor.)

kwh ingests the same files twice: in one process, and with --jobs 2 (two worker processes, the
driver commits). Ratios compare kernels per second (the pages differ in bytes per kernel). Above
--baseline-max runs the baselines run on the fleet's first chunks only: their kernels/s do not
depend on the fleet's size, and each costs minutes per 1,000 runs.

With --repeat N (fleets of one chunk), every ingest, kwh's and the baselines', runs N times in turn on the
same files (tool after tool, so load on the machine hits them alike) and the median wall counts; the
ratio table gives kwh / alternative by that median wall (per kernel where a baseline ran on fewer runs),
as issue 23 states its targets.

CLI start-up and one view end to end (median of 5 fresh processes each, on the compacted warehouse):
`kwh --help`, `kwh sql "select 1"`, `kwh query op_kernels --csv`, against a hand-written pandas script
computing the same rows from the same Parquet files and the view's own SQL run by DuckDB directly over
them (both print CSV too; the row counts are checked equal).

Query latency is the median of 5 runs (--query-repeat) of every view, queries/ file and the gpu_peaks table, warm (same connection) and
cold (a fresh connection). Each result is fetched whole as an Arrow table: the per-launch views
return a row per launch, and as Python tuples 1.1M rows at 10,000 runs would time the tuple
building. Queries run on the warehouse as ingested (one file per run and table; up to
--uncompacted-max runs) and after `kwh compact` (one file per partition and table, as the nightly
job leaves it). Peak RSS is measured on the ingest and query subprocesses (with --jobs 2: the driver
and the largest worker).

With pyspark and Java present (up to --spark-max runs), the same views and queries also run on a
local[2] Spark session over the compacted warehouse (session start, registration, first and warm
times), and a Spark ingest (--engine spark) of the same files is timed. Spark query times are the
first run and one more (Spark is here for its scaling, not its latency on one machine).

Fleets larger than --chunk runs are built, ingested and deleted one chunk at a time (appending to the
same warehouse, as nightly ingests do), so the input never needs more than one chunk of disk; times
add up over the chunks and peak RSS is the largest of any chunk. Usage:

    python bench/run.py                      # sizes 10,100,1000,10000
    python bench/run.py --sizes 10,100 --results bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("KWH_CORPUS", ROOT.parent / "shared" / "corpus" / "h100-2026-11"))
MODELS = ("gpt2", "gpt2_train", "llama", "resnet18")
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB")


def sources(work: Path) -> dict[str, Path]:
    """Folder per model with <m>.raw.csv and <m>.details.csv: from the corpus tarballs (../shared/corpus,
    or KWH_CORPUS), else the trimmed copies in examples/runs (12 kernels per run: a smoke test only)."""
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


def build_fleet(folder: Path, size: int, originals: dict[str, Path], first: int = 0) -> list[Path]:
    texts = {m: {page: (originals[m] / f"{m}.{page}.csv").read_text() for page in ("raw", "details")}
             for m in MODELS}
    pids = {m: texts[m]["raw"].splitlines()[2].split('","')[1] for m in MODELS}
    runs = []
    for i in range(first, first + size):
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


def child(code: str, *args: str) -> tuple[float, int, str, float]:
    """Run Python code in a fresh process: (seconds, peak RSS in MiB, stdout, CPU seconds). The CPU
    (user + system of the process and its children) tells a slow tool from a busy machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{result.stderr[-2000:]}")
    peak = int(result.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, peak, "\n".join(result.stdout.strip().splitlines()[:-1]), cpu


PEAK = ("import resource; print(max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) // 1024)")
KWH_INGEST = f"""
import sys
from pathlib import Path
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import fanout
from kwarehouse.store.warehouse import Warehouse
engine, jobs = sys.argv[3], int(sys.argv[4])
if engine == "spark":
    from kwarehouse import spark
    fan_out = fanout.spark_tasks(spark.local_session(jobs))
else:
    fan_out = fanout.process_pool(jobs) if jobs > 1 else None
report = ingest_job.ingest([Path(sys.argv[1])], Warehouse(sys.argv[2]), fan_out=fan_out)
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
def pandas_script(numbers: bool, both_pages: bool = False) -> str:
    """The pandas baselines, each a whole script as a user writes it: every details page pivoted to one
    row per kernel (its values as numbers, thousands separators taken out, or kept as strings) and
    written to Parquet; both_pages also writes the raw page as it is."""
    values = "value" if numbers else "Metric Value"
    to_numbers = ('    frame["value"] = pd.to_numeric(frame["Metric Value"].str.replace(",", "", regex=False), '
                  'errors="coerce")\n') if numbers else ""
    suffix = ".details" if both_pages else ""
    raw = ('    raw = pd.read_csv(p.with_name(p.name.replace(".details.csv", ".raw.csv")), dtype=str, skiprows=[1])'
           '  # row 2: units\n    raw.to_parquet(out / f"{i}.raw.parquet")\n') if both_pages else ""
    return f"""
import sys, pandas as pd
from pathlib import Path
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
n = 0
for i, p in enumerate(sorted(Path(sys.argv[1]).glob("*/*.details.csv"))):
    frame = pd.read_csv(p, dtype=str)
    frame = frame[frame["Metric Name"].notna()]
{to_numbers}    wide = frame.pivot_table(index=["ID", "Kernel Name"], columns="Metric Name", values="{values}", aggfunc="first")
    wide.columns = [str(c) for c in wide.columns]
    wide.reset_index().to_parquet(out / f"{{i}}{suffix}.parquet")
{raw}    n += len(wide)
print(n)
{PEAK}
"""


PANDAS, PANDAS_STRINGS, PANDAS_BOTH = pandas_script(True), pandas_script(False), pandas_script(False, both_pages=True)
# DuckDB's dialect sniffer gives up on ncu pages (NVTX cells span lines): the dialect is given, and
# null_padding makes its reader accept the quoted newlines (checked: the same rows and values as polars)
DUCKDB_PIVOT = f"""
import sys, duckdb
from pathlib import Path
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
n = 0
for i, p in enumerate(sorted(Path(sys.argv[1]).glob("*/*.details.csv"))):
    quoted = str(p).replace("'", "''")
    target = out / f"{{i}}.parquet"
    con.execute(f'''COPY (PIVOT (SELECT "ID", "Kernel Name", "Metric Name", "Metric Value"
                              FROM read_csv('{{quoted}}', all_varchar = true, header = true, delim = ',', quote = '"',
                                            escape = '"', null_padding = true)
                              WHERE "Metric Name" IS NOT NULL)
                       ON "Metric Name" USING first("Metric Value") GROUP BY "ID", "Kernel Name")
                 TO '{{target}}' (FORMAT parquet)''')
    n += con.execute("SELECT count(*) FROM read_parquet(?)", [str(target)]).fetchone()[0]   # (a PIVOT's COPY returns no count)
print(n)
{PEAK}
"""
COMPACT = f"""
import sys
from kwarehouse.jobs import compact as compact_job
from kwarehouse.store.warehouse import Warehouse
print(len(compact_job.compact(Warehouse(sys.argv[1]))))
{PEAK}
"""
QUERIES = f"""
import sys, time, statistics, json
from pathlib import Path
from kwarehouse import views
from kwarehouse.store.warehouse import Warehouse
warehouse = Warehouse(sys.argv[1])
sql = {{f"view {{v}}": f"SELECT * FROM {{v}}" for v in views.all_views()}}
sql.update({{f"query {{p.stem}}": p.read_text() for p in sorted(Path(sys.argv[2]).glob("*.sql"))}})
sql["table gpu_peaks"] = "SELECT * FROM gpu_peaks"
results = {{}}
for name, text in sql.items():
    started = time.perf_counter(); con = warehouse.connect(); con.execute("SET enable_progress_bar = false")
    con.sql(text).to_arrow_table(); cold = time.perf_counter() - started
    warm = []
    for _ in range(int(sys.argv[3])):
        started = time.perf_counter(); con.sql(text).to_arrow_table(); warm.append(time.perf_counter() - started)
    con.close()
    results[name] = (cold, statistics.median(warm))
print(json.dumps(results))
{PEAK}
"""
SPARK_QUERIES = f"""
import sys, time, json
from pathlib import Path
from kwarehouse import views, spark
started = time.perf_counter()
session = spark.local_session(2)
session.sparkContext.setLogLevel("ERROR")
session.range(1).collect()
results = {{"session start": (time.perf_counter() - started, None)}}
started = time.perf_counter()
spark.register(session, sys.argv[1])
results["register tables and views"] = (time.perf_counter() - started, None)
sql = {{f"view {{v}}": f"SELECT * FROM {{v}}" for v in views.all_views()}}
sql.update({{f"query {{p.stem}}": spark.transpile(p.read_text(), p.name) for p in sorted(Path(sys.argv[2]).glob("*.sql"))}})
sql["table gpu_peaks"] = "SELECT * FROM gpu_peaks"
for name, text in sql.items():
    started = time.perf_counter(); session.sql(text).toArrow(); first = time.perf_counter() - started
    started = time.perf_counter(); session.sql(text).toArrow(); second = time.perf_counter() - started
    results[name] = (first, second)
print(json.dumps(results))
{PEAK}
"""


def spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None


def measure(size: int, work: Path, originals: dict[str, Path], limits: argparse.Namespace, with_spark: bool) -> dict:
    """Ingest a fleet of `size` runs with kwh and the baselines, time the queries on the warehouse as
    ingested (one file per run and table), compact it as the nightly job does, and time them again."""
    row = {"runs": size, "input_mb": 0.0, "raw_mb": 0.0, "load": [], "repeat": 1}
    chunk = limits.chunk
    # (repeats would need a warehouse per repeat and chunk; large fleets take too long to repeat)
    repeat = limits.repeat if size <= min(chunk, limits.repeat_max) else 1
    row["repeat"] = repeat
    for first in range(0, size, chunk):
        tools = ["kwh_jobs2"]
        if first < limits.baseline_max:    # the baselines' rates do not depend on the fleet's size
            tools += [b for b in ("polars", "duckdb", "pandas", "pandas_strings", "pandas_both", "duckdb_pivot")
                      if b in limits.baselines]
        if size <= limits.one_process_max:
            tools.insert(0, "kwh")
        if with_spark and size <= limits.spark_max:
            tools.append("kwh_spark")
        fleet = work / f"fleet{size}-{first}"
        build_fleet(fleet, min(chunk, size - first), originals, first)
        row["input_mb"] += sum(p.stat().st_size for p in fleet.rglob("*.csv")) / 1e6
        row["raw_mb"] += sum(p.stat().st_size for p in fleet.rglob("*.raw.csv")) / 1e6
        chunk_seconds: dict[str, list[float]] = {}
        chunk_cpu: dict[str, list[float]] = {}
        for attempt in range(repeat):
            last = attempt == repeat - 1     # the last repeat's warehouses are kept for the queries
            suffix = "" if last else f"-try{attempt}"
            steps = {"polars": (POLARS, str(fleet)), "duckdb": (DUCKDB, str(fleet)),
                     "pandas": (PANDAS, str(fleet), str(work / f"pandas{size}")),
                     "pandas_strings": (PANDAS_STRINGS, str(fleet), str(work / f"pandas{size}")),
                     "pandas_both": (PANDAS_BOTH, str(fleet), str(work / f"pandas{size}")),
                     "duckdb_pivot": (DUCKDB_PIVOT, str(fleet), str(work / f"pandas{size}")),
                     "kwh": (KWH_INGEST, str(fleet), str(work / f"wh{size}-1{suffix}"), "local", "1"),
                     "kwh_jobs2": (KWH_INGEST, str(fleet), str(work / f"wh{size}{suffix}"), "local", "2"),
                     "kwh_spark": (KWH_INGEST, str(fleet), str(work / f"wh{size}-spark{suffix}"), "spark", "2")}
            for tool in tools:
                row["load"].append(os.getloadavg()[0])
                seconds, peak, out, cpu = child(*steps[tool])
                chunk_seconds.setdefault(tool, []).append(seconds)
                chunk_cpu.setdefault(tool, []).append(cpu)
                total = row.setdefault(tool, [0, 0.0, 0])      # kernels, seconds (median of the repeats), peak MiB
                if attempt == 0:
                    total[0] += int(out.splitlines()[-1])
                total[2] = max(total[2], peak)
                shutil.rmtree(work / f"pandas{size}", ignore_errors=True)
            for leftover in work.glob(f"wh{size}*-try{attempt}"):
                shutil.rmtree(leftover)
        for tool, times in chunk_seconds.items():
            row[tool][1] += statistics.median(times)
            row.setdefault("cpu", {}).setdefault(tool, 0.0)
            row["cpu"][tool] += statistics.median(chunk_cpu[tool])
        shutil.rmtree(fleet)
    row["baseline_runs"] = min(size, limits.baseline_max)
    if limits.ingest_only:
        row["cli"] = cli_times(work / f"wh{size}", work, limits.cli_repeat)
        for leftover in work.glob(f"wh{size}*"):
            shutil.rmtree(leftover)
        return row
    if size <= limits.uncompacted_max:
        seconds, peak, out, _ = child(QUERIES, str(work / f"wh{size}"), str(ROOT / "queries"), str(limits.query_repeat))
        row["queries_as_ingested"] = _json_line(out)
        row["query_peak_mb_as_ingested"] = peak
    seconds, peak, out, _ = child(COMPACT, str(work / f"wh{size}"))
    row["compact"] = (seconds, peak)
    seconds, peak, out, _ = child(QUERIES, str(work / f"wh{size}"), str(ROOT / "queries"), str(limits.query_repeat))
    row["queries"] = _json_line(out)
    row["query_peak_mb"] = peak
    row["cli"] = cli_times(work / f"wh{size}", work, limits.cli_repeat)
    if with_spark and size <= limits.spark_max:
        seconds, peak, out, _ = child(SPARK_QUERIES, str(work / f"wh{size}"), str(ROOT / "queries"))
        row["spark"] = _json_line(out)
    for leftover in work.glob(f"wh{size}*"):
        shutil.rmtree(leftover)
    return row


def kwh_command() -> list[str]:
    """The kwh console script of this interpreter's environment (what a user runs), else python -m kwarehouse."""
    script = Path(sys.executable).with_name("kwh")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kwarehouse"]


# op_kernels (framework op -> kernels, from the kernels table alone) as a user would write it in pandas and
# as its own SQL straight through DuckDB, both over the warehouse's Parquet files, printing CSV like kwh query
OP_KERNELS_PANDAS = """
import sys, pandas as pd
kernels = pd.read_parquet(sys.argv[1] + "/kernels", columns=["model", "gpu", "framework_op", "op_shapes", "kernel_id",
                          "library", "op_class", "kernel_base", "duration_ns", "grid_size"])
kernels = kernels[kernels["framework_op"].notna()].astype({"model": str, "gpu": str})
keys = ["model", "gpu", "framework_op", "op_shapes", "kernel_id", "library", "op_class"]
per_kernel = kernels.groupby(keys, dropna=False).agg(
    kernel_base=("kernel_base", "min"), launches=("kernel_id", "size"), gpu_time_ns=("duration_ns", "sum"),
    min_grid_size=("grid_size", "min"), max_grid_size=("grid_size", "max")).reset_index()
op_total = per_kernel.groupby(["model", "gpu", "framework_op"])["gpu_time_ns"].transform("sum")
per_kernel["op_time_pct"] = 100 * per_kernel["gpu_time_ns"] / op_total.where(op_total != 0)
per_kernel = per_kernel.sort_values(["model", "gpu", "framework_op", "gpu_time_ns", "kernel_id", "op_shapes"],
                                    ascending=[True, True, True, False, True, True])
per_kernel[keys[:7] + ["kernel_base", "launches", "gpu_time_ns", "op_time_pct", "min_grid_size", "max_grid_size"]].to_csv(
    sys.stdout, index=False)
"""
OP_KERNELS_DUCKDB = """
import sys, duckdb
from pathlib import Path
con = duckdb.connect()
con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{sys.argv[1]}/kernels/*/*/*.parquet', hive_partitioning = true)")
view = Path(sys.argv[2]).read_text()
con.sql(view).write_csv("/dev/stdout")
"""


def cli_times(warehouse: Path, work: Path, repeat: int = 5) -> dict:
    """Median wall of `repeat` fresh processes of kwh's start-up commands, and of one view (op_kernels)
    through kwh query, a pandas script and DuckDB directly, on `warehouse` (compacted)."""
    kwh = kwh_command()
    view = ROOT / "src" / "kwarehouse" / "views" / "op_kernels.sql"
    commands = {
        "kwh --help": kwh + ["--help"],
        'kwh sql "select 1"': kwh + ["-w", str(warehouse), "sql", "select 1"],
        "kwh query op_kernels --csv": kwh + ["-w", str(warehouse), "query", "op_kernels", "--csv"],
        "pandas script, same rows": [sys.executable, "-c", OP_KERNELS_PANDAS, str(warehouse)],
        "DuckDB directly, the view's SQL": [sys.executable, "-c", OP_KERNELS_DUCKDB, str(warehouse), str(view)],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = {}
    for name, command in commands.items():
        times, lines = [], None
        for _ in range(repeat):
            load = os.getloadavg()[0]
            started = time.perf_counter()
            result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
            times.append(time.perf_counter() - started)
            if result.returncode != 0:
                raise SystemExit(f"{name} failed:\n{result.stderr[-2000:]}")
            lines = len(result.stdout.strip().splitlines())
        out[name] = {"median_s": statistics.median(times), "load": load, "lines": lines}
    rows = {n: v["lines"] for n, v in out.items() if "op_kernels" in n or "script" in n or "DuckDB" in n}
    if len(set(rows.values())) != 1:
        raise SystemExit(f"op_kernels: the three ways printed different line counts: {rows}")
    return out


def _json_line(out: str) -> dict:
    """The results a query child printed as one JSON line."""
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def _rate(row: dict, tool: str) -> float | None:
    return row[tool][0] / row[tool][1] if tool in row else None


def _cell(value: float | None, fmt: str, suffix: str = "") -> str:
    return "not run" if value is None else format(value, fmt) + suffix


def table(rows: list[dict]) -> str:
    lines = ["| runs | input MB | kwh kernels/s (1 process) | kwh kernels/s (--jobs 2) | --jobs 2 / 1 process | "
             "kwh MB/s (--jobs 2) | polars kernels/s | duckdb kernels/s | pandas kernels/s | "
             "kwh / polars (1 process; --jobs 2) | kwh / pandas (1 process; --jobs 2) | "
             "kwh peak RSS MiB (1 process; --jobs 2) | Spark ingest kernels/s (local[2]) | baselines ran on (runs) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one, two, spark = _rate(r, "kwh"), _rate(r, "kwh_jobs2"), _rate(r, "kwh_spark")
        polars, pandas = _rate(r, "polars"), _rate(r, "pandas")
        lines.append(
            f"| {r['runs']} | {r['input_mb']:,.0f} | {_cell(one, ',.0f')} | {two:,.0f} | "
            f"{_cell(two / one if one else None, '.2f', 'x')} | {r['input_mb'] / r['kwh_jobs2'][1]:.1f} | "
            f"{_cell(polars, ',.0f')} | {_cell(_rate(r, 'duckdb'), ',.0f')} | {_cell(pandas, ',.0f')} | "
            f"{_cell(one / polars if one and polars else None, '.2f', 'x')}; {_cell(two / polars if polars else None, '.2f', 'x')} | "
            f"{_cell(one / pandas if one and pandas else None, '.2f', 'x')}; {_cell(two / pandas if pandas else None, '.2f', 'x')} | "
            f"{r['kwh'][2] if 'kwh' in r else 'not run'}; {r['kwh_jobs2'][2]} | {_cell(spark, ',.0f')} | "
            f"{r['baseline_runs']:,} |")
    return "\n".join(lines)


def query_table(rows: list[dict]) -> str:
    lines = ["| runs | kwh compact s (peak RSS MiB) | slowest DuckDB query, compacted: cold / warm (s) | "
             "DuckDB query peak RSS MiB, compacted | slowest DuckDB query as ingested: cold / warm (s) | "
             "DuckDB query peak RSS MiB as ingested | Spark session start (s) | "
             "Spark register (s) | slowest Spark query first / warm (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        slowest = max(r["queries"].items(), key=lambda kv: kv[1][0])
        if "queries_as_ingested" in r:
            before = max(r["queries_as_ingested"].items(), key=lambda kv: kv[1][0])
            before_cells = (f"{before[0]}: {before[1][0]:.3f} / {before[1][1]:.3f} | "
                            f"{r['query_peak_mb_as_ingested']}")
        else:
            before_cells = "not run | not run"
        spark = r.get("spark")
        if spark:
            timed = {k: v for k, v in spark.items() if k.startswith(("view", "query"))}
            slow = max(timed.items(), key=lambda kv: kv[1][0])
            spark_cells = (f"{spark['session start'][0]:.1f} | {spark['register tables and views'][0]:.1f} | "
                           f"{slow[0]}: {slow[1][0]:.2f} / {slow[1][1]:.2f}")
        else:
            spark_cells = "not run | not run | not run"
        lines.append(f"| {r['runs']} | {r['compact'][0]:.1f} ({r['compact'][1]}) | "
                     f"{slowest[0]}: {slowest[1][0]:.3f} / {slowest[1][1]:.3f} | "
                     f"{r['query_peak_mb']} | {before_cells} | {spark_cells} |")
    return "\n".join(lines)


def latency_table(rows: list[dict]) -> str:
    names = list(rows[0]["queries"])
    before_rows = [r for r in rows if "queries_as_ingested" in r]
    spark_rows = [r for r in rows if "spark" in r]
    header = ("| view or query | " + " | ".join(f"{r['runs']} runs compacted, DuckDB cold / warm (s)" for r in rows)
              + "".join(f" | {r['runs']} runs as ingested, DuckDB cold / warm (s)" for r in before_rows)
              + "".join(f" | {r['runs']} runs compacted, Spark first / warm (s)" for r in spark_rows) + " |")
    lines = [header, "|---|" + "---|" * (len(rows) + len(before_rows) + len(spark_rows))]
    for name in names:
        cells = [f"{r['queries'][name][0]:.3f} / {r['queries'][name][1]:.3f}" for r in rows]
        cells += [f"{r['queries_as_ingested'][name][0]:.3f} / {r['queries_as_ingested'][name][1]:.3f}"
                  for r in before_rows]
        cells += [f"{r['spark'][name][0]:.2f} / {r['spark'][name][1]:.2f}" for r in spark_rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _per_kernel(row: dict, tool: str) -> float | None:
    return row[tool][1] / row[tool][0] if tool in row and row[tool][0] else None


RATIO_ROWS = (("polars", "bare polars read of the raw pages (the parse floor)", None),
              ("pandas", "a pandas script: details page -> numbers -> pivot -> Parquet per run (the script a user writes)",
               "CPU <= 1.0x; --jobs 2 wall <= 0.5x"),
              ("pandas_strings", "the same pandas script keeping values as strings (the baseline before issue 35)", None),
              ("pandas_both", "the strings script reading and writing both pages", None),
              ("duckdb_pivot", "DuckDB `read_csv` + `PIVOT` + `COPY TO parquet` in one statement per run", None),
              ("duckdb", "DuckDB `read_csv` count of the raw pages", None))


def ratio_table(rows: list[dict]) -> str:
    """Issue 23's table: kwh's wall over each alternative's on the same runs (per kernel where the
    baselines ran on fewer runs), by the median of the repeats; above 1 kwh is slower."""
    sized = [r for r in rows if "pandas" in r]
    header = "| kwh ingest against | " + " | ".join(
        f"{r['runs']} runs: 1 process; --jobs 2" for r in sized) + " | target (1 process) |"
    lines = [header, "|---|" + "---|" * (len(sized) + 1)]
    for tool, label, target in RATIO_ROWS:
        cells = []
        for r in sized:
            one, two, alt = _per_kernel(r, "kwh"), _per_kernel(r, "kwh_jobs2"), _per_kernel(r, tool)
            cells.append(f"{_cell(one / alt if one and alt else None, '.2f', 'x')}; {_cell(two / alt if two and alt else None, '.2f', 'x')}")
        goal = target or "-"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {goal} |")
    cells = []
    for r in sized:
        one, two = _per_kernel(r, "kwh"), _per_kernel(r, "kwh_jobs2")
        cells.append(_cell(one / two if one and two else None, ".2f", "x gain"))
    lines.append("| `--jobs 2` against 1 process (speed-up; linear = 2.00x) | " + " | ".join(cells)
                 + " | >= 1.60x (80 % of linear) from 100 runs |")
    cells = []
    for r in sized:
        kwh_cpu = r["cpu"].get("kwh", 0) / r["kwh"][0] if "kwh" in r else None
        parts = [f"{tool} {kwh_cpu / (r['cpu'][tool] / r[tool][0]):.2f}x" if kwh_cpu else f"{tool} not run"
                 for tool in ("pandas", "pandas_strings", "duckdb_pivot") if tool in r]
        cells.append(", ".join(parts))
    lines.append("| the same by CPU seconds (user + system, all threads), 1 process: kwh / pandas (numeric), "
                 "kwh / pandas (strings), kwh / DuckDB PIVOT | "
                 + " | ".join(cells) + " | |")
    lines.append("| repeats (median of), load average (1 min) during the ingests | " + " | ".join(
        f"{r['repeat']}; {min(r['load']):.1f}-{max(r['load']):.1f}" for r in sized) + " | |")
    return "\n".join(lines)


def cli_table(rows: list[dict]) -> str:
    """Start-up and one view end to end, median of fresh processes."""
    sized = [r for r in rows if "cli" in r]
    lines = ["| command (fresh process, median of --cli-repeat) | " + " | ".join(
        f"{r['runs']} runs: s (load)" for r in sized) + " |", "|---|" + "---|" * len(sized)]
    for name in sized[0]["cli"] if sized else []:
        lines.append(f"| {name} | " + " | ".join(
            f"{r['cli'][name]['median_s']:.3f} ({r['cli'][name]['load']:.1f})" for r in sized) + " |")
    if sized:
        query, pandas, direct = ("kwh query op_kernels --csv", "pandas script, same rows", "DuckDB directly, the view's SQL")
        lines.append("| kwh query / pandas; kwh query / DuckDB directly | " + " | ".join(
            f"{r['cli'][query]['median_s'] / r['cli'][pandas]['median_s']:.2f}x; "
            f"{r['cli'][query]['median_s'] / r['cli'][direct]['median_s']:.2f}x" for r in sized) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000", help="fleet sizes in runs")
    parser.add_argument("--results", type=Path, help="also write the tables to this Markdown file")
    parser.add_argument("--chunk", type=int, default=1000, help="build and ingest larger fleets this many runs at a time")
    parser.add_argument("--one-process-max", type=int, default=1000,
                        help="above this many runs, ingest only with --jobs 2 (the one-process ingest of 10,000 runs "
                             "would take another hour here)")
    parser.add_argument("--baseline-max", type=int, default=1000,
                        help="run the polars, duckdb and pandas baselines on at most the first this-many runs of a "
                             "fleet (whole chunks): their kernels/s do not depend on the fleet's size")
    parser.add_argument("--uncompacted-max", type=int, default=1000,
                        help="also time the queries before kwh compact up to this many runs")
    parser.add_argument("--spark-max", type=int, default=1000,
                        help="run the Spark ingest and queries up to this many runs")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark measurements")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every ingest (kwh and the baselines) this many times in turn and take the median "
                             "wall (fleets of one chunk)")
    parser.add_argument("--baselines", default="polars,duckdb,pandas,pandas_strings,pandas_both,duckdb_pivot",
                        help="comma-separated baselines to run (default: all)")
    parser.add_argument("--ingest-only", action="store_true",
                        help="time the ingests and the CLI (on the warehouse as ingested), no compaction or query latency")
    parser.add_argument("--repeat-max", type=int, default=100, help="repeat only fleets of up to this many runs")
    parser.add_argument("--cli-repeat", type=int, default=5, help="fresh processes per CLI command timed (median)")
    parser.add_argument("--query-repeat", type=int, default=5,
                        help="warm runs per view and query timed on DuckDB (median; the test suite's smoke run uses 1)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.baselines = set(args.baselines.split(","))
    with_spark = not args.no_spark and spark_available()
    machine = (f"{platform.node()}: {os.cpu_count()} CPUs, "
               f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="kwh-bench-") as tmp:
        work = Path(tmp)
        originals = sources(work)
        origin = ("the real corpus (" + CORPUS.name + ")" if CORPUS.is_dir() else
                  "examples/runs (trimmed to 12 kernels per run; not representative)")
        print(f"fleet copied from {origin}", flush=True)
        rows = []
        for size in sizes:
            rows.append(measure(size, work, originals, args, with_spark))
            print(table(rows[-1:]), flush=True)
            print(ratio_table(rows[-1:]), flush=True)
            print(cli_table(rows[-1:]), flush=True)
            if not args.ingest_only:
                print(query_table(rows[-1:]), flush=True)
            text = (f"# kwarehouse benchmark\n\nMachine: {machine}. Fleet copied from: {origin}. "
                    f"Sizes: {args.sizes} runs "
                    f"(done: {', '.join(str(r['runs']) for r in rows)}). One run of bench/run.py.\n\n"
                    f"## Ingest\n\n{table(rows)}\n\n## kwh / alternative (wall, median)\n\n{ratio_table(rows)}\n\n"
                    f"## CLI start-up and one view end to end\n\n{cli_table(rows)}\n\n"
                    + ("" if args.ingest_only else f"## Queries\n\n{query_table(rows)}\n\n"
                       f"## Query latency per view and query\n\n{latency_table(rows)}\n"))
            if args.results:   # after every size, so a long run that is stopped keeps what it measured
                args.results.write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
