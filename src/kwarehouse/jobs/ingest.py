"""`kwh ingest`: find exports, read them, group them into runs, build their tables, commit each run
atomically. This job holds the writer lock for the whole ingest; build/ does the reading and building."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from kwarehouse import build, normalize, schema
from kwarehouse import ingest as readers
from kwarehouse.build.batch import BuiltBatch, batch_full, build_batch, fresh_members, supersedes, together
from kwarehouse.build.discover import Found, discover, settled
from kwarehouse.build.isolate import isolated, one_line
from kwarehouse.build.report import IngestReport, RunSummary, extend
from kwarehouse.build.sources import Known, Source
from kwarehouse.errors import InputError, KwhError
from kwarehouse.runmeta import RunMetadata, check_name
from kwarehouse.store.session import WriteSession
from kwarehouse.store.warehouse import Warehouse

if TYPE_CHECKING:
    from kwarehouse.jobs import fanout


def ingest(sources: Iterable[Path] | Found, warehouse: Warehouse, *, format: str | None = None,
           model: str | None = None, tags: dict[str, str] | None = None,
           progress: Callable[[Path], None] | None = None, fan_out=None,
           settle_seconds: float = 0) -> IngestReport:
    """Ingest every export under `sources` (paths, or what discover found under them) into `warehouse`.
    Bad files are reported, never fatal.

    Folders are read in order and their runs committed in batches (a run's id includes its folder,
    so the pages of one report always share a folder): a batch is built and committed in threads
    while the next folders are read (Settings.commit_behind), and memory holds at most three batches,
    however many folders there are.
    fan_out: read and normalize folders in parallel instead (kwarehouse.jobs.fanout.process_pool(jobs)
    or spark_tasks(session)); the result is the same.
    settle_seconds: files modified more recently than this are left for a later ingest (kwh nightly:
    a file still being copied into the drop folder)."""
    tags = dict(tags or {})
    if format:
        readers.reader_named(format)
    if model is not None:
        model = check_name("model", model, "--model")
    if "gpu" in tags:
        tags["gpu"] = check_name("gpu", tags["gpu"], "--tag gpu")
    report = IngestReport()
    found = sources if isinstance(sources, Found) else discover(sources)
    report.skipped.extend(found.skipped)
    report.failed.extend(found.failed)
    batches = found.batches()
    if settle_seconds:
        batches = settled(batches, settle_seconds, report)
    if fan_out is not None:
        return ingest_fanned_out(batches, warehouse, fan_out, format=format, model=model, tags=tags,
                                        progress=progress, report=report)
    metadata: dict[tuple[Path, str], RunMetadata | InputError] = {}
    seen: set[str] = set()
    writer = session = None

    known = Known.in_warehouse(warehouse)

    pending: dict[str, list[Source]] = {}
    # Three stages overlap (Settings.commit_behind): this thread reads folders while one thread builds the last
    # full batch (normalize) and another stages and commits the one before it. polars, pyarrow,
    # hashlib and SQLite leave the GIL, so one process keeps two cores busy (100 runs on 2 cores:
    # 17.0 s one stage after the other). Each batch's read, build and commit report into one
    # IngestReport, merged in batch order: the report of a one-after-the-other ingest, line for line.
    # Reading and building ahead of a commit is safe: a file of this ingest is found by `seen`, not by
    # `known.run`, and folders never share a run; only a commit that replaces a run (a partial copy's)
    # changes what `known.run` answers, and reading waits for it. At most three batches are held: read,
    # built, staged (peak RSS 909-990 MiB for 100-1,000 runs of 9 MB, against 683-699 one at a time).
    reading = IngestReport()
    in_flight: list[tuple[Future, IngestReport]] = []   # commits, oldest first
    stop = threading.Event()   # a commit failed, or this thread did: commits not yet begun do not begin

    def settle(keep: int) -> None:
        """Wait for all but the newest `keep` commits, adding their reports in order."""
        while len(in_flight) > keep:
            future, batch_report = in_flight.pop(0)
            future.result()
            extend(report, batch_report)

    def start_commit(groups: dict[str, list[Source]]) -> None:
        nonlocal reading
        settle(1)
        batch_report, reading = reading, IngestReport()
        if not warehouse.settings.commit_behind:   # in this thread, before reading on
            commit_batch(groups, session, model, tags, batch_report)
            extend(report, batch_report)
            return
        built = builder.submit(build_batch, groups, session, model, tags, batch_report)
        in_flight.append((committer.submit(_commit_when_built, built, session, model, tags, batch_report, stop),
                          batch_report))
        if any(m.supersedes for members in groups.values() for m in members):
            settle(0)   # its commit deletes the replaced runs' files from the catalog: read on after it

    builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kwh-build")
    committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kwh-commit")
    try:
        for batch in batches:
            groups = build.run.read_folder(batch, format, known, metadata, seen, reading, progress)
            if not groups:
                continue
            if writer is None:   # the lock is taken once, at the first folder with something to commit
                writer = warehouse.writer()
                session = writer.__enter__()
                report.repairs.extend(session.repairs)
            pending.update(groups)   # a run id names its folder: folders never share one
            if batch_full(pending, warehouse.settings):
                start_commit(pending)
                pending = {}
        if pending:
            start_commit(pending)
        settle(0)
        extend(report, reading)
        if report.empty:
            if writer is None:
                writer = warehouse.writer()
                session = writer.__enter__()
                report.repairs.extend(session.repairs)
            record_empty(session, report)
        if writer is None and warehouse.has_leftovers():
            # nothing to commit, but an interrupted writer left staged files: clear them now
            writer = warehouse.writer()
            report.repairs.extend(writer.__enter__().repairs)
    except BaseException:
        stop.set()   # the writer is closed only once no build or commit is running
        builder.shutdown(wait=True, cancel_futures=True)
        committer.shutdown(wait=True, cancel_futures=True)
        if writer is not None:
            writer.__exit__(*sys.exc_info())
            writer = None
        raise
    finally:
        builder.shutdown(wait=True)
        committer.shutdown(wait=True)
        if writer is not None:
            writer.__exit__(None, None, None)
    return report


def commit_batch(groups: dict[str, list[Source]], warehouse: WriteSession, model: str | None,
                 tags: dict[str, str], report: IngestReport) -> None:
    """Commit the runs of `groups`: new runs of ncu exports together (build_ncu_batch, one catalog
    transaction), the others one by one (commit_groups). If the batch fails for a reason that is not
    the warehouse's, its runs are committed one by one instead, so a bad run fails alone."""
    commit_built(build_batch(groups, warehouse, model, tags, report), warehouse, model, tags, report)


