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
RULE_COLUMNS = {
    "launch_id": pl.Int64, "section": pl.String, "rule_name": pl.String, "rule_type": pl.String,
    "description": pl.String, "speedup_type": pl.String, "speedup_text": pl.String,
}


@dataclass
class ReadResult:
    """What one export file holds, before normalization."""

    path: Path
    format: str                   # the reader's name
    page: str                     # "raw" or "details": which ncu page the rows came from
    launches: pl.DataFrame        # LAUNCH_COLUMNS
    metrics: pl.DataFrame         # METRIC_COLUMNS
    rules: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RULE_COLUMNS))
    names_mangled: bool = False   # kernel names are Itanium-mangled (--print-kernel-base mangled)
    base_units: bool = False      # every unit is a base unit (--print-units base): fewer digits kept
    gpu_name: str | None = None   # device name when the export carries it


class Reader(Protocol):
    name: ClassVar[str]           # the --format value

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when `head` (the file's first bytes) looks like this reader's format."""

    def read(self, path: Path) -> ReadResult:
        """Parse the whole file; raise InputError naming the file (and line) when it cannot."""
