"""Reading one file of an ingest: what it is (an export, run metadata, a sidecar skipped by kind),
its content hash, whether the warehouse has it already, whether it completes a partial copy ingested
before, and its run metadata."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kwarehouse import ingest as readers
from kwarehouse.build.report import EmptyCapture, IngestReport
from kwarehouse.errors import InputError, NothingToStore, display_path
from kwarehouse.ingest import archives, empty_captures, gzipped, ncu_csv
from kwarehouse.ingest.base import ReadResult
from kwarehouse.runmeta import RunMetadata, check_name, read_metadata
from kwarehouse.store.warehouse import Warehouse


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


HASH_CHUNK = 1 << 20


@dataclass
class Source:
    """One export read successfully, with the context that decides its run."""
    result: ReadResult
    sha256: str
    meta: RunMetadata
    folder: Path
    size: int | None = None
    supersedes: str | None = None   # a run ingested from a shorter, partial copy of this file


class Known:
    """What the warehouse already holds, as reading a file asks it: the run a file's content went
    into, the reason recorded for a capture with nothing to store, and the files ingested from a path
    before. Built once per ingest (the driver's) or per job (a fan-out worker's snapshot).

    In the one-process ingest the run and the earlier files are asked of the catalog at each file,
    not read once: another writer may commit while this ingest reads (what it records meanwhile is
    skipped here, and checked again under the lock before a commit). The few empty captures are read
    once (one another ingest records meanwhile is recorded once all the same)."""

    def __init__(self, run_of: Callable[[str], str | None], empty: dict[str, str],
                 earlier: Callable[[str], list[tuple[str, int, str]]] | None = None,
                 ignoring: frozenset[str] = frozenset()):
        self._run_of, self._empty, self._earlier, self._ignoring = run_of, empty, earlier, ignoring

    @classmethod
    def in_warehouse(cls, warehouse: Warehouse) -> Known:
        """Asking `warehouse`'s catalog (nothing, while it does not exist yet)."""
        return cls(lambda sha: warehouse.ingested_run(sha) if warehouse.exists else None,
                   warehouse.empty_captures() if warehouse.exists else {},
                   lambda path: warehouse.ingested_at_path(path) if warehouse.exists else [])

    @classmethod
    def snapshot(cls, ingested: dict[str, str], empty: dict[str, str]) -> Known:
        """From what a fan-out's driver read under its lock (sha256 -> run id, sha256 -> reason); no
        earlier files: a folder with a file from a path ingested before is redone by the driver."""
        return cls(ingested.get, empty)

    def ignoring(self, runs: set[str]) -> Known:
        """This lookup, with the files of `runs` (partial runs a complete file replaces) not ingested,
        and no earlier files asked (a file read again is not itself checked for a partial copy)."""
        return Known(self._run_of, self._empty, None, self._ignoring | frozenset(runs))

    def run(self, sha256: str) -> str | None:
        """The run a file with this content went into, if any."""
        run = self._run_of(sha256)
        return None if run in self._ignoring else run

    def empty(self, sha256: str) -> str | None:
        """The reason recorded for a capture with this content that held nothing to store, if any."""
        return self._empty.get(sha256)

    def earlier(self, path: Path) -> list[tuple[str, int, str]] | None:
        """(sha256, size, run id) of the files ingested from `path` before; None when not asked."""
        return None if self._earlier is None else self._earlier(stored_path(path))


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


def read_one(path: Path, explicit: bool, format: str | None, known: Known, metadata: dict, seen: set[str],
             report: IngestReport) -> Source | None:
    """Read one file, or None (with the reason in `report.skipped`, or `report.empty` for a capture
    with nothing to store) when it is not to be ingested (known: what the warehouse holds already)."""
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
            _nothing_to_store(path, sha256_of(path), "ncu-log", nothing, seen, report, known)
            return None
        if explicit or path.suffix.lower() in EXPORT_SUFFIXES:
            raise readers.unrecognised(path)
        report.skipped.append((display_path(path), readers.unclaimed_reason(path)))
        return None
    before = file_state(path)
    data = _bytes_for(reader, path, before[0])
    sha = hashlib.sha256(data).hexdigest() if data is not None else sha256_of(path)
    if sha in seen:
        report.skipped.append((display_path(path), "same content as another file in this ingest"))
        return None
    run_id = known.run(sha)
    if run_id is not None:
        report.skipped.append((display_path(path), f"already ingested (run {run_id})"))
        return None
    if (reason := known.empty(sha)) is not None:
        report.skipped.append((display_path(path), f"already ingested (nothing to store: {reason})"))
        return None
    earlier = known.earlier(path)
    supersedes = _partial_copy_of(path, before[0], earlier) if earlier else None
    folder = path.parent.absolute()
    try:
        result = readers.read_with(reader, path, data)
        if empty_captures.holds_nothing(result):
            raise NothingToStore(path, empty_captures.no_rows_reason(result))
    except NothingToStore as nothing:
        _nothing_to_store(path, sha, reader.name, nothing, seen, report, known, before[0])
        return None
    del data
    if result.gpu_name:
        result.gpu_name = check_name("gpu", result.gpu_name, path)
    if file_state(path) != before:
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
    return Source(result, sha, meta, folder, before[0], supersedes)


def _nothing_to_store(path: Path, sha: str, format: str, nothing: NothingToStore, seen: set[str],
                      report: IngestReport, known: Known, size: int | None = None) -> None:
    """Report a capture with nothing to store (recorded in the catalog at the end of the ingest), or
    skip it when its content was met before."""
    if sha in seen:
        report.skipped.append((display_path(path), "same content as another file in this ingest"))
        return
    if (reason := known.empty(sha)) is not None:
        report.skipped.append((display_path(path), f"already ingested (nothing to store: {reason})"))
        return
    seen.add(sha)
    where = nothing.path if nothing.line is None else f"{nothing.path}:{nothing.line}"
    report.empty.append(EmptyCapture(where, nothing.message, sha, stored_path(path), format,
                                     size if size is not None else path.stat().st_size))


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


def file_state(path: Path) -> tuple[int, int]:
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
