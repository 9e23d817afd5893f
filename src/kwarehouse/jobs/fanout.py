"""Ingest fan-out: read, normalize and stage folders of exports in parallel (worker processes with
`kwh ingest --jobs N`, or Spark tasks with `--engine spark`) with build/'s steps; the driver
(jobs/ingest.py, ingest_fanned_out) commits each staged run through the catalog, one at a time, in
folder order.

Why the result equals a one-process ingest: the driver holds the writer lock from before the first
task starts until the last commit, so the catalog the workers were given (which files and runs are
already in) cannot change under them. A folder whose runs need the driver's view of the warehouse
(it adds pages to a run already committed, or repeats content another folder of this ingest had) is
read again on the driver by the one-process code path, and its staged files are discarded.

Workers write Parquet only under the warehouse's staging folder, which no reader lists; a crash
leaves nothing there that the next writer does not remove. The warehouse folder must be one path
that the driver and every worker reach (local disk for local[N] and --jobs, a shared mount on a
cluster), and so must the sources.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kwarehouse import build, normalize, schema
from kwarehouse.build.batch import batchable, together
from kwarehouse.build.isolate import isolated, one_line, warehouse_fault
from kwarehouse.build.report import EmptyCapture, IngestReport, RunSummary
from kwarehouse.build.sources import Known, Source, stored_path
from kwarehouse.errors import KwhError
from kwarehouse.settings import DEFAULT_SETTINGS, Settings
from kwarehouse.store.files import StagedRun, Stager
from kwarehouse.store.session import IngestedFile
from kwarehouse.store.warehouse import Warehouse

log = logging.getLogger(__name__)

# A job: (position in job order, the files of one or more folders as (path, named by the user)).
Job = tuple[int, list[tuple[str, bool]]]


@dataclass(frozen=True)
class IngestContext:
    """What every worker needs, sent once per worker (not per folder)."""
    warehouse_root: str
    stage_dir: str                    # the driver's writer session folder: workers stage under it
    format: str | None
    model: str | None
    tags: dict[str, str]
    ingested: dict[str, str]          # sha256 -> run id of every file already in the warehouse
    ingested_paths: frozenset[str]    # where they were read from (a longer file there may replace a run)
    existing_runs: frozenset[str]
    driver_pid: int = 0               # workers stop when it is gone
    known_empty: dict[str, str] = field(default_factory=dict)   # sha256 -> why it holds nothing to store
    settings: Settings = DEFAULT_SETTINGS   # the driver's warehouse's


@dataclass
class PreparedRun:
    staged: StagedRun
    files: list[IngestedFile]
    summary: RunSummary


@dataclass
class FolderResult:
    index: int
    paths: list[str]
    shas: list[str] = field(default_factory=list)     # every file content read
    runs: list[PreparedRun] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)   # IngestReport.fallbacks
    empty: list[EmptyCapture] = field(default_factory=list)
    redo: bool = False    # the driver must ingest this folder itself (see the module docstring)


# A fan-out: runs prepare_folder over the jobs with the context, yields results in job order.
FanOut = Callable[[list[Job], IngestContext], Iterable[FolderResult]]


def prepare_folder(job: Job, context: IngestContext) -> FolderResult:
    """Read one folder, build its runs and stage their Parquet files: the work of one task. A failure
    that neither a file nor the warehouse explains (a bug of this path) sends the job back to the
    driver, which ingests its folders itself, file by file isolated (recorded in fallbacks)."""
    try:
        return _prepare_folder(job, context)
    except Exception as exc:   # noqa: BLE001 - the driver redoes the job; a warehouse's failure stops it
        if warehouse_fault(exc):
            raise
        log.debug("a fan-out job failed; the driver ingests it", exc_info=True)
        return FolderResult(job[0], [p for p, _ in job[1]], redo=True, fallbacks=[
            f"{len(job[1])} file(s) of {len({str(Path(p).parent) for p, _ in job[1]})} folder(s) were read again "
            f"by the driver: the worker's job failed ({one_line(exc)})"])


def _prepare_folder(job: Job, context: IngestContext) -> FolderResult:
    index, files = job
    warehouse = Warehouse(context.warehouse_root, settings=context.settings)   # rules only: no catalog access here
    stager = Stager(Path(context.stage_dir), context.settings)     # the driver's session commits what it stages
    result = FolderResult(index, [p for p, _ in files])
    report = IngestReport()
    seen: set[str] = set()
    known = Known.snapshot(context.ingested, context.known_empty)
    groups = build.run.read_folder([(Path(p), explicit) for p, explicit in files], context.format, known, {}, seen,
                                   report)
    result.shas = sorted(seen)
    result.skipped, result.failed, result.empty = report.skipped, report.failed, report.empty
    if any(run_id in context.existing_runs for run_id in groups) or any(
            stored_path(Path(p)) in context.ingested_paths for p in result.paths):
        result.redo = True
        return result
    # loaded per folder, not cached: Spark reuses its Python workers across jobs, and a warehouse's
    # rules may change between two ingests
    rules = normalize.KernelRules.load(warehouse.rules_dir)
    batch = {run_id: members for run_id, members in groups.items() if batchable(members)}
    built_runs = build.batch.build_together(batch, rules, context.model, context.tags, report, warehouse.root)
    staged_runs = built_runs and together(batch, "staging", lambda: stager.stage_runs(
        [(run_id, b.model, b.gpu, b.tables) for run_id, b in built_runs.items()]), report, warehouse.root)
    prepared = {s.run_id: PreparedRun(s, built_runs[s.run_id].files, built_runs[s.run_id].summary)
                for s in staged_runs or []}
    for run_id, members in groups.items():
        if run_id in prepared:
            result.runs.append(prepared[run_id])
            continue

        def stage(of_run: list[Source], run_id=run_id) -> PreparedRun:
            built = build.run.build_run(run_id, of_run, {}, rules, context.model, context.tags)
            return PreparedRun(stager.stage_run(run_id, built.model, built.gpu, built.tables),
                               built.files, built.summary)

        def check(member: Source, run_id=run_id) -> None:
            built = build.run.build_run(run_id, [member], {}, rules, context.model, context.tags)
            for name, table in built.tables.items():
                schema.conform(name, table)
        if (run := isolated(members, stage, check, report.failed)) is not None:
            result.runs.append(run)
    result.failed, result.fallbacks = report.failed, report.fallbacks
    return result


def job_folders(batches: list[list[tuple[Path, bool]]], settings: Settings) -> list[list[int]]:
    """The folders (positions in `batches`) of each job, in order: up to Settings.job_folders folders
    or Settings.job_bytes of files a job (why those: kwarehouse.settings)."""
    jobs: list[list[int]] = []
    size = 0
    for index, batch in enumerate(batches):
        folder_bytes = 0
        for path, _ in batch:
            try:
                folder_bytes += path.stat().st_size
            except OSError:
                pass
        if not jobs or len(jobs[-1]) >= settings.job_folders or size + folder_bytes > settings.job_bytes:
            jobs.append([])
            size = 0
        jobs[-1].append(index)
        size += folder_bytes
    return jobs


# -- fan-outs ----------------------------------------------------------------------------------

def process_pool(jobs: int) -> FanOut:
    """Prepare folders in `jobs` worker processes on this machine (kwh ingest --jobs)."""
    def fan_out(work: list[Job], context: IngestContext) -> Iterator[FolderResult]:
        # fresh interpreters, not fork: the parent's DuckDB and polars thread pools do not survive fork
        spawn = multiprocessing.get_context("spawn")
        # each worker's polars gets its share of the cores, not all of them
        saved = os.environ.get("POLARS_MAX_THREADS")
        os.environ["POLARS_MAX_THREADS"] = str(max(1, (os.cpu_count() or 1) // jobs))
        try:
            with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_set_context,
                                     initargs=(context,)) as pool:
                yield from pool.map(_prepare_with_context, work)
        finally:
            if saved is None:
                os.environ.pop("POLARS_MAX_THREADS", None)
            else:
                os.environ["POLARS_MAX_THREADS"] = saved
    return fan_out


_CONTEXT: IngestContext | None = None


def _set_context(context: IngestContext) -> None:
    global _CONTEXT
    _CONTEXT = context
    _die_with_parent(context.driver_pid)


def _die_with_parent(parent: int) -> None:
    """A worker whose driver is gone (kill -9) stops at once instead of finishing folders nobody will
    commit: the kernel's parent-death signal where there is one, and a watchdog thread everywhere."""
    import signal
    import threading
    import time
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:     # the driver died before this worker got here
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="kwh-parent-watch").start()