def commit_built(done: BuiltBatch, warehouse: WriteSession, model: str | None, tags: dict[str, str],
                 report: IngestReport) -> None:
    """commit_batch's second half: stage and commit what build_batch built, and the single runs."""
    single, built = done.single, done.built
    summaries: dict[str, RunSummary] = {}
    if built:
        staged = together(done.batch, "staging", lambda: warehouse.stage_runs(
            [(run_id, b.model, b.gpu, b.tables) for run_id, b in built.items()]), report, warehouse.root)
        if staged is None:
            single = {**single, **done.batch}
        else:
            try:
                warehouse.commit_many([(s, built[s.run_id].files) for s in staged])
            except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
                raise KwhError(f"{warehouse.root}: could not commit runs {', '.join(done.batch)} ({one_line(exc)}); "
                               "nothing of them was committed and runs committed before them are kept") from None
            summaries = {run_id: b.summary for run_id, b in built.items()}
    before = len(report.runs)
    groups = done.groups
    commit_groups({run_id: single[run_id] for run_id in groups if run_id in single}, warehouse, model, tags, report)
    summaries.update((s.run_id, s) for s in report.runs[before:])
    del report.runs[before:]
    report.runs.extend(summaries[run_id] for run_id in groups if run_id in summaries)   # in folder order


def _commit_when_built(built: Future, warehouse: WriteSession, model: str | None, tags: dict[str, str],
                       report: IngestReport, stop: threading.Event) -> None:
    """commit_built once `built` (a build_batch) is done; nothing once `stop` is set, and `stop` set
    when this fails (an ingest stops at its first warehouse failure: later batches are not committed)."""
    try:
        done = built.result()
        if not stop.is_set():
            commit_built(done, warehouse, model, tags, report)
    except BaseException:
        stop.set()
        raise


