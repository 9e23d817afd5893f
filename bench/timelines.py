"""Timeline ingest against its floors: PyTorch traces, nsys SQLite exports and nsys stats CSV (issue 23).

For each file, the median of --repeat runs in this process, wall and CPU (process_time) seconds:
  kwh        what ingest does with the file: ingest.sniff (which reader) + ingest.read_with (the reader)
  floor      traces: json.loads of the whole file + a pyarrow table of its GPU events (what a user's
             script does); msgspec: the same with msgspec.json.decode (the fastest parser installed).
             nsys: one SQL query per table kwh reads (kernels with their names, memcpy, memset, the
             CUDA calls, NVTX events) fetched into pyarrow tables.
             nsys stats CSV: the csv module over every line, each report block (a run of rows as wide
             as its header) into a pyarrow table of its cells.
  other      a second floor: traces, msgspec.json.decode + Arrow (the fastest parser installed; no
             orjson here); nsys stats CSV, polars.read_csv of the file where it reads it (one report
             per file: what a user's script does).
and kwh / floor by wall and by CPU. With --big-trace MB, a DERIVED trace of that size (the first trace's events repeated
under one traceEvents array, each copy shifted later in time with its own External id / correlation
numbers) is read in child processes, to compare peak memory (ru_maxrss) and time of json.loads and
of kwh's reader (and msgspec + Arrow). With --nsys-copies N, a DERIVED nsys export (the first SQLite's activity, runtime and
NVTX rows repeated N times, shifted likewise) is added; with --stats-copies N, a DERIVED nsys stats capture
(the first stats file with a cuda_gpu_trace block, that block's rows repeated N times with their Start
shifted). Derived files live in a temporary folder only.

With --fixed-cost (issue 35 item 4), each trace and nsys export is instead ingested by a whole
`kwh ingest` process into a fresh warehouse, against a whole floor process (this file run with
--floor-process: the floor's reading above plus pyarrow.parquet.write_table of its tables, with
only its own imports: json or sqlite3, and pyarrow) and, for traces with --hta-python PYTHON,
HolisticTraceAnalysis's TraceAnalysis of the trace run by that Python (HTA in its own environment).
Paired rounds (kwh, floor, HTA, kwh, ...) after one warm-up each; CPU is the child's user + system
time (getrusage), median and range. The kwh child runs with bytecode caching on, as an installed kwh
does (a PYTHONDONTWRITEBYTECODE checkout compiles kwh's ~60 modules in every process: ~0.05 s).

    .venv/bin/python bench/timelines.py                       # tests/data traces and nsys exports
    .venv/bin/python bench/timelines.py /tmp/corpus/a/*/trace.json ../shared/public-samples/*.sqlite \\
        --big-trace 500 --nsys-copies 2000
    .venv/bin/python bench/timelines.py --stats      # also tests/data's nsys stats CSV files
    .venv/bin/python bench/timelines.py --fixed-cost /tmp/c/gpt2_train/trace.json tests/data/nsys-sqlite-*/*.sqlite \\
        --hta-python /tmp/hta-venv/bin/python        # whole processes: kwh ingest against floor and HTA
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import statistics
import time
from pathlib import Path

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    import polars as pl
# msgspec, polars and kwarehouse are imported where used: the --floor-process child imports only what
# a user's script would (json or sqlite3, and pyarrow).

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INPUTS = sorted(ROOT.glob("tests/data/torch-trace-*/trace.json")) + sorted(
    p for p in ROOT.glob("tests/data/nsys-sqlite-*/*.sqlite"))
STATS_INPUTS = sorted(ROOT.glob("tests/data/nsys-stats-*/*.csv"))
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def timed(function, repeat: int) -> tuple[float, float]:
    """Median wall and median CPU seconds of `repeat` calls (a shared machine stretches walls; CPU less)."""
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls), statistics.median(cpus)


def gpu_table(trace: dict) -> pa.Table:
    """The floor's Arrow step: the GPU events' own columns."""
    events = [e for e in trace["traceEvents"] if e.get("cat") in GPU_CATEGORIES]
    args = [e.get("args") or {} for e in events]
    return pa.table({
        "name": [e.get("name") for e in events], "ts": [e.get("ts") for e in events],
        "dur": [e.get("dur") for e in events], "correlation": [a.get("correlation") for a in args],
        "external_id": [a.get("External id") for a in args], "stream": [a.get("stream") for a in args],
        "device": [a.get("device") for a in args]})


def floor_json(path: Path) -> pa.Table:
    return gpu_table(json.loads(path.read_bytes()))


def floor_msgspec(path: Path) -> pa.Table:
    import msgspec
    return gpu_table(msgspec.json.decode(path.read_bytes()))


def floor_nsys(path: Path) -> list[pa.Table]:
    con = sqlite3.connect(path.absolute().as_uri() + "?mode=ro&immutable=1", uri=True)  # as kwh opens it
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        queries = ["SELECT k.*, d.value AS demangled, s.value AS short FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                   "LEFT JOIN StringIds d ON d.id = k.demangledName LEFT JOIN StringIds s ON s.id = k.shortName"]
        queries += [f"SELECT * FROM {t}" for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                                                   "NVTX_EVENTS") if t in tables]
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            queries.append("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        out = []
        for query in queries:
            cursor = con.execute(query)
            names = [c[0] for c in cursor.description]
            rows = cursor.fetchall()
            out.append(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}))
        return out
    finally:
        con.close()


def floor_stats(path: Path) -> list[pa.Table]:
    """Every line through the csv module; each run of rows as wide as the row before it (its header)
    becomes one pyarrow table of text cells."""
    tables, header, cells = [], None, []

    def flush():
        if header is not None and cells:
            tables.append(pa.table({f"{i}:{name}": column for i, (name, column) in enumerate(zip(header, zip(*cells)))}))
    for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))):
        if header is not None and len(row) == len(header):
            cells.append(row)
            continue
        flush()
        header, cells = (row, []) if len(row) > 2 else (None, [])
    flush()
    return tables


def floor_polars(path: Path) -> pl.DataFrame | None:
    """polars.read_csv of a stats CSV file, or None where polars cannot read it (several reports)."""
    import polars as pl
    try:
        return pl.read_csv(path)
    except Exception:   # noqa: BLE001 - a capture of several report blocks is no single CSV table
        return None


def kwh(path: Path):
    from kwarehouse import ingest
    reader = ingest.sniff(path)
    return ingest.read_with(reader, path)


def measure(paths: list[Path], repeat: int) -> list[dict]:
    rows = []
    for path in paths:
        result = kwh(path)           # warm: imports, page cache
        timeline = result.timeline.height if result.timeline is not None else 0
        if timeline == 0:
            timeline = sum(frame.height for frame in (result.summaries, result.nvtx_summaries, *result.tables.values())
                           if frame is not None)
        row = {"file": str(path), "format": result.format, "MB": path.stat().st_size / 1e6, "rows": timeline}
        row["kwh_ms"], row["kwh_cpu_ms"] = (1e3 * t for t in timed(lambda: kwh(path), repeat))
        if result.format == "torch-trace":
            floor, other = floor_json, ("msgspec", floor_msgspec)
        else:
            floor, other = (floor_nsys, None) if result.format == "nsys-sqlite" else (floor_stats, ("polars", floor_polars))
        if other is not None and other[1](path) is not None:
            row["other"] = other[0]
            row["other_ms"], row["other_cpu_ms"] = (1e3 * t for t in timed(lambda: other[1](path), repeat))
        row["floor_ms"], row["floor_cpu_ms"] = (1e3 * t for t in timed(lambda: floor(path), repeat))
        rows.append(row)
    return rows


def derive_trace(source: Path, target: Path, megabytes: float) -> None:
    raw = source.read_bytes()
    start = raw.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = raw.rindex(b"]")
    body = raw[start:end].rstrip()
    stamps = [float(m) for m in re.findall(rb'"ts": ([0-9.]+)', body)]
    span = int(max(stamps) - min(stamps)) + 1000
    ts, ids = re.compile(rb'("ts": )(\d+)'), re.compile(rb'("(?:External id|correlation)": )(\d+)')
    with open(target, "wb") as out:
        out.write(raw[:start])
        for k in range(max(1, int(megabytes * 1e6 / len(body)))):
            copy = ts.sub(lambda m: m[1] + str(int(m[2]) + k * span).encode(), body)
            copy = ids.sub(lambda m: m[1] + str(int(m[2]) + k * 10_000_000).encode(), copy)
            out.write(copy if k == 0 else b"," + copy)
        out.write(raw[end:])


def derive_nsys(source: Path, target: Path, copies: int) -> None:
    shutil.copyfile(source, target)
    con = sqlite3.connect(target)
    span = con.execute("SELECT max(end) - min(start) + 1000 FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        if table not in tables:
            continue
        columns = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]

        def shifted(column: str) -> str:
            if column in ("start", "end"):
                return f'"{column}" + k * {span}'
            return f'"{column}" + k * 100000000' if column == "correlationId" else f'"{column}"'
        con.execute(f"CREATE TEMP TABLE one AS SELECT * FROM {table}")
        con.execute(f"WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < {copies - 1}) "
                    f"INSERT INTO {table} ({', '.join(repr(c).replace(chr(39), chr(34)) for c in columns)}) "
                    f"SELECT {', '.join(shifted(c) for c in columns)} FROM temp.one, n")
        con.execute("DROP TABLE temp.one")
    con.commit()
    con.close()


def derive_stats(source: Path, target: Path, copies: int) -> bool:
    """The capture with its cuda_gpu_trace block's rows repeated; False where it has no such block."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if line.startswith("Start") and ",GrdX," in line), None)
    if header is None:
        return False
    end = next((i for i in range(header + 1, len(lines)) if not lines[i].strip()), len(lines))
    rows = [next(csv.reader([line])) for line in lines[header + 1:end]]
    span = max(int(r[0]) for r in rows) - min(int(r[0]) for r in rows) + 1000
    copied = io.StringIO()
    writer = csv.writer(copied, lineterminator="\n")
    for k in range(copies):
        writer.writerows([str(int(r[0]) + k * span), *r[1:]] for r in rows)
    target.write_text("".join(lines[:header + 1]) + copied.getvalue() + "".join(lines[end:]), encoding="utf-8")
    return True


