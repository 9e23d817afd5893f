"""Nsight Systems stats reports as CSV (`nsys stats --report R --format csv`), to a file or captured
from stdout, where "Generating SQLite file ...", "Processing [db] with [.../reports/R.py]...",
"NOTICE:" and "SKIPPED: ..." lines surround one or several report blocks.

Reports read (columns as NVIDIA's report scripts name them; "(ns)" follows --timeunit):
  cuda_gpu_kern_sum  Time (%), Total Time, Instances, Avg, Med, Min, Max, StdDev, [GridXYZ, BlockXYZ,] Name
                     older releases (gpukernsum): Time(%), Total Time (ns), Instances, Average, Minimum,
                     Maximum, Name - times in ns
  cuda_gpu_trace     Start, Duration, CorrId, GrdX..BlkZ, Reg/Trd, StcSMem, DymSMem, Bytes, Throughput,
                     SrcMemKd, DstMemKd, Device, Ctx, [GreenCtx,] Strm, Name - one row per GPU activity
  nvtx_kern_sum      NVTX Range, Style, PID, TID, NVTX Inst, Kern Inst, Total Time, Avg, Med, Min, Max,
                     StdDev, Kernel Name
  nvtx_sum           Time (%), Total Time, Instances, Avg, Med, Min, Max, StdDev, Style, Range
                     (older nvtxsum: Time(%), Total Time (ns), Instances, Average, Minimum, Maximum, Range)
  nvtx_gpu_proj_sum  Range, Style, Total Proj Time, Total Range Time, Range Instances, Proj Avg, Proj Med,
                     Proj Min, Proj Max, Proj StdDev, Total GPU Ops, ... -> nvtx_summaries, 'gpu projection'
  cuda_gpu_mem_time_sum / cuda_gpu_mem_size_sum
                     Time (%), Total Time, Count, Avg, Med, Min, Max, StdDev, Operation / Total (MB), Count,
                     Avg (MB), ..., Operation -> memory_op_summaries, one row per operation
  cuda_api_sum       Time (%), Total Time, Num Calls, Avg, Med, Min, Max, StdDev, Name -> api_summaries
                     (osrt_sum has the same columns: a block is read as CUDA API calls only when nsys
                     announced cuda_api_sum, or, unannounced, when every name is a cu*/cuda* function)
  nvtx_pushpop_trace Start, End, Duration, DurChild, DurNonChild, Name, PID, TID, Lvl, NumChild, RangeId,
                     ParentId, RangeStack[, NameTree] -> nvtx_ranges
  nvtx_gpu_proj_trace Name, Projected Start, Projected Duration, Orig Start, Orig Duration, Style, PID, TID,
                     NumGPUOps, Lvl, NumChild, RangeId, ParentId, RangeStack -> nvtx_ranges

Reports kwh has no table for (osrt_sum, um_*, openmp_sum, ...) are passed over. A capture in which nsys
said the report has no CUDA kernel data and that holds no table kwh reads is refused with exactly
NO_KERNEL_DATA. The console form of the same reports (the default --format column, and what
`nsys profile --stats=true` prints) is read by nsys_text.py into the same blocks and frames.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError, NothingToStore
from kwarehouse.ingest import base, captured_text, cells, ncu_csv
from kwarehouse.ingest.base import NVTX_SUMMARY_COLUMNS, SUMMARY_COLUMNS, TIMELINE_COLUMNS, ReadResult

TIME_UNITS = {"ns": 1, "nsec": 1, "us": 1e3, "usec": 1e3, "ms": 1e6, "msec": 1e6, "s": 1e9, "sec": 1e9,
              "nanoseconds": 1}
SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
UNIT_SUFFIX = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)$")
REPORT_LINE = re.compile(r"^Processing \[.*\] with \[.*?(?P<report>[\w]+)\.py\]")
# `nsys profile --stats=true` announces each report on a line of its own
EXECUTING_LINE = re.compile(r"^\[\d+/\d+\] Executing '(?P<report>\w+)' stats report")
# the title nsys prints above a table: " ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):"
TITLE_LINE = re.compile(r"^ ?\*\* .*\((?P<report>\w+)\):\s*$")
SKIPPED_KERNELS = re.compile(r"^SKIPPED: .*does not contain CUDA kernel data")
NO_KERNEL_DATA = "this nsys report has no CUDA kernel data"
# Which report a header is, by its column names with units removed (first match wins).
SIGNATURES = {
    "nvtx_kern_sum": {"NVTX Range", "Kern Inst", "Total Time", "Kernel Name"},
    "nvtx_gpu_proj_trace": {"Name", "Projected Start", "Projected Duration"},
    "nvtx_gpu_proj_sum": {"Range", "Total Proj Time"},
    "nvtx_pushpop_trace": {"Start", "End", "Duration", "DurChild", "Name"},
    "cuda_gpu_trace": {"Start", "Duration", "GrdX", "Name"},
    "cuda_gpu_mem_time_sum": {"Total Time", "Count", "Operation"},
    "cuda_gpu_mem_size_sum": {"Total", "Count", "Operation"},
    "nvtx_sum": {"Total Time", "Instances", "Range"},
    "cuda_gpu_kern_sum": {"Total Time", "Instances", "Name"},
    "cuda_api_sum": {"Total Time", "Num Calls", "Name"},
}
# Report names of older nsys releases, and the names of the reports above that nsys announces.
OLD_REPORTS = {"gpukernsum": "cuda_gpu_kern_sum", "nvtxsum": "nvtx_sum", "gputrace": "cuda_gpu_trace",
               "cudaapisum": "cuda_api_sum", "gpumemtimesum": "cuda_gpu_mem_time_sum",
               "gpumemsizesum": "cuda_gpu_mem_size_sum", "nvtxppsum": "nvtx_sum"}
TRUNCATED_ROW = ("file ends in the middle of a line (still being copied, or truncated?); wait for the copy to "
                 "finish or re-run nsys stats")
OLD_NAMES = {"Time(%)": "Time", "Average": "Avg", "Minimum": "Min", "Maximum": "Max", "CorrID": "CorrId",
             "Median": "Med", "Operations": "Count", "Calls": "Num Calls"}
NULL_CELLS = ("", "-", "N/A", "n/a", "None")   # nsys prints None for a missing value in column format
NULL_SET = frozenset(NULL_CELLS)
# A number with commas as nsys writes it: thousands separators in its console tables ("1,831,281.5").
# A comma anywhere else is a localized copy's decimal comma ("100,0", "88.573,48"): never read as a
# separator (that stored 88.573,48 us as 88.57348 us), the row is left out with a warning.
EN_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# A cell that only a decimal-comma locale writes: once a table has one, its "12,992" and "17.714"
# may be 12.992 and 17714 as well as the other way round, and no cell with a comma or a grouping
# dot is read.
DECIMAL_COMMA = re.compile(r"[-+]?\d+(?:\.\d{3})*,\d+")
GROUPING_DOT = re.compile(r"[-+]?\d{1,3}(?:\.\d{3})+")

# no line of nsys stats output comes near the limit kwh's text readers share (README: bounded memory)
MAX_LINE_BYTES = ncu_csv.MAX_LINE_BYTES


def _grouped(cell: str) -> float:
    """A cell with a comma as a number: only with thousands separators where they belong; ValueError else."""
    if EN_GROUPED.fullmatch(cell) is None:
        raise ValueError(cell)
    return float(cell.replace(",", ""))


@dataclass
class Block:
    """One report table of a capture, as cells: the CSV reader and the console-text reader both make these."""
    report: str
    header: list[str]
    rows: list[list[str]]
    lines: list[int]          # file line of each row
    default_unit: str | None = None   # unit of unit-less columns (old console titles: "(nanoseconds)", "(KiB)")
    announced: bool = False           # nsys named the report (Processing/Executing/title line)
    # rows left out because they could not be read (a warning each, if kwh reads the report)
    warnings: list[InputError] = field(default_factory=list)
    # base column name -> (index, factor to ns or bytes), made at the first lookup (_scaled)
    scales: dict[str, tuple[int, float]] | None = field(default=None, init=False, repr=False, compare=False)
    # a cell of the table has a decimal comma (DECIMAL_COMMA), asked only where a row is read alone
    decimal_comma: bool | None = field(default=None, init=False, repr=False, compare=False)


@functools.lru_cache(maxsize=4096)   # the same few dozen header cells, file after file
def column_name(name: str) -> tuple[str, str | None]:
    """"Avg (ns)" -> ("Avg", "ns"); "Time (%)" -> ("Time", "%"); "Average" -> ("Avg", None)."""
    name = name.strip()
    if name in OLD_NAMES:
        return OLD_NAMES[name], None
    match = UNIT_SUFFIX.match(name)
    if match:
        return OLD_NAMES.get(match["name"], match["name"]), match["unit"]
    return name, None


def report_of(header: list[str]) -> str | None:
    names = {column_name(c)[0] for c in header}
    # older releases name the memory operation column "Name"
    if "Count" in names and "Name" in names and "Operation" not in names:
        names = names | {"Operation"}
    for report, needed in SIGNATURES.items():
        if needed <= names:
            return report
    return None


def announced_report(line: str) -> str | None:
    """The report a Processing / Executing / title line names (old names mapped), else None."""
    for pattern in (REPORT_LINE, EXECUTING_LINE, TITLE_LINE):
        if found := pattern.match(line):
            return OLD_REPORTS.get(found["report"], found["report"])
    return None


def _parse_lines(lines: list[str]) -> list[list[str] | None]:
    """_parse_line of every line: in one pass of the csv module where each line makes one row (a quote
    left open joins lines, an odd byte raises: then line by line, as the reader always did)."""
    try:
        rows = list(csv.reader(lines))
    except csv.Error:
        rows = None
    if rows is None or len(rows) != len(lines):
        return [_parse_line(line) for line in lines]
    return rows


def _parse_line(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


def read_text(path: Path, what: str) -> captured_text.Captured:
    """The file's lines as captured_text makes them (decoded by BOM or UTF-16 pattern, ANSI codes,
    CR line ends and spliced tool messages undone), refusing a file too large, or cut in the middle
    of a line. Bytes that are not UTF-8 are kept as surrogate escapes: a row of a report kwh reads
    that holds any is that row's warning (result), elsewhere they do not matter."""
    captured = captured_text.captured_lines(captured_text.read_text(path, errors="surrogateescape"))
    # nsys ends every line it writes, the last one too: a file whose last line has no newline was
    # cut short (a kernel name cut in two would otherwise be stored as a name, and the reports
    # after the cut would be silently missing).
    if captured.lines and not captured.ends_with_newline:
        raise InputError(path, TRUNCATED_ROW, captured.numbers[-1])
    return captured