def _prepare_with_context(job: Job) -> FolderResult:
    assert _CONTEXT is not None
    return prepare_folder(job, _CONTEXT)


def spark_tasks(session) -> FanOut:
    """Prepare folders as tasks of a Spark job on `session`'s executors (kwh ingest --engine spark).
    The context goes to executors once, as a broadcast variable."""
    def fan_out(work: list[Job], context: IngestContext) -> list[FolderResult]:
        sc = session.sparkContext
        shared = sc.broadcast(context)
        try:
            slices = max(1, min(len(work), sc.defaultParallelism * 4))
            results = sc.parallelize(work, slices).map(lambda job: prepare_folder(job, shared.value)).collect()
        except Exception as exc:
            if "py4j" not in type(exc).__module__ and "pyspark" not in type(exc).__module__:
                raise
            raise KwhError(f"a Spark ingest task failed (nothing was committed): {_last_error_line(exc)}") from None
        finally:
            shared.unpersist()
        return sorted(results, key=lambda r: r.index)
    return fan_out


def _last_error_line(exc: Exception) -> str:
    """The Python error at the bottom of a Spark task failure (Spark wraps it in pages of JVM stack)."""
    lines = [line.strip() for line in str(exc).splitlines()]
    python_errors = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception): ", line)]
    return python_errors[-1] if python_errors else (lines[0] if lines else type(exc).__name__)