def child(kind: str, path: Path) -> None:
    """One measurement in a fresh process: seconds and peak RSS, as JSON on stdout."""
    start = time.perf_counter()
    {"json": floor_json, "msgspec": floor_msgspec, "kwh": kwh}[kind](path)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": time.perf_counter() - start, "cpu_seconds": usage.ru_utime + usage.ru_stime,
                      "peak_mb": usage.ru_maxrss / 1024}))


def in_child(kind: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", kind, str(path)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def floor_process(path: Path, out: Path) -> None:
    """The floor as a user's script runs it, in this (fresh) process: read, then write Parquet."""
    import pyarrow.parquet as pq
    tables = [floor_json(path)] if path.suffix == ".json" else floor_nsys(path)
    for number, table in enumerate(tables):
        pq.write_table(table, out / f"{number}.parquet")


HTA_SCRIPT = "import sys; from hta.trace_analysis import TraceAnalysis; TraceAnalysis(trace_dir=sys.argv[1])"


def child_cpu(command: list[str], env: dict | None = None) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one child process, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def fixed_cost(paths: list[Path], repeat: int, hta_python: str | None, folder: Path) -> list[dict]:
    """Whole processes per file (see the module's --fixed-cost): {contender: [(cpu, wall), ...]} rows."""
    kwh_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    for number, path in enumerate(paths):
        contenders = {}
        fresh = iter(range(10 ** 6))
        contenders["kwh"] = lambda: child_cpu(
            [sys.executable, "-m", "kwarehouse", "-w", str(folder / f"wh-{number}-{next(fresh)}"), "ingest",
             str(path)], kwh_env)
        out = folder / f"floor-{number}"
        out.mkdir()
        contenders["floor"] = lambda: child_cpu([sys.executable, __file__, "--floor-process", str(path), str(out)])
        if hta_python and path.suffix == ".json":
            trace_dir = folder / f"hta-{number}"
            trace_dir.mkdir()
            shutil.copyfile(path, trace_dir / path.name)
            contenders["HTA"] = lambda: child_cpu([hta_python, "-c", HTA_SCRIPT, str(trace_dir)])
        for run in contenders.values():
            run()                                     # warm-up: page cache, kwh's bytecode
        found = {name: [] for name in contenders}
        for _ in range(repeat):
            for name, run in contenders.items():
                found[name].append(run())
        rows.append({"file": str(path), "MB": path.stat().st_size / 1e6, **found})
    return rows


def print_fixed_cost(rows: list[dict], repeat: int) -> None:
    def cell(samples):
        cpus = sorted(cpu for cpu, _ in samples)
        return f"{statistics.median(cpus):.3f} ({cpus[0]:.3f}-{cpus[-1]:.3f})"

    def ratio(row, other):
        if other not in row:
            return "-"
        return f"{statistics.median(c for c, _ in row['kwh']) / statistics.median(c for c, _ in row[other]):.2f}"
    print(f"whole processes, median (range) of {repeat} paired rounds, CPU seconds (user + system); "
          f"load {os.getloadavg()[0]:.1f}")
    print("| file | MB | kwh ingest CPU s | floor CPU s | HTA CPU s | kwh / floor | kwh / HTA | kwh wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        wall = statistics.median(w for _, w in row["kwh"])
        print(f"| {row['file']} | {row['MB']:.2f} | {cell(row['kwh'])} | {cell(row['floor'])} | "
              f"{cell(row['HTA']) if 'HTA' in row else '-'} | {ratio(row, 'floor')} | {ratio(row, 'HTA')} | {wall:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--big-trace", type=float, metavar="MB", help="also a derived trace of about MB megabytes")
    parser.add_argument("--stats", action="store_true", help="also tests/data's nsys stats CSV files")
    parser.add_argument("--stats-copies", type=int, metavar="N",
                        help="also a derived nsys stats capture, its GPU trace rows N times")
    parser.add_argument("--nsys-copies", type=int, metavar="N", help="also a derived nsys export, N times the first")
    parser.add_argument("--fixed-cost", action="store_true",
                        help="whole processes: kwh ingest of each trace / nsys export against the floor's")
    parser.add_argument("--hta-python", metavar="PYTHON",
                        help="with --fixed-cost: a Python with HolisticTraceAnalysis installed, for traces")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--floor-process", nargs=2, type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child[0], Path(options.child[1]))
        return
    if options.floor_process:
        floor_process(*options.floor_process)
        return
    paths = (options.files or DEFAULT_INPUTS) + (STATS_INPUTS if options.stats else [])
    if options.fixed_cost:
        with tempfile.TemporaryDirectory(prefix="kwh-bench-fixed-") as folder:
            chosen = [p for p in paths if p.suffix in (".json", ".sqlite")]
            print_fixed_cost(fixed_cost(chosen, options.repeat, options.hta_python, Path(folder)), options.repeat)
        return
    with tempfile.TemporaryDirectory(prefix="kwh-bench-timelines-") as folder:
        sqlites = [p for p in paths if p.suffix == ".sqlite"]
        if options.nsys_copies and sqlites:
            derived = Path(folder) / f"derived-x{options.nsys_copies}.sqlite"
            derive_nsys(sqlites[0], derived, options.nsys_copies)
            paths = [*paths, derived]
        if options.stats_copies:
            derived = Path(folder) / f"derived-x{options.stats_copies}.csv"
            if any(derive_stats(p, derived, options.stats_copies) for p in paths if p.suffix == ".csv"):
                paths = [*paths, derived]
        rows = measure(paths, options.repeat)
        print(f"median of {options.repeat}; CPU = process_time")
        print("| file | format | MB | rows | kwh ms | kwh CPU ms | floor ms | floor CPU ms | kwh / floor | "
              "kwh / floor CPU | other floor | other ms | kwh / other | kwh / other CPU |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for row in rows:
            extra = (f"{row['other']} | {row['other_ms']:.2f} | {row['kwh_ms'] / row['other_ms']:.2f} | "
                     f"{row['kwh_cpu_ms'] / max(row['other_cpu_ms'], 1e-9):.2f}" if "other" in row else "- | - | - | -")
            print(f"| {row['file']} | {row['format']} | {row['MB']:.2f} | {row['rows']} | {row['kwh_ms']:.2f} | "
                  f"{row['kwh_cpu_ms']:.2f} | {row['floor_ms']:.2f} | {row['floor_cpu_ms']:.2f} | "
                  f"{row['kwh_ms'] / row['floor_ms']:.2f} | {row['kwh_cpu_ms'] / max(row['floor_cpu_ms'], 1e-9):.2f} | "
                  f"{extra} |")
        traces = [p for p in paths if p.suffix == ".json"]
        if options.big_trace and traces:
            big = Path(folder) / "big-trace.json"
            derive_trace(traces[0], big, options.big_trace)
            print(f"\nDERIVED trace of {big.stat().st_size / 1e6:.0f} MB from {traces[0]} (one process each):")
            print("| reader | seconds | CPU seconds (process) | peak RSS MB |")
            print("|---|---|---|---|")
            for kind, label in (("json", "json.loads + Arrow (floor)"), ("msgspec", "msgspec + Arrow (floor)"),
                                ("kwh", "kwh sniff + read")):
                found = in_child(kind, big)
                print(f"| {label} | {found['seconds']:.1f} | {found['cpu_seconds']:.1f} | {found['peak_mb']:.0f} |")


if __name__ == "__main__":
    main()
