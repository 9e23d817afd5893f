"""`kwh ingest`: find exports, read them, group them into runs, normalize, commit each run atomically."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import sqlalchemy as sa

from kwarehouse import ingest as readers
from kwarehouse import normalize, runmeta, schema
from kwarehouse.store import files as store_files
from kwarehouse.errors import InputError, KwhError, NothingToStore, SchemaError, display_path, first_line, internal_error
from kwarehouse.ingest import archives, empty_captures, gzipped, ncu_csv
from kwarehouse.ingest.base import TIMELINE_COLUMNS, ReadResult
from kwarehouse.normalize import identity
from kwarehouse.runmeta import RunMetadata, check_name, read_metadata
from kwarehouse.store.session import IngestedFile, WriteSession
from kwarehouse.store.warehouse import Warehouse

log = logging.getLogger(__name__)

# Names of files that often sit beside exports (notes, logs, tool output). Content decides what a file
# is (a capture saved as out.txt is read); the name only says that such a file no reader claims is
# skipped by kind, not an error, and that --format does not force its reader on it.
SIDECAR_SUFFIXES = (".log", ".txt", ".md")
# Run metadata that runmeta reads beside the exports: not exports, not skipped files either.
METADATA_NAMES = ("ncu_version.txt", "ncu.log")
# Names that copy tools give a file while it is still arriving (rsync's dot-files are hidden files,
# skipped anyway): such a file is left for a later ingest, once it has its final name.
TEMPORARY_SUFFIXES = (".part", ".partial", ".tmp", ".temp", ".crdownload", ".download", ".filepart", "~")
# A file whose name says it should be an export: unrecognised content is an error, not a skip.
EXPORT_SUFFIXES = (".csv", ".sqlite", ".ncu-rep", ".nsys-rep", ".qdrep", ".gz")
# The launch fields that identify a profiled launch in every page of one report.
LAUNCH_KEY = ["launch_id", "process_id", "process_name", "host_name", "context_id", "stream_id"]
# A .ncu-rep read through ncu_report has no process or host: it joins the run of the CSV pages of
# the same report (same folder and manifest) that match it on these.
LOOSE_LAUNCH_KEY = ["launch_id", "context_id", "stream_id", "grid_dims", "block_dims"]
HASH_CHUNK = 1 << 20
# Which spelling of a kernel's name a run keeps when its exports disagree (lowest first).
NAME_PRINTED, NAME_DEMANGLED_BY_KWH, NAME_MANGLED = 0, 1, 2


@dataclass
class RunSummary:
    run_id: str
    model: str
    gpu: str
    kernels: int
    files: list[str]
    new: bool
    replaced: list[str] = field(default_factory=list)   # partial runs this one replaced
    notes: list[str] = field(default_factory=list)      # what the user should know (one line each)
    warnings: list[str] = field(default_factory=list)   # rows its files held that could not be read


@dataclass
class EmptyCapture:
    """A capture that legitimately holds no CUDA data (errors.NothingToStore): not a failure, and
    recorded in the catalog (catalog.empty_files) so that later ingests skip it."""
    path: str          # as messages show it
    reason: str        # why there is nothing to store, and what to do if there should have been
    sha256: str
    stored_path: str   # as the catalog records source paths
    format: str
    size: int | None = None

    def catalog_row(self) -> dict:
        return {"sha256": self.sha256, "path": self.stored_path, "format": self.format, "reason": self.reason,
                "size": self.size}


@dataclass
class IngestReport:
    runs: list[RunSummary] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (path, why), not an error
    failed: list[str] = field(default_factory=list)                # one error line each
    repairs: list[str] = field(default_factory=list)
    # runs built one by one because building them together failed, and why (one line each): the rows
    # are the same, only slower; a clean corpus never falls back (tested)
    fallbacks: list[str] = field(default_factory=list)
    empty: list[EmptyCapture] = field(default_factory=list)        # nothing to store: not an error either

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass
class _Source:
    """One export read successfully, with the context that decides its run."""
    result: ReadResult
    sha256: str
    meta: RunMetadata
    folder: Path
    size: int | None = None
    supersedes: str | None = None   # a run ingested from a shorter, partial copy of this file


def discover(sources: Iterable[Path], report: IngestReport | None = None) -> list[tuple[Path, bool]]:
    """Every file under `sources`, with whether the user named it directly. Symlinked folders are
    not followed (no loops) and unreadable folders cannot be: both go to `report` (skipped and failed)
    so nothing is left out without a word. Hidden files and folders are skipped."""
    found = []
    for source in sources:
        source = Path(source)
        if source.is_dir():
            def unreadable(error: OSError) -> None:
                if report is not None:
                    report.failed.append(f"{display_path(error.filename)}: cannot read this folder "
                                         f"({error.strerror}); its files were not ingested: check its permissions")
            for folder, dirs, files in os.walk(source, followlinks=False, onerror=unreadable):
                linked = [d for d in dirs if not d.startswith(".") and os.path.islink(os.path.join(folder, d))]
                if report is not None:
                    report.skipped.extend((display_path(Path(folder) / d), "a symbolic link to a folder: not followed "
                                           "(no loops); name it on the command line to ingest it") for d in linked)
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in linked)
                found.extend((Path(folder) / f, False) for f in sorted(files) if not f.startswith("."))
        elif source.exists() or source.is_symlink():
            found.append((source, True))
        else:
            raise KwhError(f"{display_path(source)}: no such file or folder")
    return found


def sha256_of(path: Path) -> str:
    """The content's hash; for a gzip-compressed export, of what it decompresses to, so a compressed
    copy of a file already ingested is recognised as the same file."""
    with open(path, "rb") as handle:
        compressed = gzipped.is_gzip(handle.read(2))
    return _sha256(gzipped.chunks(path) if compressed else _file_chunks(path))


def _file_chunks(path: Path, limit: int | None = None):
    """The bytes of `path` (its first `limit` bytes), HASH_CHUNK at a time."""
    left = limit
    with open(path, "rb") as handle:
        while left is None or left > 0:
            chunk = handle.read(HASH_CHUNK if left is None else min(HASH_CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


def _sha256(chunks) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def ingest(sources: Iterable[Path], warehouse: Warehouse, *, format: str | None = None,
           model: str | None = None, tags: dict[str, str] | None = None,
           progress: Callable[[Path], None] | None = None, fan_out=None,
           settle_seconds: float = 0) -> IngestReport:
    """Ingest every export under `sources` into `warehouse`. Bad files are reported, never fatal.

    Folders are read in order and their runs committed in batches (a run's id includes its folder,
    so the pages of one report always share a folder): a batch is built and committed in threads
    while the next folders are read (COMMIT_BEHIND), and memory holds at most three batches,
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
    batches = folder_batches(sources, report)
    if settle_seconds:
        batches = _settled(batches, settle_seconds, report)
    if fan_out is not None:
        from kwarehouse.jobs import fanout
        return fanout.ingest_fanned_out(batches, warehouse, fan_out, format=format, model=model, tags=tags,
                                        progress=progress, report=report)
    metadata: dict[tuple[Path, str], RunMetadata | InputError] = {}
    seen: set[str] = set()
    writer = session = None

    def already(sha: str) -> str | None:
        return warehouse.ingested_run(sha) if warehouse.exists else None

    def earlier(path: str) -> list[tuple[str, int, str]]:
        return warehouse.ingested_at_path(path) if warehouse.exists else []

    # few, and looked up for every file: read once (a capture another ingest records meanwhile is
    # recorded once all the same)
    known_empty = (warehouse.empty_captures() if warehouse.exists else {}).get

    pending: dict[str, list[_Source]] = {}
    # Three stages overlap (COMMIT_BEHIND): this thread reads folders while one thread builds the last
    # full batch (normalize) and another stages and commits the one before it. polars, pyarrow,
    # hashlib and SQLite leave the GIL, so one process keeps two cores busy (100 runs on 2 cores:
    # 17.0 s one stage after the other). Each batch's read, build and commit report into one
    # IngestReport, merged in batch order: the report of a one-after-the-other ingest, line for line.
    # Reading and building ahead of a commit is safe: a file of this ingest is found by `seen`, not by
    # `already`, and folders never share a run; only a commit that replaces a run (a partial copy's)
    # changes what `already` answers, and reading waits for it. At most three batches are held: read,
    # built, staged (peak RSS 909-990 MiB for 100-1,000 runs of 9 MB, against 683-699 one at a time).
    reading = IngestReport()
    in_flight: list[tuple[Future, IngestReport]] = []   # commits, oldest first
    stop = threading.Event()   # a commit failed, or this thread did: commits not yet begun do not begin

    def settle(keep: int) -> None:
        """Wait for all but the newest `keep` commits, adding their reports in order."""
        while len(in_flight) > keep:
            future, batch_report = in_flight.pop(0)
            future.result()
            _extend(report, batch_report)

    def start_commit(groups: dict[str, list[_Source]]) -> None:
        nonlocal reading
        settle(1)
        batch_report, reading = reading, IngestReport()
        if not COMMIT_BEHIND:   # in this thread, before reading on
            commit_batch(groups, session, model, tags, batch_report)
            _extend(report, batch_report)
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
            groups = read_folder(batch, format, already, metadata, seen, reading, progress, earlier, known_empty)
            if not groups:
                continue
            if writer is None:   # the lock is taken once, at the first folder with something to commit
                writer = warehouse.writer()
                session = writer.__enter__()
                report.repairs.extend(session.repairs)
            pending.update(groups)   # a run id names its folder: folders never share one
            if batch_full(pending):
                start_commit(pending)
                pending = {}
        if pending:
            start_commit(pending)
        settle(0)
        _extend(report, reading)
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


