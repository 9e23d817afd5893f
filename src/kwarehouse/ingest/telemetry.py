"""What the GPU telemetry readers share: the rows they return (one per sample, GPU and field), kwh's
field names for what each tool prints (telemetry_fields.csv), unit conversion to base units, and
timestamps as integer nanoseconds since the Unix epoch.

Readers: nvidia_smi (--query-gpu CSV, dmon, pmon), dcgm (dcgmi dmon), nvml_samples (kwh's own sample file).
A telemetry log is a run of its own (tool "telemetry"); the gpu_telemetry view attaches its samples
to the profiled runs whose time window they cover (README, "GPU telemetry").
"""

from __future__ import annotations

import csv
import functools
from datetime import UTC, datetime
from importlib import resources

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import cells

# Columns of ReadResult.samples: one row per (sample, GPU or process, field), values in base units.
SAMPLE_COLUMNS = {
    "source": pl.String, "line": pl.Int64, "timestamp_ns": pl.Int64, "gpu_index": pl.Int64,
    "gpu_uuid": pl.String, "gpu_name": pl.String, "pci_bus_id": pl.String, "process_id": pl.Int64,
    "process_name": pl.String, "field": pl.String, "source_field": pl.String, "value": pl.Float64,
    "unit": pl.String, "value_text": pl.String,
}
# Units as the tools print them -> (factor to the base unit, base unit). nvidia-smi prints MiB in
# --query-gpu headers; dmon/pmon print "MB" for the same NVML byte counts divided by 2^20 (the fb
# column of dmon equals memory.used [MiB] of the query log sampled beside it in corpus 11b).
UNITS = {
    "%": (1.0, "%"), "MHz": (1e6, "Hz"), "W": (1.0, "W"), "mW": (1e-3, "W"), "MiB": (2.0 ** 20, "byte"),
    "MB": (2.0 ** 20, "byte"), "KiB": (1024.0, "byte"), "GiB": (2.0 ** 30, "byte"), "C": (1.0, "C"),
    "MB/s": (1e6, "byte/s"), "KB/s": (1e3, "byte/s"), "B/s": (1.0, "byte/s"), "bool": (1.0, "bool"), "errs": (1.0, "count"),
}
# Cells that mean "no value" in nvidia-smi, dmon/pmon and dcgmi output.
MISSING = {"[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]", "-", ""}
# A timestamp before this is not "ns since the Unix epoch" (it is a session- or boot-relative clock).
EPOCH_2001_NS = 978_307_200 * 10 ** 9


@functools.cache
def field_names() -> dict[tuple[str, str], str]:
    """(source, printed name) -> kwh field name, from telemetry_fields.csv."""
    text = resources.files("kwarehouse.ingest").joinpath("telemetry_fields.csv").read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {(row["source"], row["source_field"]): row["field"] for row in rows}


def field_name(source: str, printed: str) -> str:
    """kwh's name for a field a tool printed; a field kwh does not know keeps its printed name."""
    return field_names().get((source, printed), printed)


def convert(value: float, unit: str | None) -> tuple[float, str | None]:
    """A value in a printed unit -> (value in the base unit, base unit); unknown units stay as printed."""
    if unit is None:
        return value, None
    factor, base = UNITS.get(unit, (1.0, unit))
    return value * factor, base


def base_unit(unit: str | None) -> str | None:
    """The base unit a value printed in `unit` is stored in."""
    return UNITS.get(unit, (1.0, unit))[1] if unit else None


def number(text: str) -> float | None:
    """A cell as a number: decimal, or hexadecimal (nvidia-smi prints bitmasks as 0x0000000000000001)."""
    text = text.strip()
    if text.lower().startswith("0x"):
        return float(int(text, 16))
    return float(text)


def read_lines(path) -> tuple[list[str], set[int]]:
    """A log's lines with their endings (a BOM dropped), and the numbers (from 1) of those that hold
    bytes that are not UTF-8. A name or number on such a line cannot be read exactly (decoding it with
    replacement characters stored "p\ufffdython3" for "python3"): the readers leave the line out with
    a warning (not_utf8) instead. The whole file is decoded once; only a file that is not UTF-8
    somewhere is looked at line by line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8").lstrip("\ufeff").splitlines(keepends=True), set()
    except UnicodeDecodeError:
        lines = data.decode("utf-8", "surrogateescape").lstrip("\ufeff").splitlines(keepends=True)
    return lines, {number for number, line in enumerate(lines, 1) if not _is_utf8(line)}


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:     # a byte that was not UTF-8, kept as a surrogate escape
        return False
    return True


def not_utf8(path, number: int) -> str:
    """The warning for a sample line left out because it holds bytes that are not UTF-8."""
    return str(InputError(path, "a line with bytes that are not UTF-8 (left out): its names and numbers cannot "
                          "be read exactly; was the log re-encoded or damaged in a copy?", number))


def utc_ns(moment: datetime) -> int:
    """A naive datetime taken as UTC -> integer ns since the epoch (exact to the microsecond)."""
    delta = moment.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 10 ** 9 + delta.microseconds * 1000


def frame(path, rows: list[dict], warnings: list[str]) -> pl.DataFrame:
    """The rows of one log as a SAMPLE_COLUMNS frame. A value no column holds (inf or nan, an integer
    beyond 64 bits, a time past 2262) is NULL with a warning naming its line and field; a sample
    whose timestamp is so is left out (cells.checked_frame)."""
    if not rows:
        return pl.DataFrame(schema=SAMPLE_COLUMNS)
    names = list(SAMPLE_COLUMNS)
    return cells.checked_frame(path, [tuple(row.get(name) for name in names) for row in rows], SAMPLE_COLUMNS, 0,
                               ("timestamp_ns",), _sample_where, warnings, rows_of_a_line="samples")


_LINE, _SOURCE_FIELD = list(SAMPLE_COLUMNS).index("line"), list(SAMPLE_COLUMNS).index("source_field")


def _sample_where(row: tuple) -> tuple[int | None, str]:
    return row[_LINE], f"field {row[_SOURCE_FIELD]}"


def first_gpu_name(samples: pl.DataFrame) -> str | None:
    return samples["gpu_name"].drop_nulls().first() if samples.height else None