def last_content(lines: list[str]) -> int:
    """Index of the last line that is not blank (-1 when none): a row that cannot be read there is
    where the file was cut, and the file is refused; a bad row before it is that row's warning."""
    return next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), -1)


class NsysStatsCsv:
    name: ClassVar[str] = "nsys-stats-csv"
    decodes_captures: ClassVar[bool] = True    # reads UTF-16, BOM, CR-only text itself (captured_text)

    def sniff(self, path: Path, head: bytes) -> bool:
        return csv_table_in(head.decode("utf-8", errors="replace"))

    def read(self, path: Path) -> ReadResult:
        captured_text.refuse_giant_line(path, MAX_LINE_BYTES, "nsys stats CSV output")
        captured = read_text(path, "nsys stats --format csv output")
        return result(path, self.name, self._blocks(path, captured), captured.lines)

    def _blocks(self, path: Path, captured: captured_text.Captured) -> list[Block]:
        blocks: list[Block] = []
        announced: str | None = None
        current: Block | None = None
        lines = captured.lines
        last = last_content(lines)
        for index, (line, number, fields) in enumerate(zip(lines, captured.numbers, _parse_lines(lines))):
            # both patterns start with a literal "Processing [" / "[": other lines skip the regexes
            found = line[:1] in ("P", "[") and (REPORT_LINE.match(line) or EXECUTING_LINE.match(line))
            if found:
                announced, current = OLD_REPORTS.get(found["report"], found["report"]), None
                continue
            if not line.strip() or line.startswith(("Generating ", " **", "**")):
                current = None
                continue
            if captured_text.is_tool_message(line):
                continue      # nsys's stderr between two rows (or two blocks): not a row, not an end
            report = report_of(fields) if fields and len(fields) > 2 else None
            if report is not None:
                # a header: a new block, even right after the rows of another (stderr between them)
                current = Block(announced or report, fields, [], [], announced=announced is not None)
                blocks.append(current)
                continue
            if current is None:
                continue   # other chatter between blocks
            if fields is None or len(fields) != len(current.header):
                error = InputError(path, f"row has {len(fields or [])} fields, the {current.report} header has "
                                   f"{len(current.header)} (truncated or edited?); re-run nsys stats", number)
                if index >= last:
                    raise error       # the file was cut in this row
                current.warnings.append(error)
                continue
            current.rows.append(fields)
            current.lines.append(number)
        return blocks