def _extend(report: IngestReport, more: IngestReport) -> None:
    """Add what `more` reports to `report`, after what it has."""
    report.runs.extend(more.runs)
    report.skipped.extend(more.skipped)
    report.failed.extend(more.failed)
    report.repairs.extend(more.repairs)
    report.fallbacks.extend(more.fallbacks)
    report.empty.extend(more.empty)


def folder_batches(sources: Iterable[Path], report: IngestReport | None = None) -> list[list[tuple[Path, bool]]]:
    """The files under `sources` (see discover), one list per folder, in discovery order."""
    batches: dict[Path, list[tuple[Path, bool]]] = {}
    for path, explicit in discover(sources, report):
        batches.setdefault(path.parent.absolute(), []).append((path, explicit))
    return list(batches.values())


def read_folder(batch: list[tuple[Path, bool]], format: str | None, already: Callable[[str], str | None],
                metadata: dict, seen: set[str], report: IngestReport,
                progress: Callable[[Path], None] | None = None,
                earlier: Callable[[str], list[tuple[str, int, str]]] | None = None,
                known_empty: Callable[[str], str | None] | None = None) -> dict[str, list[_Source]]:
    """Read one folder's files and group them into runs; failures, skips and captures with nothing to
    store go to `report`. known_empty(sha256): the reason recorded for a capture with nothing to store.

    earlier(path) lists (sha256, size, run id) of files ingested from that path before: a file that
    begins with the exact bytes of one of them is its complete version (the earlier one was ingested
    while still being copied), and replaces that run; the run's other files are then read again."""
    read = []
    for path, explicit in batch:
        if progress:
            progress(path)
        source = _read_reporting(path, explicit, format, already, metadata, seen, report, earlier, known_empty)
        if source is not None:
            read.append(source)
    superseded = {s.supersedes for s in read if s.supersedes}
    if superseded:
        # this folder's files skipped as part of a run a complete file here replaces (another folder's
        # copies of that run's files stay skipped: they are not read again)
        again = {f"already ingested (run {run})" for run in superseded}
        here = {display_path(path) for path, _ in batch}
        redo = {p for p, why in report.skipped if why in again and p in here}
        report.skipped[:] = [(p, why) for p, why in report.skipped if p not in redo or why not in again]

        def not_superseded(sha: str) -> str | None:
            run = already(sha)
            return None if run in superseded else run
        for path, explicit in batch:
            if display_path(path) in redo:
                source = _read_reporting(path, explicit, format, not_superseded, metadata, seen, report, None,
                                         known_empty)
                if source is not None:
                    read.append(source)
    return group_runs(read)


def _read_reporting(path: Path, explicit: bool, format: str | None, already, metadata: dict, seen: set[str],
                    report: IngestReport, earlier, known_empty=None) -> _Source | None:
    """_read_one, with a bad file's error (or an unforeseen failure: a reader's bug) in `report` instead
    of raised. Only the warehouse's own failures (its catalog cannot be read) stop the ingest."""
    try:
        source = _read_one(path, explicit, format, already, metadata, seen, report, earlier, known_empty)
        if source is not None:
            run_key(source)   # what groups it into a run reads its launches: a failure there is this file's
        return source
    except InputError as exc:
        report.failed.append(str(exc))
    except OSError as exc:
        report.failed.append(f"{display_path(path)}: cannot be read ({exc.strerror or exc}); "
                             "check the file and its folder")
    except KwhError:
        raise
    except MemoryError:
        report.failed.append(f"{display_path(path)}: too large to read in the memory available; nothing of it "
                             "was stored: ingest it on a machine with more memory")
    except Exception as exc:   # noqa: BLE001 - a reader's bug costs its file, never the others
        log.debug("reading %s failed", path, exc_info=True)
        report.failed.append(internal_error(display_path(path), exc, "reading it"))
    return None


def _settled(batches: list[list[tuple[Path, bool]]], settle_seconds: float,
             report: IngestReport) -> list[list[tuple[Path, bool]]]:
    """The batches without files modified in the last `settle_seconds` (reported as skipped)."""
    import time
    now = time.time()
    out = []
    for batch in batches:
        kept = []
        for path, explicit in batch:
            try:
                age = now - path.stat().st_mtime
            except OSError:
                age = settle_seconds
            if age < settle_seconds:
                report.skipped.append((display_path(path), f"modified {max(age, 0):.0f} s ago (still being written?); "
                                                  "left for the next ingest"))
            else:
                kept.append((path, explicit))
        if kept:
            out.append(kept)
    return out


# Runs of ncu exports are built in one vectorized pass and written together (one Parquet file per
# table and partition, one catalog transaction), up to this many runs or input bytes at a time:
# per-run work (a polars query, a file, a transaction) costs more than a 100-kernel run's rows. A
# batch holds ~6x its input bytes at its peak: 100 runs of 9 MB took the same CPU in batches of 8,
# 16 or 64 runs, and 903, 1,288 and 2,139 MiB at the peak (one batch at a time; ingest now holds up
# to three: 16-run batches peak at 909-990 MiB).
BATCH_RUNS = 16
BATCH_BYTES = 80 << 20
# A full batch is built and committed in threads while the next folders are read (False: each batch
# is committed in the calling thread before reading on; the report and the rows are the same either
# way, tested; bench/profile_ingest.py turns it off, as cProfile sees one thread).
COMMIT_BEHIND = True
# In a batch, a launch's id carries its run's position above these bits (ncu numbers launches from 0).
LAUNCH_BITS = 32


def batch_full(groups: dict[str, list[_Source]]) -> bool:
    return len(groups) >= BATCH_RUNS or sum(m.size or 0 for ms in groups.values() for m in ms) >= BATCH_BYTES