def commit_groups(groups: dict[str, list[Source]], warehouse: WriteSession, model: str | None,
                   tags: dict[str, str], report: IngestReport) -> None:
    for run_id, members in groups.items():
        fresh = fresh_members(run_id, members, warehouse, report)
        if not fresh:
            continue

        def commit(of_run: list[Source]) -> RunSummary:
            return _commit(run_id, of_run, warehouse, model, tags, supersedes(run_id, of_run))

        def check(member: Source) -> None:
            built = build.run.build_run(run_id, [member], warehouse.read_run(run_id),
                              normalize.KernelRules.load(warehouse.rules_dir), model, tags)
            for name, table in built.tables.items():
                schema.conform(name, table)
        try:
            summary = isolated(fresh, commit, check, report.failed)
        except KwhError:
            raise
        except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
            # a warehouse-side failure (disk full, catalog gone) is not one file's fault: stop here
            raise KwhError(f"{warehouse.root}: could not commit run {run_id} ({one_line(exc)}); nothing of it "
                           "was committed and runs committed before it are kept") from None
        if summary is not None:
            report.runs.append(summary)


def _commit(run_id: str, members: list[Source], warehouse: WriteSession, model_option: str | None,
            tags: dict[str, str], supersedes: tuple[str, ...] = ()) -> RunSummary:
    """Build one run's tables from its exports (and what the warehouse already holds of it) and
    commit them atomically."""
    existing = warehouse.read_run(run_id)
    built = build.run.build_run(run_id, members, existing, normalize.KernelRules.load(warehouse.rules_dir),
                      model_option, tags)
    warehouse.commit_run(run_id, built.model, built.gpu, built.tables, built.files, supersedes)
    built.summary.replaced = list(supersedes)
    return built.summary


def record_empty(warehouse: WriteSession, report: IngestReport) -> None:
    """Record the captures with nothing to store that `report` found (under the writer lock)."""
    if report.empty:
        warehouse.record_empty([capture.catalog_row() for capture in report.empty])


def ingest_fanned_out(batches: list[list[tuple[Path, bool]]], warehouse: Warehouse, fan_out: fanout.FanOut, *,
                      format: str | None, model: str | None, tags: dict[str, str],
                      progress: Callable[[Path], None] | None = None,
                      report: IngestReport | None = None) -> IngestReport:
    """ingest with the folders prepared by `fan_out` (kwarehouse.jobs.fanout: the workers) and committed
    here, by the driver, under its writer lock."""
    from kwarehouse.jobs import fanout   # (multiprocessing, the workers' side: --jobs and --engine spark only)
    report = report or IngestReport()
    if not batches:
        if warehouse.has_leftovers():     # nothing to read, but a crashed writer's work to undo
            with warehouse.writer() as session:
                report.repairs.extend(session.repairs)
        return report
    with warehouse.writer() as session:
        report.repairs.extend(session.repairs)
        context = fanout.IngestContext(str(warehouse.root), str(session.session_dir), format, model, tags,
                                       warehouse.ingested_files(), frozenset(warehouse.ingested_paths()),
                                       frozenset(run_id for run_id, _, _ in warehouse.runs()), os.getpid(),
                                       warehouse.empty_captures(), warehouse.settings)
        # the driver's own reads (a job redone here) ask the catalog, as the one-process ingest does
        known = Known(warehouse.ingested_run, context.known_empty, warehouse.ingested_at_path)
        folders_of = fanout.job_folders(batches, warehouse.settings)
        jobs = [(i, [(str(p), explicit) for folder in folders for p, explicit in batches[folder]])
                for i, folders in enumerate(folders_of)]
        seen: set[str] = set()
        metadata: dict = {}
        for result in fan_out(jobs, context):
            # why the worker went run by run (its batch failed) or failed its job, whether or not the
            # driver redoes the job: a failed batch of a job redone for repeated content is still a
            # failure of the batch path, said once (a redo for the warehouse's view has none to say)
            report.fallbacks.extend(result.fallbacks)
            if result.redo or not seen.isdisjoint(result.shas):
                for run in result.runs:
                    session.discard_staged(run.staged)
                for folder in folders_of[result.index]:
                    groups = build.run.read_folder(batches[folder], format, known, metadata, seen, report,
                                                   progress)
                    commit_groups(groups, session, model, tags, report)
                continue
            if progress:
                for path in result.paths:
                    progress(Path(path))
            seen.update(result.shas)
            report.skipped.extend(result.skipped)
            report.failed.extend(result.failed)
            report.empty.extend(result.empty)
            session.commit_many([(run.staged, run.files) for run in result.runs])   # one transaction per job
            report.runs.extend(run.summary for run in result.runs)
        record_empty(session, report)
    return report
