"""Readers, one module per export format, and the registry that picks one by content."""

from __future__ import annotations

from pathlib import Path

from kwarehouse.errors import InputError, KwhError
from kwarehouse.ingest import base, captured_text, cells, gzipped, nsys_sqlite
from kwarehouse.ingest.base import Reader, ReadResult
from kwarehouse.ingest.dcgm import DcgmiDmon
from kwarehouse.ingest.ncu_details_csv import NcuDetailsCsv
from kwarehouse.ingest.ncu_raw_csv import NcuRawCsv
from kwarehouse.ingest.ncu_rep import MAGIC as NCU_REP_MAGIC
from kwarehouse.ingest.ncu_rep import NcuRep
from kwarehouse.ingest.ncu_text import NcuText
from kwarehouse.ingest.nvidia_smi import NvidiaSmiDmon, NvidiaSmiPmon, NvidiaSmiQuery
from kwarehouse.ingest.nvml_samples import NvmlSamples
from kwarehouse.ingest.nsys_sqlite import NsysSqlite
from kwarehouse.ingest.nsys_stats_csv import NsysStatsCsv
from kwarehouse.ingest.nsys_text import NsysText
from kwarehouse.ingest.torch_trace import TorchTrace

READERS: dict[str, Reader] = {r.name: r for r in (NcuRawCsv(), NcuDetailsCsv(), NcuText(), NcuRep(), NsysSqlite(),
                                                   NsysStatsCsv(), NsysText(), TorchTrace())}

# GPU telemetry logs (ingest/telemetry.py): sniffed after the profiler exports.
READERS.update({r.name: r for r in (NvmlSamples(), NvidiaSmiQuery(), NvidiaSmiDmon(), NvidiaSmiPmon(), DcgmiDmon())})

# How much of a file sniffing looks at: enough to pass program output a user redirected before the CSV.
SNIFF_BYTES = 1 << 20


def reader_named(name: str) -> Reader:
    try:
        return READERS[name]
    except KeyError:
        raise KwhError(f"unknown format {name!r}; known formats: {', '.join(READERS)}") from None


def first_guesses(head: bytes) -> tuple[str, ...]:
    """Readers to try before all the others, by a byte test on the (decompressed) first bytes: a JSON
    object, an SQLite database, an ncu-rep report. The text sniffers decode and scan up to SNIFF_BYTES
    line by line (the nsys ones took a quarter of a trace's ingest); a file these readers claim could
    not be claimed by a text reader anyway, and one they do not claim goes through the usual order."""
    if head.startswith(nsys_sqlite.MAGIC):
        return ("nsys-sqlite",)
    if head.startswith(NCU_REP_MAGIC):
        return ("ncu-rep",)
    if head.lstrip()[:1] == b"{":
        return ("torch-trace", "nvml-samples")
    return ()


# Sniffing reads this much first: enough for the first byte-test guess to claim its file (a trace's
# "traceEvents" key follows a few KB of device properties; SQLite and ncu-rep need their magic), so
# a small trace or nsys export is not read a whole megabyte deep just to be sniffed.
GUESS_BYTES = 64 << 10


def _claims(reader: Reader, path: Path, head: bytes) -> bool:
    try:
        return reader.sniff(path, head)
    except Exception:   # noqa: BLE001 - a sniffer choking on garbage just does not claim the file
        return False


# Readers that find their report anywhere in a file, after whatever a program printed first
# (`ncu python train.py > out.txt` puts the whole training log before the report): sniffed on every
# window of a text file, not only on its first SNIFF_BYTES.
FOUND_ANYWHERE = ("ncu-raw-csv", "ncu-details-csv", "ncu-text", "nsys-stats-csv", "nsys-text")
# Each window after the first starts with this much of the one before (from a line start), so that
# a report's first lines cut by a window's end are seen whole: ncu text's launch line before its
# first "Section:", a CSV header line.
SNIFF_OVERLAP = 64 << 10


def sniff(path: Path) -> Reader | None:
    """The reader whose format the file's content matches, or None. A text file is sniffed window by
    window (SNIFF_BYTES each) to its end, in bounded memory, for the readers that find their report
    wherever it is (FOUND_ANYWHERE); a UTF-16, BOM, CR-only or coloured capture is sniffed as the text
    its readers will see (captured_text)."""
    with open(path, "rb") as handle:
        head = handle.read(GUESS_BYTES)
        guesses = () if gzipped.is_gzip(head) else first_guesses(head)
        # the first guess claims on the first bytes what it would claim on SNIFF_BYTES; anything
        # else is sniffed on SNIFF_BYTES in the usual order
        if guesses and _claims(READERS[guesses[0]], path, head):
            return READERS[guesses[0]]
        head += handle.read(SNIFF_BYTES - len(head))
        packed = gzipped.is_gzip(head)
        if packed:
            plain = gzipped.head_of(head, len(head))    # decompressed once, for every sniffer
            for name in dict.fromkeys((*first_guesses(plain), *READERS)):
                try:
                    claimed = gzipped.sniff_plain(READERS[name], path, plain)
                except Exception:   # noqa: BLE001 - a sniffer choking on garbage just does not claim the file
                    claimed = False
                if claimed:
                    return gzipped.Gzipped(READERS[name])
            return None
        codec, _ = captured_text.encoding_of(head)
        window = head if captured_text.is_plain(head) else captured_text.utf8_window(head, codec)
        for name in dict.fromkeys((*first_guesses(window), *READERS)):
            if _claims(READERS[name], path, window):
                return READERS[name]
        if b"\0" in window or len(head) < SNIFF_BYTES:
            return None        # binary (a text export has no NUL once decoded), or sniffed whole
        return _sniff_further(handle, path, codec, window)