def _fresh_members(run_id: str, members: list[_Source], warehouse: Warehouse, report: IngestReport) -> list[_Source]:
    """The members no other writer committed while we were reading them: checked again under the
    lock, so two concurrent ingests never record a file twice."""
    fresh = []
    for member in members:
        done = warehouse.ingested_run(member.sha256)
        if done is None:
            fresh.append(member)
        else:
            report.skipped.append((display_path(member.result.path), f"already ingested (run {done})"))
    return fresh


def _supersedes(run_id: str, members: list[_Source]) -> tuple[str, ...]:
    return tuple(sorted({m.supersedes for m in members if m.supersedes} - {run_id}))


@dataclass
class _BuiltBatch:
    groups: dict[str, list[_Source]]       # every run of the batch, in folder order
    batch: dict[str, list[_Source]]        # the new runs built together (their fresh members)...
    built: dict[str, BuiltRun]             # ...and what they became (empty: they go one by one)
    single: dict[str, list[_Source]]       # the runs committed one by one


def commit_batch(groups: dict[str, list[_Source]], warehouse: WriteSession, model: str | None,
                 tags: dict[str, str], report: IngestReport) -> None:
    """Commit the runs of `groups`: new runs of ncu exports together (build_ncu_batch, one catalog
    transaction), the others one by one (commit_groups). If the batch fails for a reason that is not
    the warehouse's, its runs are committed one by one instead, so a bad run fails alone."""
    commit_built(build_batch(groups, warehouse, model, tags, report), warehouse, model, tags, report)


def build_batch(groups: dict[str, list[_Source]], warehouse: Warehouse, model: str | None,
                tags: dict[str, str], report: IngestReport) -> _BuiltBatch:
    """commit_batch's first half: build the new runs of ncu exports together (nothing is written)."""
    known = {run_id for run_id, _, _ in warehouse.runs()}
    batch, single = {}, {}
    for run_id, members in groups.items():
        if run_id in known or _supersedes(run_id, members) or not batchable(members):
            single[run_id] = members
        elif fresh := _fresh_members(run_id, members, warehouse, report):
            batch[run_id] = fresh
    built = {}
    if len(batch) > 1:
        try:
            built = build_ncu_batch(list(batch.items()), normalize.KernelRules.load(warehouse.rules_dir),
                                    model, tags)
        except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
            raise KwhError(f"{warehouse.root}: could not write runs {', '.join(batch)} ({_one_line(exc)}); nothing "
                           "of them was committed and runs committed before them are kept") from None
        except Exception as exc:   # noqa: BLE001 - one odd run must not stop the others: each goes alone
            fell_back(report, batch, "building", exc)
    return _BuiltBatch(groups, batch, built, single if built else {**single, **batch})


def fell_back(report: IngestReport, runs: dict[str, list[_Source]], step: str, exc: BaseException) -> None:
    """Record that the runs of a batch go one by one because `step` them together failed: in the report
    (one line; the CLI prints it) and, with the traceback, in the debug log. A file at fault then
    fails alone (commit_groups narrows it down); a clean batch that falls back is a bug of the batch
    path, which only this line shows (its rows are the same, only slower)."""
    log.debug("%s runs %s together failed; they go one by one", step, ", ".join(runs), exc_info=exc)
    files = sorted({display_path(m.result.path) for members in runs.values() for m in members})
    report.fallbacks.append(f"{len(runs)} runs ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}) "
                            f"were committed one by one: {step} them together failed ({_one_line(exc)})")


