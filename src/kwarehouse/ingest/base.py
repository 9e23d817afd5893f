"""The one small interface every reader implements, and what a reader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import polars as pl

from kwarehouse.errors import InputError

# Columns of ReadResult.launches: one row per profiled launch, in the export's own terms.
LAUNCH_COLUMNS = {
    "launch_id": pl.Int64, "kernel_name": pl.String, "process_id": pl.Int64,
    "process_name": pl.String, "host_name": pl.String, "context_id": pl.Int64,
    "stream_id": pl.Int64, "device_id": pl.Int64, "compute_capability": pl.String,
    "block_dims": pl.String, "grid_dims": pl.String,
    "nvtx_push_pop": pl.String, "nvtx_start_end": pl.String,
}
# Columns of ReadResult.metrics: long form, values still as exported (text, export units).
METRIC_COLUMNS = {
    "launch_id": pl.Int64, "section": pl.String, "metric": pl.String,
    "unit": pl.String, "value_text": pl.String,
}
# Columns of ReadResult.timeline: one row per GPU activity of a timeline tool (nsys, torch trace).
TIMELINE_COLUMNS = {
    "activity": pl.String, "device_id": pl.Int64, "device_name": pl.String, "context_id": pl.Int64,
    "stream_id": pl.Int64, "process_id": pl.Int64, "correlation_id": pl.Int64, "start_ns": pl.Int64,
    "duration_ns": pl.Int64, "grid_x": pl.Int64, "grid_y": pl.Int64, "grid_z": pl.Int64,
    "block_x": pl.Int64, "block_y": pl.Int64, "block_z": pl.Int64, "registers_per_thread": pl.Int64,
    "shared_mem_bytes": pl.Int64, "bytes": pl.Int64, "kernel_name": pl.String,
    "kernel_short_name": pl.String, "kernel_mangled": pl.String, "framework_op": pl.String,
    "op_shapes": pl.String, "nvtx_path": pl.String, "nvtx_range": pl.String,
    "framework_op_id": pl.Int64, "op_dtypes": pl.String, "op_args": pl.String,
}
# Columns of ReadResult.summaries: one row per kernel line of a summary report.
SUMMARY_COLUMNS = {
    "report": pl.String, "nvtx_range": pl.String, "grid_dims": pl.String, "block_dims": pl.String,
    "instances": pl.Int64, "total_ns": pl.Float64, "avg_ns": pl.Float64, "median_ns": pl.Float64,
    "min_ns": pl.Float64, "max_ns": pl.Float64, "stddev_ns": pl.Float64, "time_pct": pl.Float64,
    "kernel_name": pl.String,
}
NVTX_SUMMARY_COLUMNS = {
    "nvtx_range": pl.String, "style": pl.String, "instances": pl.Int64, "total_ns": pl.Float64,
    "avg_ns": pl.Float64, "median_ns": pl.Float64, "min_ns": pl.Float64, "max_ns": pl.Float64,
    "stddev_ns": pl.Float64, "time_pct": pl.Float64, "time_basis": pl.String,
}
RULE_COLUMNS = {
    "launch_id": pl.Int64, "section": pl.String, "rule_name": pl.String, "rule_type": pl.String,
    "description": pl.String, "speedup_type": pl.String, "speedup_text": pl.String,
}


def most_used(names: list) -> str | None:
    """The most frequent non-null name, the first in sort order on a tie (Series.mode().sort()[0],
    without the polars calls that cost more than a small timeline)."""
    counts: dict = {}
    for name in names:
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    most = max(counts.values())
    return min(name for name, count in counts.items() if count == most)


# Below this many rows polars builds a frame faster from rows than from columns (28 columns: 8 rows
# 0.09 against 0.21 ms, 450 rows 1.56 against 0.42 ms); a frame from a dict of lists costs more than
# either (0.28 / 0.54 ms).
ROW_WISE_BELOW = 64


def frame_of_rows(rows: list[tuple], columns: dict, first: int = 0) -> pl.DataFrame:
    """A frame of these columns from rows of values in their order, starting at field `first`."""
    if len(rows) < ROW_WISE_BELOW:
        return pl.DataFrame([row[first:] for row in rows] if first else rows, schema=columns, orient="row")
    values = list(zip(*rows))[first:]
    return pl.DataFrame([pl.Series(name, column, dtype=dtype)
                         for (name, dtype), column in zip(columns.items(), values)])


def frame_of_columns(values: list, columns: dict) -> pl.DataFrame:
    """A frame of these columns from one list of values per column, in their order."""
    if len(values[0]) < ROW_WISE_BELOW:
        return pl.DataFrame(list(zip(*values)), schema=columns, orient="row")
    return pl.DataFrame([pl.Series(name, column, dtype=dtype)
                         for (name, dtype), column in zip(columns.items(), values)])


_EMPTY: dict[int, tuple[dict, pl.DataFrame]] = {}


def empty(columns: dict) -> pl.DataFrame:
    """A new frame with no rows and these columns. Each ReadResult makes three; building one from its
    schema costs ~90 us (a third of a small trace's read), clearing a kept one ~1 us. Kept by the
    columns dict itself (held here, so its id is never reused)."""
    kept = _EMPTY.get(id(columns))
    if kept is None or kept[0] is not columns:
        kept = _EMPTY[id(columns)] = (columns, pl.DataFrame(schema=columns))
    return kept[1].clear()


@dataclass
class ReadResult:
    """What one export file holds, before normalization. An ncu export fills launches, metrics and
    rules; a timeline (nsys, torch trace) fills timeline; a summary report fills summaries."""

    path: Path
    format: str                   # the reader's name
    page: str                     # ncu: "raw" or "details"; others: what the rows are ("timeline", "summary")
    launches: pl.DataFrame = field(default_factory=lambda: empty(LAUNCH_COLUMNS))
    metrics: pl.DataFrame = field(default_factory=lambda: empty(METRIC_COLUMNS))
    rules: pl.DataFrame = field(default_factory=lambda: empty(RULE_COLUMNS))
    tool: str = "ncu"             # "ncu", "nsys", "torch" or "telemetry"
    timeline: pl.DataFrame | None = None       # TIMELINE_COLUMNS
    summaries: pl.DataFrame | None = None      # SUMMARY_COLUMNS
    nvtx_summaries: pl.DataFrame | None = None  # NVTX_SUMMARY_COLUMNS
    samples: pl.DataFrame | None = None         # GPU telemetry (tool "telemetry"): ingest.telemetry.SAMPLE_COLUMNS
    # other per-run tables, by warehouse table name (nsys memory-op and API summaries, NVTX ranges)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    tool_version: str | None = None
    names_mangled: bool = False   # kernel names are Itanium-mangled (--print-kernel-base mangled)
    base_units: bool = False      # every unit is a base unit (--print-units base): fewer digits kept
    gpu_name: str | None = None   # device name when the export carries it
    # what the export says about its GPU and session (runs columns): sm_count, compute_capability
    run_info: dict = field(default_factory=dict)
    # rows of a table kwh reads that could not be read (one line each, naming the file and line):
    # the rest of the file was read; the ingest report counts and prints them
    warnings: list[str] = field(default_factory=list)


class Reader(Protocol):
    name: ClassVar[str]           # the --format value

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when `head` (the file's first bytes) looks like this reader's format."""

    def read(self, path: Path) -> ReadResult:
        """Parse the whole file; raise InputError naming the file (and line) when it cannot. A reader
        with takes_bytes = True also takes read(path, data): the file's bytes, already read."""


# The most bytes a reader takes into memory from one file (text exports are parsed whole, and use a
# few times their size). A larger file is refused before it is read, not half-way through memory.
# The largest real export seen is 11 MB (an ncu details page of 113 launches); this allows ~20,000.
MAX_READ_BYTES = 2 << 30
# Copying a file in this size of chunks keeps memory bounded whatever the file holds.
CHUNK_BYTES = 1 << 20


def refuse_oversized(path: Path, size: int | None = None) -> None:
    """Refuse a file larger than MAX_READ_BYTES before anything reads it."""
    size = path.stat().st_size if size is None else size
    if size > MAX_READ_BYTES:
        raise InputError(path, f"{size / 1e9:.1f} GB is more than kwh reads from one export "
                         f"({MAX_READ_BYTES / 1e9:.1f} GB); export fewer launches per file")


@dataclass
class LineScan:
    """What one streaming pass over a text file found, reading CHUNK_BYTES at a time."""

    size: int
    longest: int            # bytes in the longest line, without its newline
    longest_line: int       # its 1-based line number
    ends_with_newline: bool


def scan_lines(path: Path, stop_above: int | None = None) -> LineScan:
    """Line lengths of a file without holding more than one chunk of it. With `stop_above`, the scan
    ends after the first line longer than that (measured whole), not reading the rest of the file."""
    size = longest = current = 0
    longest_line = line = 1
    last = b""
    giant = False
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            size += len(chunk)
            last = chunk[-1:]
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                current += end - start
                if current > longest:
                    longest, longest_line = current, line
                if giant:
                    break
                current, start, line = 0, end + 1, line + 1
            else:
                current += len(chunk) - start
                if current > longest:
                    longest, longest_line = current, line
                giant = giant or (stop_above is not None and longest > stop_above)
                continue
            break
    return LineScan(size, longest, longest_line, last == b"\n")