def _sniff_further(handle, path: Path, codec: str, window: bytes) -> Reader | None:
    """Sniff the rest of a text file for a report that starts after its first SNIFF_BYTES."""
    read = len(window)
    while read < base.MAX_READ_BYTES and (chunk := handle.read(SNIFF_BYTES)):
        read += len(chunk)
        tail = window[-SNIFF_OVERLAP:]
        tail = tail[tail.find(b"\n") + 1:]
        fresh = chunk if codec == "utf-8" and captured_text.is_plain(chunk) \
            else captured_text.utf8_window(chunk, codec)
        window = tail + fresh
        for name in FOUND_ANYWHERE:
            if _claims(READERS[name], path, window):
                return READERS[name]
    return None


# Why a file that no reader claims was not ingested, by what its first bytes look like. Binary files
# keep the wording kwh always used; text and JSON (notes, logs, manifests, tool output) say so.
NOT_AN_EXPORT = "not a profiler export ({kind})"
NO_READER = "no reader for this kind of file"
_KIND_BYTES = 4096


def unclaimed_reason(path: Path) -> str:
    """The skip reason for a file no reader claimed: 'not a profiler export (text)' / '(JSON)', or
    NO_READER for binary content (which is not worth a line of its own in the ingest summary)."""
    with open(path, "rb") as handle:
        head = handle.read(_KIND_BYTES)
    codec, _ = captured_text.encoding_of(head)
    if codec != "utf-8":
        head = captured_text.utf8_window(head, codec)    # a UTF-16 log or note is text too
    if gzipped.is_gzip(head) or b"\0" in head:
        return NO_READER
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:   # not just a character cut by the 4 KB boundary
            return NO_READER
        text = head[:exc.start].decode("utf-8")
    text = text.lstrip("\ufeff \t\r\n")
    return NOT_AN_EXPORT.format(kind="JSON" if text[:1] in ("{", "[") else "text")


def reject_empty(path: Path) -> None:
    if path.stat().st_size == 0:
        raise InputError(path, "file is empty; expected a profiler export such as ncu --csv --page raw")


# Binary report files that have no reader of their own, and how to export them into one that does.
EXPORT_HINTS = {
    ".nsys-rep": "an Nsight Systems report file; export it with nsys export --type sqlite (or nsys stats --format csv)",
    ".qdrep": "an older Nsight Systems report file; export it with nsys export --type sqlite",
}


def unrecognised(path: Path) -> InputError:
    hint = EXPORT_HINTS.get(path.suffix.lower())
    if hint:
        return InputError(path, hint)
    try:
        cut = nsys_sqlite.cut_short(path)
        with open(path, "rb") as handle:
            packed = gzipped.is_gzip(handle.read(2))
    except OSError:
        cut, packed = None, False
    if packed:
        return InputError(path, "gzip-compressed, but what it holds is not a recognised export (known formats: "
                          + ", ".join(READERS) + "); is it cut short, or not a profiler export?")
    if cut:
        # SQLite cannot open its schema from a cut file, so no sniffer claims it: say what it is.
        return InputError(path, f"not a recognised export: {cut} ({nsys_sqlite.CUT_HINT})")
    return InputError(path, "not a recognised export (known formats: " + ", ".join(READERS) +
                      "); was it written by ncu --csv, nsys or the PyTorch profiler? Pass --format to force a reader")


def read(path: Path, format: str | None = None) -> ReadResult:
    """Read one export with the named reader, or the one its content matches."""
    reject_empty(path)
    reader = reader_named(format) if format else sniff(path)
    if reader is None:
        raise unrecognised(path)
    return read_with(reader, path)


# Formats that are not text: never transcoded.
BINARY_FORMATS = ("nsys-sqlite", "ncu-rep")


def read_with(reader: Reader, path: Path, data: bytes | None = None) -> ReadResult:
    """reader.read(path), where anything a reader did not foresee in a malformed file becomes an
    InputError naming the file: bad input never escapes as another exception. A gzip-compressed file
    is decompressed first (ingest.gzipped). data: the file's bytes where the caller read them already
    (ingest, for their hash), given to a reader that parses bytes (takes_bytes) instead of reading
    the file again."""
    if not isinstance(reader, (gzipped.Gzipped, captured_text.Transcoded)):
        head = data[:_KIND_BYTES] if data is not None else _head_of_file(path)
        if gzipped.is_gzip(head):
            reader = gzipped.Gzipped(reader)
        elif not getattr(reader, "decodes_captures", False) and reader.name not in BINARY_FORMATS \
                and captured_text.needs_transcoding(head):
            # a reader that parses UTF-8 bytes, given a UTF-16 (PowerShell) or BOM-prefixed capture
            reader = captured_text.Transcoded(reader)
    try:
        if data is not None and getattr(reader, "takes_bytes", False):
            return reader.read(path, data)
        return reader.read(path)
    except KwhError:
        raise
    except MemoryError:
        raise InputError(path, f"too large to read as {reader.name}; is it really such an export?") from None
    except Exception as exc:   # noqa: BLE001 - the point is to catch what parsers raise on garbage
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if (value := cells.unstorable_value(exc)) is not None:
            # re-exporting writes the same number: say what it is, not polars' builder text
            raise InputError(path, f"holds {value}, which no {reader.name} column can store; kwh reads such "
                             "cells as NULL where it knows the column: please report this with the file") from None
        raise InputError(path, f"not a readable {reader.name} export ({detail}); re-export it") from None


def _head_of_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(_KIND_BYTES)
    except OSError:
        return b""       # the reader words the error


__all__ = ["READERS", "ReadResult", "Reader", "read", "read_with", "reader_named", "sniff"]