def commit_built(done: _BuiltBatch, warehouse: WriteSession, model: str | None, tags: dict[str, str],
                 report: IngestReport) -> None:
    """commit_batch's second half: stage and commit what build_batch built, and the single runs."""
    single, built = done.single, done.built
    summaries: dict[str, RunSummary] = {}
    if built:
        try:
            staged = warehouse.stage_runs([(run_id, b.model, b.gpu, b.tables) for run_id, b in built.items()])
        except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
            raise KwhError(f"{warehouse.root}: could not write runs {', '.join(done.batch)} ({_one_line(exc)}); "
                           "nothing of them was committed and runs committed before them are kept") from None
        except Exception as exc:   # noqa: BLE001 - one odd run must not stop the others: each goes alone
            fell_back(report, done.batch, "staging", exc)
            single = {**single, **done.batch}
        else:
            try:
                warehouse.commit_many([(s, built[s.run_id].files) for s in staged])
            except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
                raise KwhError(f"{warehouse.root}: could not commit runs {', '.join(done.batch)} ({_one_line(exc)}); "
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


def batchable(members: list[_Source]) -> bool:
    """Whether a new run can be built in a batch: ncu pages whose launch ids fit below LAUNCH_BITS."""
    for member in members:
        result = member.result
        if result.tool != "ncu" or result.metrics is None or result.launches is None:
            return False
        ids = result.launches["launch_id"]
        if ids.len() and (ids.null_count() or ids.min() < 0 or ids.max() >= 1 << (LAUNCH_BITS - 1)):
            return False
        ids = result.metrics["launch_id"]
        if ids.len() and (ids.null_count() or ids.min() < 0 or ids.max() >= 1 << (LAUNCH_BITS - 1)):
            return False
    return True


def commit_groups(groups: dict[str, list[_Source]], warehouse: WriteSession, model: str | None,
                   tags: dict[str, str], report: IngestReport) -> None:
    for run_id, members in groups.items():
        fresh = _fresh_members(run_id, members, warehouse, report)
        if not fresh:
            continue

        def commit(of_run: list[_Source]) -> RunSummary:
            return _commit(run_id, of_run, warehouse, model, tags, _supersedes(run_id, of_run))

        def check(member: _Source) -> None:
            built = build_run(run_id, [member], warehouse.read_run(run_id),
                              normalize.KernelRules.load(warehouse.rules_dir), model, tags)
            for name, table in built.tables.items():
                schema.conform(name, table)
        try:
            summary = isolated(fresh, commit, check, report.failed)
        except KwhError:
            raise
        except (MemoryError, OSError, sa.exc.DatabaseError) as exc:
            # a warehouse-side failure (disk full, catalog gone) is not one file's fault: stop here
            raise KwhError(f"{warehouse.root}: could not commit run {run_id} ({_one_line(exc)}); nothing of it "
                           "was committed and runs committed before it are kept") from None
        if summary is not None:
            report.runs.append(summary)


def warehouse_fault(exc: BaseException) -> bool:
    """Whether a failure while building or storing a run is the warehouse's (disk full, catalog gone, a
    lock: the ingest stops) rather than the run's files' (a bad file, a reader's or normalization's bug,
    rows that do not fit the schema: those files fail alone)."""
    if isinstance(exc, (InputError, SchemaError)):
        return False
    return isinstance(exc, (KwhError, MemoryError, OSError, sa.exc.DatabaseError)) or not isinstance(exc, Exception)


def _file_error(members: list[_Source], exc: BaseException, doing: str | None = None) -> str:
    """The one-line error of files whose run could not be built or stored."""
    if isinstance(exc, InputError):
        return str(exc)
    log.debug("building the run of %s failed", _files_of(members), exc_info=exc)
    return internal_error(_files_of(members), exc,
                          doing or ("building its run" if len(members) == 1 else "building their run"))


def isolated(members: list[_Source], attempt: Callable[[list[_Source]], object],
             check: Callable[[_Source], None], failed: list[str]):
    """attempt(members) (build and store a run), with a failure narrowed to the files that cause it.

    A run has several files (the pages of one report). When attempt fails for a reason of the files
    (not warehouse_fault: those are raised), each file is checked alone (check raises what building it
    alone raises); the run is then attempted again with the files that pass, and each other file gets
    its own error line in `failed`. Returns attempt's answer, or None when nothing was stored."""
    try:
        return attempt(members)
    except Exception as exc:   # noqa: BLE001 - sorted below: a warehouse's failure is raised again
        if warehouse_fault(exc):
            raise
        first = exc
    if len(members) == 1:
        failed.append(_file_error(members, first))
        return None
    good, bad = [], []
    for member in members:
        try:
            check(member)
        except Exception as exc:   # noqa: BLE001 - as above
            if warehouse_fault(exc):
                raise
            bad.append((member, exc))
        else:
            good.append(member)
    # one line per distinct error: files that fail for one reason (their folder's manifest) say it once
    failed.extend(dict.fromkeys(_file_error([member], exc) for member, exc in bad))
    if not bad:
        failed.append(_file_error(members, first, "building their run together (each alone builds)"))
        return None
    if not good:
        return None
    try:
        return attempt(good)
    except Exception as exc:   # noqa: BLE001 - as above
        if warehouse_fault(exc):
            raise
        failed.append(_file_error(good, exc))
        return None


def _one_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message (for errors kwh did not foresee)."""
    text = first_line(exc, 200)
    return text if text == type(exc).__name__ else f"{type(exc).__name__}: {text}"


def _files_of(members: list[_Source]) -> str:
    return ", ".join(display_path(m.result.path) for m in members)


def _read_one(path: Path, explicit: bool, format: str | None, already: Callable[[str], str | None],
              metadata: dict, seen: set[str], report: IngestReport, earlier=None,
              known_empty: Callable[[str], str | None] | None = None) -> _Source | None:
    """Read one file, or None (with the reason in `report.skipped`, or `report.empty` for a capture
    with nothing to store) when it is not to be ingested. already(sha256) names the run a file with
    that content went into, if any; known_empty(sha256) the reason recorded for an empty capture."""
    if path.is_symlink() and not path.exists():
        raise InputError(path, "broken symbolic link; point it at an export or remove it")
    if not path.is_file():
        report.skipped.append((display_path(path), "not a regular file"))
        return None
    if not os.access(path, os.R_OK):
        raise InputError(path, "file is not readable; check its permissions")
    if not explicit and path.name.lower().endswith(TEMPORARY_SUFFIXES):
        report.skipped.append((display_path(path), "a temporary name (a copy still arriving?); left for the "
                                                   "ingest after it gets its final name"))
        return None
    # An archive (.tar.xz, .tgz, .zip, ...) is named with the command that extracts it, before any
    # sniffer sees it: a text sniffer could claim the export inside a tar and read the tar's headers
    # as lines of it. One named on the command line is an error (nothing of it went in).
    archive = archives.archive_of(path)
    if archive is not None:
        if explicit:
            raise InputError(path, archive.reason)
        report.skipped.append((display_path(path), archive.reason))
        return None
    # Content decides: every file is sniffed, whatever its name. A file no reader claims is run
    # metadata (manifests, ncu_version.txt: read by runmeta), else skipped and named by kind, else
    # (named on the command line, or an export's suffix) an error.
    run_metadata = not explicit and (path.name.startswith("manifest") and path.suffix == ".json"
                                     or path.name in METADATA_NAMES)
    sidecar = not explicit and (run_metadata or path.suffix.lower() in SIDECAR_SUFFIXES)
    if sidecar and path.stat().st_size == 0:
        if not run_metadata:
            report.skipped.append((display_path(path), readers.NOT_AN_EXPORT.format(kind="empty file")))
        return None
    readers.reject_empty(path)
    sniffed = readers.sniff(path) if sidecar or not format else None
    reader = readers.reader_named(format) if format and (sniffed or not sidecar) else sniffed
    if reader is None:
        if run_metadata:
            return None
        line = empty_captures.ncu_profiled_nothing(path)
        if line is not None:   # ncu's output with no report in it: it profiled nothing
            nothing = NothingToStore(path, empty_captures.NCU_NOTHING_PROFILED_REASON, line=line or None)
            _nothing_to_store(path, sha256_of(path), "ncu-log", nothing, seen, report, known_empty)
            return None
        if explicit or path.suffix.lower() in EXPORT_SUFFIXES:
            raise readers.unrecognised(path)
        report.skipped.append((display_path(path), readers.unclaimed_reason(path)))
        return None
    before = _file_state(path)
    data = _bytes_for(reader, path, before[0])
    sha = hashlib.sha256(data).hexdigest() if data is not None else sha256_of(path)
    if sha in seen:
        report.skipped.append((display_path(path), "same content as another file in this ingest"))
        return None
    run_id = already(sha)
    if run_id is not None:
        report.skipped.append((display_path(path), f"already ingested (run {run_id})"))
        return None
    if known_empty is not None and (reason := known_empty(sha)) is not None:
        report.skipped.append((display_path(path), f"already ingested (nothing to store: {reason})"))
        return None
    supersedes = _partial_copy_of(path, before[0], earlier(stored_path(path))) if earlier else None
    folder = path.parent.absolute()
    try:
        result = readers.read_with(reader, path, data)
        if empty_captures.holds_nothing(result):
            raise NothingToStore(path, empty_captures.no_rows_reason(result))
    except NothingToStore as nothing:
        _nothing_to_store(path, sha, reader.name, nothing, seen, report, known_empty, before[0])
        return None
    del data
    if result.gpu_name:
        result.gpu_name = check_name("gpu", result.gpu_name, path)
    if _file_state(path) != before:
        raise InputError(path, "changed while it was being read (still being written or copied?); "
                               "ingest it again once it is complete")
    key = (folder, result.tool)
    if key not in metadata:
        try:
            metadata[key] = read_metadata(folder, result.tool)
        except InputError as exc:
            metadata[key] = exc
    meta = metadata[key]
    if isinstance(meta, InputError):
        raise InputError(path, f"its run manifest is unusable: {meta}")
    seen.add(sha)   # only now: a copy of this file beside a usable manifest must still go in
    return _Source(result, sha, meta, folder, before[0], supersedes)


def _nothing_to_store(path: Path, sha: str, format: str, nothing: NothingToStore, seen: set[str],
                      report: IngestReport, known_empty, size: int | None = None) -> None:
    """Report a capture with nothing to store (recorded in the catalog at the end of the ingest), or
    skip it when its content was met before."""
    if sha in seen:
        report.skipped.append((display_path(path), "same content as another file in this ingest"))
        return
    if known_empty is not None and (reason := known_empty(sha)) is not None:
        report.skipped.append((display_path(path), f"already ingested (nothing to store: {reason})"))
        return
    seen.add(sha)
    where = nothing.path if nothing.line is None else f"{nothing.path}:{nothing.line}"
    report.empty.append(EmptyCapture(where, nothing.message, sha, stored_path(path), format,
                                     size if size is not None else path.stat().st_size))


def record_empty(warehouse: WriteSession, report: IngestReport) -> None:
    """Record the captures with nothing to store that `report` found (under the writer lock)."""
    if report.empty:
        warehouse.record_empty([capture.catalog_row() for capture in report.empty])


def _bytes_for(reader, path: Path, size: int) -> bytes | None:
    """The file's bytes, read once for both its hash and its reader, where the reader parses bytes
    (the ncu CSV pages) and the file is plain and small enough to hold; else None (hashed and read
    separately, in chunks)."""
    if not getattr(reader, "takes_bytes", False) or size > ncu_csv.MAX_LINE_BYTES:
        return None
    data = path.read_bytes()
    return None if gzipped.is_gzip(data[:2]) else data


def stored_path(path: Path) -> str:
    """How the warehouse records a source file's path (absolute; odd bytes in names escaped)."""
    return display_path(path.absolute())


def _file_state(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_size, info.st_mtime_ns


def _partial_copy_of(path: Path, size: int, earlier: list[tuple[str, int, str]]) -> str | None:
    """The run of an earlier file from this path whose bytes this file begins with (that file was
    a partial copy of this one), or None."""
    for old_sha, old_size, run_id in earlier:
        if old_size < size and _prefix_sha256(path, old_size) == old_sha:
            return run_id
    return None


def _prefix_sha256(path: Path, size: int) -> str:
    return _sha256(_file_chunks(path, size))


def run_key(source: _Source, loose: bool = False) -> str:
    """Exports of one ncu report get one run id: the same launches, from the same folder and
    manifest. A timeline or summary export (nsys, torch trace) is a run of its own."""
    if source.result.tool != "ncu":
        blob = json.dumps([source.result.tool, str(source.folder), source.meta.manifest_text or "", source.sha256])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
    key = LOOSE_LAUNCH_KEY if loose else LAUNCH_KEY
    launches = (source.result.launches.select(key).sort("launch_id").rows())
    blob = json.dumps([str(source.folder), source.meta.manifest_text or "", launches], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _lacks_process(source: _Source) -> bool:
    launches = source.result.launches
    return source.result.tool == "ncu" and launches["process_id"].null_count() == launches.height


def group_runs(sources: list[_Source]) -> dict[str, list[_Source]]:
    """Sources by run id; a source without process ids joins the one run that matches it loosely."""
    groups: dict[str, list[_Source]] = {}
    for source in sources:
        groups.setdefault(run_key(source), []).append(source)
    loose: dict[str, set[str]] = {}
    for key, members in groups.items():
        if not _lacks_process(members[0]):
            loose.setdefault(run_key(members[0], loose=True), set()).add(key)
    for key in [k for k, members in groups.items() if _lacks_process(members[0])]:
        targets = loose.get(run_key(groups[key][0], loose=True), set())
        if len(targets) == 1:
            groups[next(iter(targets))].extend(groups.pop(key))
    return groups


def _commit(run_id: str, members: list[_Source], warehouse: WriteSession, model_option: str | None,
            tags: dict[str, str], supersedes: tuple[str, ...] = ()) -> RunSummary:
    """Build one run's tables from its exports (and what the warehouse already holds of it) and
    commit them atomically."""
    existing = warehouse.read_run(run_id)
    built = build_run(run_id, members, existing, normalize.KernelRules.load(warehouse.rules_dir),
                      model_option, tags)
    warehouse.commit_run(run_id, built.model, built.gpu, built.tables, built.files, supersedes)
    built.summary.replaced = list(supersedes)
    return built.summary


@dataclass
class BuiltRun:
    """One run's tables, ready to stage, with the files they came from."""
    model: str
    gpu: str
    tables: dict[str, pa.Table]
    files: list[IngestedFile]
    summary: RunSummary


def build_run(run_id: str, members: list[_Source], existing: dict[str, pa.Table],
              rules: normalize.KernelRules, model_option: str | None, tags: dict[str, str]) -> BuiltRun:
    """The tables of run `run_id` from its exports, merged with `existing` (what the warehouse
    already holds of it, by table; empty for a new run)."""
    members = _in_page_order(members)
    meta, existing_run, gpu, model = _run_names(members, existing, model_option, tags)
    tool = members[0].result.tool
    if tool == "ncu":
        tables, count, compute_capability = _profile_tables(members, existing, rules)
    elif tool == "telemetry":
        tables, count, compute_capability = _telemetry_tables(members, gpu or UNKNOWN_GPU)
    else:
        tables, count, compute_capability = _timeline_tables(members, rules)
    return _finish_run(run_id, members, existing, tables, count, compute_capability, model_option, tags)


def _in_page_order(members: list[_Source]) -> list[_Source]:
    # Where exports of one report overlap, the first kept wins: raw page in export units (most
    # digits), then raw in base units (--print-units base rounds), then details (two decimals).
    return sorted(members, key=lambda m: (normalize.PAGE_PRIORITY.get(m.result.page, 9),
                                          m.result.base_units, str(m.result.path)))


def _run_names(members: list[_Source], existing: dict[str, pa.Table], model_option: str | None,
               tags: dict[str, str]):
    """(manifest metadata, the stored runs row or None, GPU or None, model) of a run."""
    meta = members[0].meta
    existing_run = existing["runs"].to_pylist()[0] if "runs" in existing else None
    gpu = next((m.result.gpu_name for m in members if m.result.gpu_name), None)
    if gpu is None and existing_run and not existing_run["gpu"].startswith(UNKNOWN_GPU):
        gpu = existing_run["gpu"]
    gpu = gpu or meta.fields.get("gpu") or tags.get("gpu")
    model = meta.fields.get("model") or model_option or (existing_run or {}).get("model")
    if not model:
        try:
            model = check_name("model", members[0].folder.name or "unknown", members[0].folder)
        except InputError as exc:
            raise InputError(members[0].folder, f"{exc.message}; or name the model in manifest.json or with "
                                                "--model") from None
    return meta, existing_run, gpu, model


def _finish_run(run_id: str, members: list[_Source], existing: dict[str, pa.Table], tables: dict[str, pl.DataFrame],
                count: int, compute_capability: str | None, model_option: str | None,
                tags: dict[str, str]) -> BuiltRun:
    """The runs row of a run whose other tables are built, and every table tagged with the run."""
    built = _run_record(run_id, members, existing, tables.get("kernels"), count, compute_capability,
                        model_option, tags)
    built.tables.update({name: _tag(frame, run_id, built.model, built.gpu) for name, frame in tables.items()})
    return built


def _run_record(run_id: str, members: list[_Source], existing: dict[str, pa.Table], kernels: pl.DataFrame | None,
                count: int, compute_capability: str | None, model_option: str | None,
                tags: dict[str, str]) -> BuiltRun:
    """A run with its runs row (its only table yet), model, GPU, files and summary."""
    meta, existing_run, gpu, model = _run_names(members, existing, model_option, tags)
    tool = members[0].result.tool
    files = sorted({stored_path(m.result.path): m.sha256 for m in members}.items())
    if existing_run:
        files = sorted(dict(zip(existing_run["source_files"], existing_run["source_sha256"]))
                       .items() | set(files))
    fields = meta.fields
    found = {k: v for m in reversed(members) for k, v in m.result.run_info.items() if v is not None}
    compute_capability = compute_capability or found.get("compute_capability") or fields.get("compute_capability")
    sm_count = fields.get("sm_count") or found.get("sm_count") or _sm_count(kernels)
    if gpu is None:
        gpu = unknown_gpu(compute_capability, sm_count)
    run_tags = {**meta.tags, **({k: v for k, v in existing_run["tags"]} if existing_run else {}), **tags}
    runs = {
        "run_id": run_id, "model": model, "gpu": gpu, "family": fields.get("family"),
        "task": fields.get("task"), "dtype": fields.get("dtype"), "batch": fields.get("batch"),
        "seq_len": fields.get("seq_len"), "compute_capability": compute_capability,
        "sm_count": sm_count, "tool": tool, **{k: fields.get(k) for k in runmeta.NCU_SETTINGS},
        "tool_version": next((m.result.tool_version for m in members if m.result.tool_version), None)
                        or meta.tool_version,
        "framework_versions": json.dumps(meta.versions, sort_keys=True) if meta.versions else None,
        "run_date": date.fromisoformat(fields["date"]) if "date" in fields else found.get("run_date"),
        "tags": sorted(run_tags.items()), "manifest_json": meta.manifest_text,
        "source_dir": display_path(members[0].folder), "source_files": [f for f, _ in files],
        "source_sha256": [s for _, s in files], "kernel_count": count,
        "ingested_at": (existing_run or {}).get("ingested_at") or datetime.now(UTC).replace(tzinfo=None),
    }
    tables = {"runs": pa.Table.from_pylist([runs], schema=schema.tables()["runs"].arrow)}
    new_files = [IngestedFile(m.sha256, stored_path(m.result.path), m.result.format, m.size) for m in members]
    notes = []
    if model_option and meta.fields.get("model") and model_option != meta.fields["model"]:
        notes.append(f"--model {model_option} ignored for run {run_id}: its manifest {display_path(meta.manifest_path)} "
                     f"names the model {meta.fields['model']!r} (edit the manifest to change it)")
    if runmeta.partial_profile(meta):
        notes.append(f"run {run_id} is a partial kwh profile: its manifest {display_path(meta.manifest_path)} says "
                     f"{runmeta.partial_profile(meta)!r}; what was exported before it stopped is stored")
    return BuiltRun(model, gpu, tables, new_files,
                    RunSummary(run_id, model, gpu, count, [display_path(m.result.path) for m in members],
                               new=not existing, notes=notes,
                               warnings=[w for m in members for w in m.result.warnings]))


UNKNOWN_GPU = "unknown"


def unknown_gpu(compute_capability: str | None, sm_count: int | None) -> str:
    """The partition of a run whose export, manifest and command line name no GPU: what is known of it,
    so that two different GPUs are not averaged together: 'unknown (CC 9.0, 132 SMs)'."""
    known = [f"CC {compute_capability}" if compute_capability else None,
             f"{sm_count} SMs" if sm_count else None]
    known = [k for k in known if k]
    return f"{UNKNOWN_GPU} ({', '.join(known)})" if known else UNKNOWN_GPU


def _sm_count(kernels: pl.DataFrame | None) -> int | None:
    """The SM count ncu measured (device__attribute_multiprocessor_count, kernels.sm_count)."""
    if kernels is None or "sm_count" not in kernels.columns:
        return None
    counts = kernels["sm_count"].drop_nulls()
    return int(counts.mode().sort()[0]) if counts.len() else None


def _profile_tables(members: list[_Source], existing: dict[str, pa.Table], rules: normalize.KernelRules):
    """kernels, metrics and rules of an ncu run, merged with what the warehouse holds of it."""
    metric_frames = [normalize.normalize_source_metrics(m.result.metrics, m.result.page) for m in members]
    if "metrics" in existing:
        metric_frames.insert(0, pl.from_arrow(existing["metrics"]).drop("run_id", "model", "gpu"))
    metrics = normalize.merge_metrics(metric_frames)
    launches = _merge_launches(members, existing.get("kernels"))
    kernels = kernel_rows(launches, metrics, rules)
    rule_rows = pl.concat([_rule_rows(m.result.rules) for m in members]
                          + ([pl.from_arrow(existing["rules"]).drop("run_id", "model", "gpu")]
                             if "rules" in existing else []), how="vertical_relaxed").unique(maintain_order=True)
    tables = {"kernels": kernels, "metrics": metrics, "rules": rule_rows}
    return tables, kernels.height, kernels["compute_capability"].drop_nulls().first()


def _telemetry_tables(members: list[_Source], gpu: str):
    """gpu_samples of a telemetry log: each GPU's sampling interval (the median gap between its samples in
    the log), the run's GPU name where the log prints none (dmon, dcgmi), and its gpu_peaks model."""
    from kwarehouse.normalize import peaks
    samples = pl.concat([m.result.samples for m in members], how="vertical_relaxed")
    samples = samples.with_columns(pl.col("gpu_name").fill_null(pl.lit(None if gpu == "unknown" else gpu, pl.String)))
    intervals = (samples.filter(pl.col("timestamp_ns").is_not_null())
                 .select("source", "gpu_index", "timestamp_ns").unique().sort("timestamp_ns")
                 .with_columns(pl.col("timestamp_ns").diff().over("source", "gpu_index").alias("gap"))
                 .group_by("source", "gpu_index").agg(pl.col("gap").median().round().cast(pl.Int64).alias("interval_ns")))
    samples = samples.join(intervals, on=["source", "gpu_index"], how="left", nulls_equal=True)
    models = {name: peaks.gpu_model(name) for name in samples["gpu_name"].drop_nulls().unique()}
    samples = samples.with_columns(pl.col("gpu_name").replace_strict(models, default=None, return_dtype=pl.String)
                                   .alias("gpu_model"))
    return {"gpu_samples": samples}, 0, None


def _timeline_tables(members: list[_Source], rules: normalize.KernelRules):
    """kernel_launches, kernel_summaries and nvtx_summaries of a timeline or summary export."""
    tables: dict[str, pl.DataFrame] = {}
    timelines = [m.result.timeline for m in members if m.result.timeline is not None]
    if timelines:
        frame = pl.concat(timelines, how="vertical_relaxed").with_row_index("launch_index").with_columns(
            pl.col("launch_index").cast(pl.Int64),
            (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("grid_size"),
            (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("block_size"))
        tables["kernel_launches"] = normalize.normalize_timeline(frame, rules)
    summaries = [m.result.summaries for m in members if m.result.summaries is not None]
    if summaries:
        normalized = normalize.normalize_timeline(pl.concat(summaries, how="vertical_relaxed"), rules)
        tables["kernel_summaries"] = normalized.select(
            [c for c in schema.tables()["kernel_summaries"].arrow.names if c not in ("run_id", "model", "gpu")])
    nvtx = [m.result.nvtx_summaries for m in members if m.result.nvtx_summaries is not None]
    if nvtx:
        tables["nvtx_summaries"] = pl.concat(nvtx, how="vertical_relaxed")
    for name in sorted({name for m in members for name in m.result.tables}):   # memory ops, API, NVTX ranges
        tables[name] = pl.concat([m.result.tables[name] for m in members if name in m.result.tables],
                                 how="vertical_relaxed")
    if "kernel_launches" in tables:
        count = tables["kernel_launches"].filter(pl.col("activity") == "kernel").height
    else:
        count = tables["kernel_summaries"]["instances"].sum() if "kernel_summaries" in tables else 0
    return tables, int(count or 0), None


@dataclass
class RenormalizeReport:
    changed: list[RunSummary] = field(default_factory=list)
    unchanged: int = 0
    repairs: list[str] = field(default_factory=list)


# Launch fields stored in the kernels table that normalization reads (everything else it recomputes).
LAUNCH_COLUMNS = ["launch_id", "kernel_name", "kernel_mangled", "process_id", "process_name", "host_name",
                  "context_id", "stream_id", "device_id", "compute_capability", "grid_x", "grid_y", "grid_z",
                  "block_x", "block_y", "block_z", "nvtx_push_pop", "nvtx_start_end"]


# Changed runs are committed this many at a time: a compacted file shared by many runs is rewritten
# once per batch, not once per run (which made renormalize quadratic in time and disk).
RENORMALIZE_BATCH = 200


def renormalize(warehouse: Warehouse, progress: Callable[[str], None] | None = None) -> RenormalizeReport:
    """Re-apply normalization (metric catalog, identity, NVTX context, classification rules, derived
    columns) to every run already in `warehouse`, from the rows it stored. A run whose rows come out
    the same is left alone; a changed one is replaced atomically, like an ingest."""
    report = RenormalizeReport()
    if not warehouse.exists:
        return report
    rules = normalize.KernelRules.load(warehouse.rules_dir)
    pending: list = []
    with warehouse.writer() as session:
        report.repairs.extend(session.repairs)
        for run_id, model, gpu in warehouse.runs():
            if progress:
                progress(run_id)
            stored = warehouse.read_run(run_id)
            if "kernels" not in stored and "kernel_launches" not in stored:
                continue
            tables, names, count = dict(stored), [], 0
            if "kernels" in stored:
                metrics = pl.from_arrow(stored["metrics"]).drop("run_id", "model", "gpu")
                metrics = normalize.merge_metrics([normalize.canonical_metric_names(
                    metrics.with_columns(pl.coalesce("source_metric", "metric").alias("source_metric")))])
                old_kernels = pl.from_arrow(stored["kernels"])
                kernels = kernel_rows(old_kernels.select(LAUNCH_COLUMNS), metrics, rules)
                tables.update(kernels=_tag(kernels, run_id, model, gpu), metrics=_tag(metrics, run_id, model, gpu))
                names += ["kernels", "metrics"]
                count = kernels.height
            if "kernel_launches" in stored:
                launches = renormalize_timeline(pl.from_arrow(stored["kernel_launches"]), rules)
                tables["kernel_launches"] = _tag(launches, run_id, model, gpu)
                names.append("kernel_launches")
                count = count or launches.filter(pl.col("activity") == "kernel").height
            if all(_same_rows(name, stored[name], tables[name]) for name in names):
                report.unchanged += 1
                continue
            pending.append((session.stage_run(run_id, model, gpu, tables), []))
            report.changed.append(RunSummary(run_id, model, gpu, count, [], new=False))
            if len(pending) >= RENORMALIZE_BATCH:
                session.commit_many(pending)
                pending = []
        session.commit_many(pending)
    return report


def renormalize_timeline(stored: pl.DataFrame, rules: normalize.KernelRules) -> pl.DataFrame:
    """kernel_launches rows normalized again from the reader's columns they keep (a column an older kwh
    did not write is NULL: its FLOPs then come from the shapes alone)."""
    reader = {**TIMELINE_COLUMNS, "launch_index": pl.Int64, "grid_size": pl.Int64, "block_size": pl.Int64}
    rows = stored.select([pl.col(c).cast(t) if c in stored.columns else pl.lit(None, dtype=t).alias(c)
                          for c, t in reader.items()])
    normalized = normalize.normalize_timeline(rows, rules)
    return normalized.select([c for c in schema.tables()["kernel_launches"].arrow.names
                              if c not in ("run_id", "model", "gpu")])


def _same_rows(name: str, old: pa.Table, new: pa.Table) -> bool:
    """Equal once both have the stored column order and types (old rows may lack new columns)."""
    new = schema.conform(name, new)
    try:
        old = old.select(new.column_names).cast(new.schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    keys = [(c, "ascending") for c in ("launch_id", "launch_index", "metric") if c in new.column_names]
    return old.sort_by(keys).equals(new.sort_by(keys))


def _tag(frame: pl.DataFrame, run_id: str, model: str, gpu: str) -> pa.Table:
    return frame.with_columns(pl.lit(run_id).alias("run_id"), pl.lit(model).alias("model"),
                              pl.lit(gpu).alias("gpu")).to_arrow()


def _merge_launches(members: list[_Source], existing: pa.Table | None) -> pl.DataFrame:
    """One row per launch from every export of the run: the first non-null value of each field.
    kernel_name prefers the spelling a tool printed, then one kwh demangled, then a mangled one;
    kernel_mangled keeps the mangled one."""
    frames = []
    if existing is not None:
        old = pl.from_arrow(existing)
        derived = pl.col("kernel_mangled").is_not_null() & (pl.col("kernel_name") == pl.col("kernel_mangled")
            .map_elements(identity.demangle, return_dtype=pl.String))
        frames.append(old.select(
            "launch_id", "kernel_name", "process_id", "process_name", "host_name", "context_id",
            "stream_id", "device_id", "compute_capability", "nvtx_push_pop", "nvtx_start_end",
            *[pl.col(c).cast(pl.String) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")],
            pl.when(derived).then(NAME_DEMANGLED_BY_KWH).otherwise(NAME_PRINTED).alias("_rank")))
        frames.append(old.filter(pl.col("kernel_mangled").is_not_null())
                      .select("launch_id", pl.col("kernel_mangled").alias("kernel_name")))
    for member in members:
        frames.extend(_launch_frames(member.result.launches))
    return _merged_launch_rows(_with_dims(pl.concat(frames, how="diagonal_relaxed")))


def _launch_frames(launches: pl.DataFrame) -> list[pl.DataFrame]:
    """An export's launch rows, and (from a reader that knows both spellings, .ncu-rep) its mangled
    names as rows of their own, first."""
    if "kernel_mangled" not in launches.columns:
        return [launches]
    return [launches.filter(pl.col("kernel_mangled").str.starts_with("_Z"))
            .select("launch_id", pl.col("kernel_mangled").alias("kernel_name")),
            launches.drop("kernel_mangled")]


def _with_dims(rows: pl.DataFrame) -> pl.DataFrame:
    """grid_dims and block_dims ("(96, 1, 1)") split into grid_x ... block_z (text, cast later),
    on the rows that have them (stored rows already have the split columns)."""
    dims = [*_dims("grid", rows["grid_dims"]), *_dims("block", rows["block_dims"])]
    return rows.with_columns([pl.coalesce(pl.col(d.name), pl.lit(d)).alias(d.name) if d.name in rows.columns else d
                              for d in dims]).drop("grid_dims", "block_dims")


def _merged_launch_rows(allrows: pl.DataFrame) -> pl.DataFrame:
    """_merge_launches' answer from the rows of every export concatenated (a launch's rows in
    export order)."""
    allrows = allrows.with_columns(pl.col("kernel_name").str.starts_with("_Z").fill_null(False).alias("_mangled"))
    if "_rank" not in allrows.columns:
        allrows = allrows.with_columns(pl.lit(None, dtype=pl.Int32).alias("_rank"))
    allrows = allrows.with_columns(pl.when(pl.col("_mangled")).then(NAME_MANGLED)
                                   .otherwise(pl.col("_rank").fill_null(NAME_PRINTED)).alias("_rank"))
    names = (allrows.filter(pl.col("kernel_name").is_not_null()).sort("_rank", maintain_order=True)
             .group_by("launch_id", maintain_order=True)
             .agg(pl.col("kernel_name").first(),
                  pl.col("kernel_name").filter(pl.col("_mangled")).first().alias("kernel_mangled")))
    others = allrows.drop("kernel_name", "_mangled", "_rank").group_by("launch_id", maintain_order=True).agg(
        pl.all().drop_nulls().first())
    # full join: a launch without any name (an empty Kernel Name cell) keeps its row; normalize
    # names it "(unnamed kernel)"
    return names.join(others, on="launch_id", how="full", coalesce=True).sort("launch_id")


def build_ncu_batch(runs: list[tuple[str, list[_Source]]], rules: normalize.KernelRules,
                    model_option: str | None, tags: dict[str, str]) -> dict[str, BuiltRun]:
    """build_run for several new runs of ncu exports in one vectorized pass: the rows of every run go
    through each normalization step together (a launch id carries its run's position above
    LAUNCH_BITS; steps whose answer is per run or per export group by normalize.BATCH_RUN or
    BATCH_MEMBER), then the tables are cut back into runs. The rows equal build_run's, run by run."""
    runs = [(run_id, _in_page_order(members)) for run_id, members in runs]
    results = [(index, m.result) for index, (_, members) in enumerate(runs) for m in members]
    run_of_export = np.array([index for index, _ in results], dtype=np.int64)

    def per_row(frames: list[pl.DataFrame], values: np.ndarray, dtype=pl.Int64) -> pl.Series:
        """values[i] repeated for every row of frames[i], the frames concatenated."""
        return pl.Series(np.repeat(values, [f.height for f in frames]), dtype=dtype)

    shift = run_of_export << LAUNCH_BITS
    # The exports' metric rows, normalized by page: raw pages (section-less) skip the label map, and the
    # pages go in PAGE_PRIORITY order, so the rows of one launch and metric keep build_run's order.
    by_page: dict[int, list[int]] = {}
    for number, (_, result) in enumerate(results):
        by_page.setdefault(normalize.PAGE_PRIORITY.get(result.page, 9), []).append(number)
    pages = []
    for _, numbers in sorted(by_page.items()):
        raw = [results[n][1].metrics for n in numbers]
        metrics = pl.concat(raw, how="vertical_relaxed").with_columns(
            pl.col("launch_id") + per_row(raw, shift[numbers]),
            per_row(raw, np.array(numbers, dtype=np.int64)).alias(normalize.BATCH_MEMBER))
        pages.append(normalize.normalize_batch_metrics(metrics, [results[n][1].page for n in numbers], raw))
    metrics = normalize.merge_ordered_metrics(pages)

    frames = [_launch_frames(r.launches) for _, r in results]
    shifts = np.repeat(shift, [len(f) for f in frames])
    frames = [f for of_export in frames for f in of_export]
    launches = pl.concat(frames, how="diagonal_relaxed").with_columns(pl.col("launch_id") + per_row(frames, shifts))
    launches = _merged_launch_rows(_with_dims(launches)).with_columns(
        (pl.col("launch_id") // (1 << LAUNCH_BITS)).alias(normalize.BATCH_RUN))
    kernels = kernel_rows(launches, metrics, rules)

    raw = [r.rules for _, r in results]
    rule_rows = _rule_rows(pl.concat(raw, how="vertical_relaxed").with_columns(
        pl.col("launch_id") + per_row(raw, shift), per_row(raw, run_of_export).alias(normalize.BATCH_RUN))
    ).unique(maintain_order=True)

    kernels_of = kernels.partition_by(normalize.BATCH_RUN, as_dict=True, maintain_order=True)
    built = {}
    for index, (run_id, members) in enumerate(runs):
        of_run = kernels_of.get((index,), kernels.clear())
        built[run_id] = _run_record(run_id, members, {}, of_run, of_run.height,
                                    of_run["compute_capability"].drop_nulls().first(), model_option, tags)
    names = pl.DataFrame({normalize.BATCH_RUN: np.arange(len(runs), dtype=np.int64),
                          "run_id": [run_id for run_id, _ in runs], "model": [b.model for b in built.values()],
                          "gpu": [b.gpu for b in built.values()]})

    def by_run(name: str, frame: pl.DataFrame) -> list[pa.Table]:
        """The batch's rows of a table, tagged with their run, cut into one Arrow table per run."""
        if normalize.BATCH_RUN not in frame.columns:
            frame = frame.with_columns((pl.col("launch_id") // (1 << LAUNCH_BITS)).alias(normalize.BATCH_RUN))
        order = _write_order(name, frame)
        if order is not None:
            frame = frame[order]
        frame = (frame.with_columns(pl.col("launch_id") % (1 << LAUNCH_BITS))
                 .join(names, on=normalize.BATCH_RUN, how="left", maintain_order="left"))
        ends = np.cumsum(np.bincount(frame[normalize.BATCH_RUN].to_numpy(), minlength=len(runs)))
        frame = frame.drop(normalize.BATCH_RUN)
        if name == "metrics":   # flat strings and numbers: its strings go to the writer as polars holds them
            table = schema.conform(name, frame.to_arrow(compat_level=pl.CompatLevel.newest()), keep_views=True)
        else:
            table = schema.conform(name, frame.to_arrow())   # once, not per run
        return [table.slice(end - length, length) for end, length in zip(ends, np.diff(ends, prepend=0))]

    for name, frame in (("kernels", kernels), ("metrics", metrics), ("rules", rule_rows)):
        for (_, one), table in zip(built.items(), by_run(name, frame)):
            one.tables[name] = table
    return built


def _write_order(name: str, frame: pl.DataFrame) -> pl.Series | None:
    """The row order by_run cuts a batch table in (None: the order it has): by run, and within a run,
    for a table the writer clusters (store/files.CLUSTER_ORDER: metrics by metric, run_id, launch_id), in
    that order, so the writer finds its rows ordered and does not sort them again; other tables keep
    their row order.

    A batch of raw pages usually has that order already (the reader keeps their metric columns in name
    order): a comparison of each row with the next finds it so. Otherwise one sort of one integer key
    (run, the metric's rank among the batch's names, launch) and one gather: sorting on the metric
    text, and sorting again before the write, cost several times that. The order is needed, not only
    cheaper: the metrics table reaches the writer with string_view columns, which Arrow's take (the
    writer's own sort) does not handle."""
    run = frame[normalize.BATCH_RUN]
    if store_files.CLUSTER_ORDER.get(name) != ("metric", "run_id", "launch_id") or frame.height == 0:
        return None if run.is_sorted() else frame.select(pl.arg_sort_by(normalize.BATCH_RUN, maintain_order=True)).to_series()
    keys = (normalize.BATCH_RUN, "metric", "launch_id")
    if store_files.in_order(frame.select(keys).to_arrow(compat_level=pl.CompatLevel.newest()), keys):
        return None
    order = None
    if not frame["metric"].null_count():
        launch = frame["launch_id"] % (1 << LAUNCH_BITS)
        order = store_files.packed_order([(run, max(1, int(run.max()).bit_length())), store_files.rank(frame["metric"]),
                                          (launch, LAUNCH_BITS)])
    if order is None:
        return frame.select(pl.arg_sort_by(normalize.BATCH_RUN, "metric", "launch_id", maintain_order=True)).to_series()
    return order


def _dims(prefix: str, text: pl.Series) -> list[pl.Series]:
    """ "(96, 1, 1)" -> three string columns (cast later); missing dims stay null."""
    parts = text.str.extract_groups(r"^\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)$")
    return [parts.struct.field(str(i + 1)).alias(f"{prefix}_{axis}") for i, axis in enumerate("xyz")]


def kernel_rows(launches: pl.DataFrame, metrics: pl.DataFrame, rules: normalize.KernelRules) -> pl.DataFrame:
    """The kernels table of one run: launch fields, headline metric columns, identity, context,
    classification and derived roofline columns."""
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    read = normalize.kernel_metric_rows(metrics)
    headline = normalize.headline_columns(read, counted=metrics)
    rows = (launches.with_columns([pl.col(c).cast(pl.Int64, strict=False) for c in dims])
            .join(headline, on="launch_id", how="left")
            .join(normalize.compute_capability_from_attributes(read), on="launch_id", how="left")
            .with_columns(pl.coalesce("compute_capability", "_cc").alias("compute_capability")).drop("_cc"))
    rows = rows.with_columns(
        pl.coalesce(pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z"),
                    pl.col("grid_size")).cast(pl.Int64).alias("grid_size"),
        pl.coalesce(pl.col("block_x") * pl.col("block_y") * pl.col("block_z"),
                    pl.col("block_size")).cast(pl.Int64).alias("block_size"),
        pl.col("registers_per_thread").cast(pl.Int64),
        pl.col("shared_mem_bytes").round().cast(pl.Int64),
        pl.col("metric_count").fill_null(0).cast(pl.Int64),
    )
    return normalize.normalize_kernels(rows, read, rules)


def _rule_rows(rules: pl.DataFrame) -> pl.DataFrame:
    speedup = pl.col("speedup_text").str.replace_all(",", "").cast(pl.Float64, strict=False)
    return rules.with_columns(speedup.alias("speedup_pct"),
                              pl.when(pl.col("rule_type") != "").then(pl.col("rule_type")).alias("rule_type"),
                              pl.when(pl.col("speedup_type") != "").then(pl.col("speedup_type"))
                              .alias("speedup_type")).drop("speedup_text")


def compact(warehouse: Warehouse) -> list[str]:
    """Merge the small Parquet files of every partition (see WriteSession.compact)."""
    with warehouse.writer() as session:
        return session.compact()