def csv_table_in(text: str) -> bool:
    """A CSV header line of a report kwh reads anywhere in the text (a program's output may come
    first). Only lines with two commas are parsed: a long log costs a substring test a line."""
    for line in text.splitlines():
        if line.count(",") < 2:
            continue
        fields = _parse_line(line)
        if fields and len(fields) > 2 and report_of(fields):
            return True
    return False


# -- blocks to frames ----------------------------------------------------------------------------

API_SUMMARY_COLUMNS = {
    "api_name": pl.String, "calls": pl.Int64, "total_ns": pl.Float64, "avg_ns": pl.Float64,
    "median_ns": pl.Float64, "min_ns": pl.Float64, "max_ns": pl.Float64, "stddev_ns": pl.Float64,
    "time_pct": pl.Float64,
}
MEMORY_OP_COLUMNS = {
    "operation": pl.String, "operations": pl.Int64, "total_ns": pl.Float64, "avg_ns": pl.Float64,
    "median_ns": pl.Float64, "min_ns": pl.Float64, "max_ns": pl.Float64, "stddev_ns": pl.Float64,
    "time_pct": pl.Float64, "total_bytes": pl.Float64, "avg_bytes": pl.Float64, "median_bytes": pl.Float64,
    "min_bytes": pl.Float64, "max_bytes": pl.Float64, "stddev_bytes": pl.Float64,
}
NVTX_RANGE_COLUMNS = {
    "report": pl.String, "nvtx_range": pl.String, "style": pl.String, "process_id": pl.Int64,
    "thread_id": pl.Int64, "range_id": pl.Int64, "parent_id": pl.Int64, "level": pl.Int64,
    "child_count": pl.Int64, "range_stack": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64,
    "duration_ns": pl.Int64, "child_duration_ns": pl.Int64, "gpu_start_ns": pl.Int64, "gpu_end_ns": pl.Int64,
    "gpu_duration_ns": pl.Int64, "gpu_op_count": pl.Int64,
}
KERNEL_REPORTS = ("cuda_gpu_kern_sum", "nvtx_kern_sum", "cuda_gpu_trace")
READ_REPORTS = (*KERNEL_REPORTS, "nvtx_sum", "nvtx_gpu_proj_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                "cuda_api_sum", "nvtx_pushpop_trace", "nvtx_gpu_proj_trace")
CUDA_API_NAME = re.compile(r"^cu[A-Z]|^cuda|^cu_")


@dataclass
class Frames:
    summaries: list[pl.DataFrame] = field(default_factory=list)
    timelines: list[pl.DataFrame] = field(default_factory=list)
    nvtx_summaries: list[pl.DataFrame] = field(default_factory=list)
    memory_time: list[Block] = field(default_factory=list)
    memory_size: list[Block] = field(default_factory=list)
    api: list[pl.DataFrame] = field(default_factory=list)
    nvtx_ranges: list[pl.DataFrame] = field(default_factory=list)


def result(path: Path, reader: str, blocks: list[Block], lines: list[str]) -> ReadResult:
    """The ReadResult of a capture's blocks; reports kwh has no table for are passed over."""
    frames = Frames()
    used = []
    for block in blocks:
        if block.report not in READ_REPORTS:
            continue      # osrt_sum and the like: announced by nsys, no table in kwh
        if block.report == "cuda_api_sum" and not block.announced and not _all_cuda_api(block):
            continue      # an unannounced osrt_sum: same columns as cuda_api_sum
        _drop_undecodable(path, block)
        used.append(block)
        _add(path, block, frames)
    if not any((frames.summaries, frames.timelines, frames.nvtx_summaries, frames.memory_time, frames.memory_size,
                frames.api, frames.nvtx_ranges)):
        if any(SKIPPED_KERNELS.match(line) for line in lines):
            raise NothingToStore(path, NO_KERNEL_DATA)   # nsys said so: not a failure
        raise InputError(path, "no nsys stats report table kwh reads found; expected nsys stats output of "
                         + ", ".join(READ_REPORTS))
    timeline = _concat(frames.timelines) if frames.timelines else None
    gpu = base.most_used(timeline["device_name"].to_list()) if timeline is not None else None
    tables = {}
    if frames.memory_time or frames.memory_size:
        tables["memory_op_summaries"] = _memory_ops(path, frames.memory_time, frames.memory_size)
    if frames.api:
        tables["api_summaries"] = _concat(frames.api)
    if frames.nvtx_ranges:
        tables["nvtx_ranges"] = _concat(frames.nvtx_ranges)
    summaries = _concat(frames.summaries) if frames.summaries else None
    nvtx_summaries = _concat(frames.nvtx_summaries) if frames.nvtx_summaries else None
    warnings = sorted((w for block in used for w in block.warnings), key=lambda w: w.line or 0)
    if warnings and not any(frame is not None and frame.height
                            for frame in (timeline, summaries, nvtx_summaries, *tables.values())):
        raise warnings[0]     # no row of any table could be read: nothing usable
    return ReadResult(path=path, format=reader, page="timeline" if frames.timelines else "summary", tool="nsys",
                      timeline=timeline, summaries=summaries, nvtx_summaries=nvtx_summaries,
                      gpu_name=gpu, tables=tables, warnings=[str(w) for w in warnings])


# A character decoded from a byte that is not UTF-8 (read_text keeps such bytes as surrogate escapes).
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def _drop_undecodable(path: Path, block: Block) -> None:
    """Rows holding bytes that are not UTF-8 become warnings: their names cannot be stored as read."""
    bad = [i for i, row in enumerate(block.rows) if any(_UNDECODABLE.search(cell) for cell in row)]
    for i in reversed(bad):
        block.warnings.append(InputError(path, f"a {block.report} row with bytes that are not UTF-8 (left out); "
                                         "re-capture the output as UTF-8", block.lines[i]))
        del block.rows[i], block.lines[i]


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return frames[0] if len(frames) == 1 else pl.concat(frames)   # most captures hold one block of each


def _all_cuda_api(block: Block) -> bool:
    names = [_Row(Path(), block, i).text("Name") or "" for i in range(len(block.rows))]
    return bool(names) and all(CUDA_API_NAME.match(n) for n in names)


def _add(path: Path, block: Block, frames: Frames) -> None:
    if block.report == "cuda_gpu_trace":
        frames.timelines.append(_trace(path, block))
    elif block.report in ("nvtx_sum", "nvtx_gpu_proj_sum"):
        frames.nvtx_summaries.append(_summary(path, block, NVTX_SUMMARY_COLUMNS))
    elif block.report == "cuda_gpu_mem_time_sum":
        frames.memory_time.append(block)
    elif block.report == "cuda_gpu_mem_size_sum":
        frames.memory_size.append(block)
    elif block.report == "cuda_api_sum":
        frames.api.append(_api(path, block))
    elif block.report in ("nvtx_pushpop_trace", "nvtx_gpu_proj_trace"):
        frames.nvtx_ranges.append(_nvtx_ranges(path, block))
    else:
        frames.summaries.append(_summary(path, block, SUMMARY_COLUMNS))


def _scaled(block: Block, name: str) -> tuple[int | None, float]:
    """Index of a column by base name (the first of that name), and the factor that turns its values
    into ns (or bytes). Every cell is looked up by name: the header is parsed once per block, not once
    per cell (that was 90 % of reading a 134-row cuda_gpu_trace)."""
    if block.scales is None:
        block.scales = {}
        for index, column in enumerate(block.header):
            base_name, unit = column_name(column)
            if base_name not in block.scales:
                unit = unit or block.default_unit or "ns"
                block.scales[base_name] = (index, TIME_UNITS.get(unit, SIZE_UNITS.get(unit, 1.0)))
    return block.scales.get(name, (None, 1.0))


@dataclass
class _Row:
    """One row of a report block, read by column base name with units applied."""
    path: Path
    block: Block
    index: int

    def text(self, name: str) -> str | None:
        column, _ = _scaled(self.block, name)
        cell = self.block.rows[self.index][column].strip() if column is not None else ""
        return None if cell in NULL_CELLS else cell

    def value(self, name: str, scaled: bool = True) -> float | None:
        column, factor = _scaled(self.block, name)
        cell = self.text(name)
        if cell is None:
            return None
        block = self.block
        if block.decimal_comma is None:
            block.decimal_comma = any(DECIMAL_COMMA.fullmatch(c.strip()) and not EN_GROUPED.fullmatch(c.strip())
                                      for row in block.rows for c in row)
        if block.decimal_comma and ("," in cell or GROUPING_DOT.fullmatch(cell)):
            raise InputError(self.path, f"{cell!r} in column {name} of {block.report} may be read two ways: the table "
                             "has numbers with a decimal comma (a localized copy?); the row is left out",
                             block.lines[self.index])
        try:
            # the console format prints thousands separators: "1,831,281"
            number = (float(cell) if "," not in cell else _grouped(cell)) * (factor if scaled else 1.0)
        except ValueError:
            raise InputError(self.path, f"{cell!r} is not a number (column {name} of {self.block.report})",
                             self.block.lines[self.index]) from None
        if not math.isfinite(number):
            raise InputError(self.path, f"column {name} of {block.report}: {cell!r} {cells.NOT_FINITE}: the row "
                             "is left out", block.lines[self.index])
        return number

    def whole(self, name: str) -> int | None:
        number = self.value(name)
        if number is None:
            return None
        whole = int(round(number))
        if not cells.INT64_MIN <= whole <= cells.INT64_MAX:
            raise InputError(self.path, f"column {name} of {self.block.report}: {self.text(name)!r} "
                             f"{cells.TOO_LARGE}: the row is left out", self.block.lines[self.index])
        return whole


def _frame(rows: list[dict], columns: dict) -> pl.DataFrame:
    """Rows as dicts (a missing key is null) to a frame: as tuples, which polars takes faster."""
    return base.frame_of_rows([tuple(row.get(name) for name in columns) for row in rows], columns)


def _summary(path: Path, block: Block, columns: dict) -> pl.DataFrame:
    """A summary report's rows, converted a column at a time; a block with a bad or missing cell goes
    through the row-by-row path, which names the first bad row as it always did."""
    try:
        return _summary_by_column(block, columns)
    except _NotWhole:
        return _summary_by_row(path, block, columns)


def _summary_fields(block: Block, columns: dict) -> list[tuple[str, str, object]]:
    """What each column of a summary report's rows is, in the order a row is converted, for both the
    column-wise and the row-by-row path: (column, how, source), how one of count (a whole number),
    value (in ns), percent (unscaled), text, dims, constant (source is the value itself)."""
    projection = block.report == "nvtx_gpu_proj_sum"
    if projection:
        instances, total = "Range Instances", "Total Proj Time"
    elif block.report == "nvtx_kern_sum":
        instances, total = "Kern Inst", "Total Time"
    else:
        instances, total = "Instances", "Total Time"
    prefix = "Proj " if projection else ""
    fields = [("instances", "count", instances), ("total_ns", "value", total),
              ("avg_ns", "value", prefix + "Avg"), ("median_ns", "value", prefix + "Med"),
              ("min_ns", "value", prefix + "Min"), ("max_ns", "value", prefix + "Max"),
              ("stddev_ns", "value", prefix + "StdDev"),
              ("time_pct", "constant", None) if projection else ("time_pct", "percent", "Time")]
    if columns is NVTX_SUMMARY_COLUMNS:
        return fields + [("nvtx_range", "text", "Range"), ("style", "text", "Style"),
                         ("time_basis", "constant", "gpu projection" if projection else "cpu range")]
    return fields + [("report", "constant", block.report), ("nvtx_range", "text", "NVTX Range"),
                     ("grid_dims", "dims", "GridXYZ"), ("block_dims", "dims", "BlockXYZ"),
                     ("kernel_name", "text", "Kernel Name" if block.report == "nvtx_kern_sum" else "Name")]


# Columns a summary row cannot lack, checked once the field named first is converted: the columns, and
# how the error says so.
_SUMMARY_REQUIRED = {"total_ns": (("instances", "total_ns"), "row without instances or total time"),
                     "kernel_name": (("kernel_name",), "row without a kernel name")}


def _summary_by_column(block: Block, columns: dict) -> pl.DataFrame:
    height, out = len(block.rows), {}
    for column, how, source in _summary_fields(block, columns):
        if how == "constant":
            out[column] = [source] * height
        elif how in ("text", "dims"):
            texts = _texts(block, source)
            out[column] = texts if how == "text" else [_dims_text(t) for t in texts]
        else:
            values = _values(block, source, scaled=how != "percent")
            out[column] = [None if v is None else int(v) for v in values] if how == "count" else values
            if how == "count" and any(v is not None and not cells.INT64_MIN <= v <= cells.INT64_MAX
                                      for v in out[column]):
                raise _NotWhole    # beyond 64 bits: the row-by-row path leaves its row out with a warning
        required = _SUMMARY_REQUIRED.get(column)
        if required and any(None in out[c] for c in required[0]):
            raise _NotWhole
    return base.frame_of_columns([out[name] for name in columns], columns)


def _summary_by_row(path: Path, block: Block, columns: dict) -> pl.DataFrame:
    fields = _summary_fields(block, columns)
    rows = []
    for i in range(len(block.rows)):
        row, out = _Row(path, block, i), {}
        try:
            for column, how, source in fields:
                if how == "constant":
                    out[column] = source
                elif how in ("text", "dims"):
                    text = row.text(source)
                    out[column] = text if how == "text" else _dims_text(text)
                else:
                    value = row.whole(source) if how == "count" else row.value(source, scaled=how != "percent")
                    out[column] = value
                required = _SUMMARY_REQUIRED.get(column)
                if required and any(out[c] is None for c in required[0]):
                    raise InputError(path, f"{block.report} {required[1]}", block.lines[i])
        except InputError as exc:
            block.warnings.append(exc)      # this row is left out, the others are read
            continue
        rows.append(out)
    return _frame(rows, columns)


def _api(path: Path, block: Block) -> pl.DataFrame:
    rows = []
    for i in range(len(block.rows)):
        row = _Row(path, block, i)
        try:
            calls, total, name = row.whole("Num Calls"), row.value("Total Time"), row.text("Name")
            if calls is None or total is None or name is None:
                raise InputError(path, "cuda_api_sum row without a name, calls or total time", block.lines[i])
            rows.append({"api_name": name, "calls": calls, "total_ns": total, "avg_ns": row.value("Avg"),
                         "median_ns": row.value("Med"), "min_ns": row.value("Min"), "max_ns": row.value("Max"),
                         "stddev_ns": row.value("StdDev"), "time_pct": row.value("Time", scaled=False)})
        except InputError as exc:
            block.warnings.append(exc)      # this row is left out, the others are read
    return _frame(rows, API_SUMMARY_COLUMNS)


def _memory_ops(path: Path, by_time: list[Block], by_size: list[Block]) -> pl.DataFrame:
    """cuda_gpu_mem_time_sum and cuda_gpu_mem_size_sum joined by operation (either may be missing)."""
    out: dict[str, dict] = {}
    for block in by_time:
        for i in range(len(block.rows)):
            row = _Row(path, block, i)
            try:
                operation = row.text("Operation") or row.text("Name")
                if operation is None:
                    raise InputError(path, f"{block.report} row without an operation", block.lines[i])
                values = dict(operations=row.whole("Count"), total_ns=row.value("Total Time"),
                              avg_ns=row.value("Avg"), median_ns=row.value("Med"), min_ns=row.value("Min"),
                              max_ns=row.value("Max"), stddev_ns=row.value("StdDev"),
                              time_pct=row.value("Time", scaled=False))
                out.setdefault(operation, {"operation": operation}).update(values)
            except InputError as exc:
                block.warnings.append(exc)      # this row is left out, the others are read
    for block in by_size:
        for i in range(len(block.rows)):
            row = _Row(path, block, i)
            try:
                operation = row.text("Operation") or row.text("Name")
                if operation is None:
                    raise InputError(path, f"{block.report} row without an operation", block.lines[i])
                count = row.whole("Count")
                values = dict(total_bytes=row.value("Total"), avg_bytes=row.value("Avg"),
                              median_bytes=row.value("Med"), min_bytes=row.value("Min"), max_bytes=row.value("Max"),
                              stddev_bytes=row.value("StdDev"))
                entry = out.setdefault(operation, {"operation": operation})
                entry.setdefault("operations", count)
                entry.update(values)
            except InputError as exc:
                block.warnings.append(exc)      # this row is left out, the others are read
    return _frame(list(out.values()), MEMORY_OP_COLUMNS)


def _nvtx_ranges(path: Path, block: Block) -> pl.DataFrame:
    rows = []
    projection = block.report == "nvtx_gpu_proj_trace"
    for i in range(len(block.rows)):
        row = _Row(path, block, i)
        try:
            if projection:
                start, duration = row.whole("Orig Start"), row.whole("Orig Duration")
                gpu_start, gpu_duration = row.whole("Projected Start"), row.whole("Projected Duration")
                if gpu_start is None or gpu_duration is None:
                    raise InputError(path, "nvtx_gpu_proj_trace row without a projected start or duration",
                                     block.lines[i])
                end = start + duration if start is not None and duration is not None else None
                child = None
            else:
                start, end, duration = row.whole("Start"), row.whole("End"), row.whole("Duration")
                if start is None or duration is None:
                    raise InputError(path, "nvtx_pushpop_trace row without a start or duration", block.lines[i])
                gpu_start = gpu_duration = None
                child = row.whole("DurChild")
            rows.append({
                "report": block.report, "nvtx_range": row.text("Name"), "style": row.text("Style"),
                "process_id": row.whole("PID"), "thread_id": row.whole("TID"), "range_id": row.whole("RangeId"),
                "parent_id": row.whole("ParentId"), "level": row.whole("Lvl"), "child_count": row.whole("NumChild"),
                "range_stack": row.text("RangeStack"), "start_ns": start, "end_ns": end, "duration_ns": duration,
                "child_duration_ns": child, "gpu_start_ns": gpu_start,
                "gpu_end_ns": gpu_start + gpu_duration if gpu_start is not None else None,
                "gpu_duration_ns": gpu_duration, "gpu_op_count": row.whole("NumGPUOps"),
            })
        except InputError as exc:
            block.warnings.append(exc)      # this row is left out, the others are read
    return _frame(rows, NVTX_RANGE_COLUMNS)


def _dims_text(text: str | None) -> str | None:
    """GridXYZ "1024    1    1" -> "(1024, 1, 1)", the launch-dims spelling of the other tables."""
    if not text:
        return None
    parts = text.split()
    return f"({', '.join(parts)})" if len(parts) == 3 else text


DEVICE = re.compile(r"^(?P<name>.*?)\s*\((?P<id>\d+)\)$")


class _NotWhole(Exception):
    """A cell the column-wise path does not convert; the row-by-row path words the error."""


def _texts(block: Block, name: str) -> list[str | None]:
    """_Row.text(name) of every row."""
    column, _ = _scaled(block, name)
    if column is None:
        return [None] * len(block.rows)
    return [None if (cell := row[column].strip()) in NULL_SET else cell for row in block.rows]


def _values(block: Block, name: str, scaled: bool = True) -> list[float | None]:
    """_Row.value(name, scaled) of every row; _NotWhole where a cell is not a number."""
    _, factor = _scaled(block, name)
    factor = factor if scaled else 1.0
    try:
        values = [None if cell is None else (float(cell) if "," not in cell else _grouped(cell)) * factor
                  for cell in _texts(block, name)]
    except ValueError:
        raise _NotWhole from None
    if not math.isfinite(sum(v for v in values if v is not None)):
        raise _NotWhole        # inf or nan in the column (or a sum past the largest float): row by row
    return values


def _wholes(block: Block, name: str) -> list[int | None]:
    """_Row.whole(name) of every row; _NotWhole where a cell is not a number. A cell of up to 15
    digits in a column of factor 1 is its own int (below 2**53 the float round trip changes nothing)."""
    column, factor = _scaled(block, name)
    if column is None:
        return [None] * len(block.rows)
    try:
        if factor == 1:
            wholes = [int(cell) if cell.isdigit() and len(cell) < 16 else None if cell in NULL_SET else
                      int(round((float(cell) if "," not in cell else _grouped(cell)) * factor))
                      for cell in [row[column].strip() for row in block.rows]]
        else:
            wholes = [None if cell in NULL_SET else int(round((float(cell) if "," not in cell else _grouped(cell)) * factor))
                      for cell in [row[column].strip() for row in block.rows]]
    except (ValueError, OverflowError):      # OverflowError: inf
        raise _NotWhole from None
    known = [w for w in wholes if w is not None]
    if known and (max(known) > cells.INT64_MAX or min(known) < cells.INT64_MIN):
        raise _NotWhole        # beyond 64 bits: the row-by-row path leaves its row out with a warning
    return wholes


def _trace(path: Path, block: Block) -> pl.DataFrame:
    """The cuda_gpu_trace rows, converted a column at a time (one Python call per cell made a
    100,000-launch trace take seconds); a block with a bad cell goes through the row-by-row path,
    which names the first bad row and column as it always did."""
    try:
        return _trace_by_column(block)
    except _NotWhole:
        return _trace_by_row(path, block)


def _trace_by_column(block: Block) -> pl.DataFrame:
    starts, durations = _wholes(block, "Start"), _wholes(block, "Duration")
    if None in starts or None in durations or (durations and min(durations) < 0):
        raise _NotWhole        # a negative duration too: the row-by-row path leaves its row out
    names = [name or "" for name in _texts(block, "Name")]
    grid = [_wholes(block, column) for column in ("GrdX", "GrdY", "GrdZ")]
    devices: dict[str | None, tuple[int | None, str | None]] = {}
    texts = _texts(block, "Device")
    for text in texts:
        if text not in devices:
            device = DEVICE.match(text or "")
            devices[text] = (int(device["id"]), device["name"]) if device else (None, text)
    device_ids, device_names = zip(*(devices[text] for text in texts)) if block.rows else ((), ())
    shared = [None if static is None and dynamic is None else (static or 0) + (dynamic or 0)
              for static, dynamic in zip(_wholes(block, "StcSMem"), _wholes(block, "DymSMem"))]
    height = len(block.rows)
    nothing = [None] * height
    columns = {
        "activity": ["kernel" if x is not None else ("memset" if "memset" in name.lower() else "memcpy")
                     for x, name in zip(grid[0], names)],
        "device_id": list(device_ids), "device_name": list(device_names), "context_id": _wholes(block, "Ctx"),
        "stream_id": _wholes(block, "Strm"), "process_id": _wholes(block, "Pid"),
        "correlation_id": _wholes(block, "CorrId"), "start_ns": starts, "duration_ns": durations,
        "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2], "block_x": _wholes(block, "BlkX"),
        "block_y": _wholes(block, "BlkY"), "block_z": _wholes(block, "BlkZ"),
        "registers_per_thread": _wholes(block, "Reg/Trd"), "shared_mem_bytes": shared,
        "bytes": _wholes(block, "Bytes"), "kernel_name": names,
    }
    return base.frame_of_columns([columns.get(name, nothing) for name in TIMELINE_COLUMNS], TIMELINE_COLUMNS)


def _trace_by_row(path: Path, block: Block) -> pl.DataFrame:
    rows = []
    for i in range(len(block.rows)):
        row = _Row(path, block, i)
        try:
            start, duration = row.whole("Start"), row.whole("Duration")
            if start is None or duration is None:
                raise InputError(path, "cuda_gpu_trace row without Start or Duration", block.lines[i])
            if duration < 0:
                raise InputError(path, f"column Duration of cuda_gpu_trace: {row.text('Duration')!r} {cells.NEGATIVE}: "
                                 "the row is left out", block.lines[i])
            name = row.text("Name") or ""
            grid = (row.whole("GrdX"), row.whole("GrdY"), row.whole("GrdZ"))
            activity = "kernel" if grid[0] is not None else ("memset" if "memset" in name.lower() else "memcpy")
            device = DEVICE.match(row.text("Device") or "")
            shared = [s for s in (row.whole("StcSMem"), row.whole("DymSMem")) if s is not None]
            rows.append({
                "activity": activity, "device_id": int(device["id"]) if device else None,
                "device_name": device["name"] if device else row.text("Device"), "context_id": row.whole("Ctx"),
                "stream_id": row.whole("Strm"), "process_id": row.whole("Pid"), "correlation_id": row.whole("CorrId"),
                "start_ns": start, "duration_ns": duration, "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
                "block_x": row.whole("BlkX"), "block_y": row.whole("BlkY"), "block_z": row.whole("BlkZ"),
                "registers_per_thread": row.whole("Reg/Trd"), "shared_mem_bytes": sum(shared) if shared else None,
                "bytes": row.whole("Bytes"), "kernel_name": name, "kernel_short_name": None, "kernel_mangled": None,
                "framework_op": None, "op_shapes": None, "nvtx_path": None, "nvtx_range": None,
                "framework_op_id": None, "op_dtypes": None, "op_args": None,   # not in the stats reports
            })
        except InputError as exc:
            block.warnings.append(exc)      # this row is left out, the others are read
    return pl.DataFrame(rows, schema=TIMELINE_COLUMNS)
