"""What bounds ingest: cProfile of a one-process kwh ingest (ingest_job.ingest, as bench/run.py's kwh step)
of a fleet folder, printing the wall time, the top entries by own time and by cumulative time, and the
count and time of polars collect calls (issue 23 counted ~170 per run). cProfile sees one thread, so
the profile runs the stages one after the other (Settings.commit_behind off); --stages instead runs the
ingest as kwh does (reading, building and committing overlapped) and prints each stage's busy time.

    .venv/bin/python bench/profile_ingest.py /tmp/P-fleet100          # bench/run.py's build_fleet output
    .venv/bin/python bench/profile_ingest.py FLEET --top 25 --stats /tmp/ingest.prof
    .venv/bin/python bench/profile_ingest.py FLEET --stages
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse import build
from kwarehouse.settings import Settings
from kwarehouse.store.warehouse import Warehouse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fleet", type=Path, help="folder of run folders (ncu raw + details pages)")
    parser.add_argument("--top", type=int, default=20, help="entries per listing")
    parser.add_argument("--stats", type=Path, help="also save the raw profile here (pstats / snakeviz)")
    parser.add_argument("--stages", action="store_true",
                        help="no profiler: the overlapped ingest, with each stage's busy wall time")
    args = parser.parse_args()
    if args.stages:
        stage_times(args.fleet)
        return
    with tempfile.TemporaryDirectory(prefix="kwh-profile-") as tmp:
        warehouse = Warehouse(Path(tmp) / "wh", settings=Settings(commit_behind=False))
        profile = cProfile.Profile()
        load = os.getloadavg()[0]
        started, cpu_started = time.perf_counter(), time.process_time()
        profile.enable()
        report = ingest_job.ingest([args.fleet], warehouse)
        profile.disable()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    runs, kernels = len(report.runs), sum(r.kernels for r in report.runs)
    assert not report.failed, report.failed[:3]
    stats = pstats.Stats(profile)
    if args.stats:
        stats.dump_stats(args.stats)
    collect_calls = collect_seconds = 0
    for (filename, _, function), (_, calls, _, cumulative, _) in stats.stats.items():
        if function == "collect" and "polars" in filename:
            collect_calls += calls
            collect_seconds += cumulative
    print(f"{runs} runs, {kernels} kernels in {wall:.1f} s wall, {cpu:.1f} s CPU under the profiler "
          f"({1000 * wall / max(runs, 1):.0f} ms wall, {1000 * cpu / max(runs, 1):.0f} ms CPU per run; "
          f"load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: on a shared machine the "
          "wall includes waiting for a core and the disk, the CPU does not)")
    print(f"polars collect: {collect_calls} calls ({collect_calls / max(runs, 1):.1f} per run), {collect_seconds:.1f} s cumulative")
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
        print(f"\n--- top {args.top} by {order} ---")
        listing = text.getvalue()
        print(("ncalls" + listing.split("ncalls", 1)[1] if "ncalls" in listing else listing).rstrip())   # no preamble


def stage_times(fleet: Path) -> None:
    """Each stage's busy wall time in an ingest as kwh runs it (the stages overlap: their sum exceeds
    the wall; the stage busy for nearly the whole wall bounds it)."""
    busy = {"read_folder": 0.0, "build_batch": 0.0, "commit_built": 0.0}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                busy[name] += time.perf_counter() - started
        return wrapper

    # where each stage is looked up when the ingest calls it
    homes = {"read_folder": build.run, "build_batch": ingest_job, "commit_built": ingest_job}
    originals = {name: getattr(homes[name], name) for name in busy}
    for name, function in originals.items():
        setattr(homes[name], name, timed(name, function))
    try:
        with tempfile.TemporaryDirectory(prefix="kwh-stages-") as tmp:
            load = os.getloadavg()[0]
            started, cpu_started = time.perf_counter(), time.process_time()
            report = ingest_job.ingest([fleet], Warehouse(Path(tmp) / "wh"))
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        for name, function in originals.items():
            setattr(homes[name], name, function)
    print(f"{len(report.runs)} runs in {wall:.1f} s wall, {cpu:.1f} s CPU (all threads; load {load:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end)")
    for name, seconds in busy.items():
        print(f"  {name}: busy {seconds:.1f} s ({100 * seconds / wall:.0f} % of the wall)")


if __name__ == "__main__":
    main()
