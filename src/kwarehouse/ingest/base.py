"""The one small interface every reader implements, and what a reader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import polars as pl

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
    "stddev_ns": pl.Float64, "time_pct": pl.Float64,
}
RULE_COLUMNS = {
    "launch_id": pl.Int64, "section": pl.String, "rule_name": pl.String, "rule_type": pl.String,
    "description": pl.String, "speedup_type": pl.String, "speedup_text": pl.String,
}


def empty(columns: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=columns)


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
    tool: str = "ncu"             # "ncu", "nsys" or "torch"
    timeline: pl.DataFrame | None = None       # TIMELINE_COLUMNS
    summaries: pl.DataFrame | None = None      # SUMMARY_COLUMNS
    nvtx_summaries: pl.DataFrame | None = None  # NVTX_SUMMARY_COLUMNS
    tool_version: str | None = None
    names_mangled: bool = False   # kernel names are Itanium-mangled (--print-kernel-base mangled)
    base_units: bool = False      # every unit is a base unit (--print-units base): fewer digits kept
    gpu_name: str | None = None   # device name when the export carries it


class Reader(Protocol):
    name: ClassVar[str]           # the --format value

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when `head` (the file's first bytes) looks like this reader's format."""

    def read(self, path: Path) -> ReadResult:
        """Parse the whole file; raise InputError naming the file (and line) when it cannot."""
