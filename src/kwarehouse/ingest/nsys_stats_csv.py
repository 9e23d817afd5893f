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
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import base
from kwarehouse.ingest.base import NVTX_SUMMARY_COLUMNS, SUMMARY_COLUMNS, TIMELINE_COLUMNS, ReadResult

TIME_UNITS = {"ns": 1, "nsec": 1, "us": 1e3, "usec": 1e3, "ms": 1e6, "msec": 1e6, "s": 1e9, "sec": 1e9}
SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
UNIT_SUFFIX = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)$")
REPORT_LINE = re.compile(r"^Processing \[.*\] with \[.*?(?P<report>[\w]+)\.py\]")
# Which report a header is, by its column names with units removed (first match wins).
SIGNATURES = {
    "nvtx_kern_sum": {"NVTX Range", "Kern Inst", "Total Time", "Kernel Name"},
    "cuda_gpu_trace": {"Start", "Duration", "GrdX", "Name"},
    "nvtx_sum": {"Total Time", "Instances", "Range"},
    "cuda_gpu_kern_sum": {"Total Time", "Instances", "Name"},
}
TRUNCATED_ROW = ("file ends in the middle of a line (still being copied, or truncated?); wait for the copy to "
                 "finish or re-run nsys stats")
OLD_NAMES = {"Time(%)": "Time", "Average": "Avg", "Minimum": "Min", "Maximum": "Max", "CorrID": "CorrId",
             "Median": "Med"}


@dataclass
class _Block:
    report: str
    header: list[str]
    rows: list[list[str]]
    lines: list[int]          # file line of each row


def _column(name: str) -> tuple[str, str | None]:
    """"Avg (ns)" -> ("Avg", "ns"); "Time (%)" -> ("Time", "%"); "Average" -> ("Avg", None)."""
    name = name.strip()
    if name in OLD_NAMES:
        return OLD_NAMES[name], None
    match = UNIT_SUFFIX.match(name)
    if match:
        return OLD_NAMES.get(match["name"], match["name"]), match["unit"]
    return name, None


def _report_of(header: list[str]) -> str | None:
    names = {_column(c)[0] for c in header}
    for report, needed in SIGNATURES.items():
        if needed <= names:
            return report
    return None


def _parse_line(line: str) -> list[str] | None:
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


class NsysStatsCsv:
    name: ClassVar[str] = "nsys-stats-csv"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.decode("utf-8", errors="replace")
        for line in text.splitlines()[:200]:
            fields = _parse_line(line)
            if fields and len(fields) > 2 and _report_of(fields):
                return True
        return False

    def read(self, path: Path) -> ReadResult:
        blocks = self._blocks(path)
        if not blocks:
            raise InputError(path, "no nsys stats report table found; expected nsys stats --format csv output "
                             "of cuda_gpu_kern_sum, cuda_gpu_trace, nvtx_kern_sum or nvtx_sum")
        summaries, timelines, nvtx_sums = [], [], []
        for block in blocks:
            if block.report == "cuda_gpu_trace":
                timelines.append(_trace(path, block))
            elif block.report == "nvtx_sum":
                nvtx_sums.append(_summary(path, block, NVTX_SUMMARY_COLUMNS))
            else:
                summaries.append(_summary(path, block, SUMMARY_COLUMNS))
        timeline = pl.concat(timelines) if timelines else None
        gpu = None
        if timeline is not None and timeline["device_name"].drop_nulls().len():
            gpu = timeline["device_name"].drop_nulls().mode().sort()[0]
        return ReadResult(path=path, format=self.name, page="timeline" if timelines else "summary", tool="nsys",
                          timeline=timeline, summaries=pl.concat(summaries) if summaries else None,
                          nvtx_summaries=pl.concat(nvtx_sums) if nvtx_sums else None, gpu_name=gpu)

    def _blocks(self, path: Path) -> list[_Block]:
        base.refuse_oversized(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 text; expected nsys stats --format csv output") from None
        blocks: list[_Block] = []
        announced: str | None = None
        current: _Block | None = None
        lines = text.splitlines()
        # nsys ends every line it writes, the last one too: a file whose last line has no newline was
        # cut short (a kernel name cut in two would otherwise be stored as a name, and the reports
        # after the cut would be silently missing).
        if text and not text.endswith(("\n", "\r")):
            raise InputError(path, TRUNCATED_ROW, len(lines))
        del text
        for number, line in enumerate(lines, 1):
            found = REPORT_LINE.match(line)
            if found:
                announced, current = found["report"], None
                continue
            if not line.strip() or line.startswith(("SKIPPED:", "NOTICE:", "Generating ", "WARNING:", " **", "**")):
                current = None
                continue
            fields = _parse_line(line)
            if current is None:
                report = _report_of(fields) if fields else None
                if report is None:
                    continue   # other chatter between blocks
                if announced in SIGNATURES or announced in ("gpukernsum", "nvtxsum", "gputrace"):
                    report = {"gpukernsum": "cuda_gpu_kern_sum", "nvtxsum": "nvtx_sum",
                              "gputrace": "cuda_gpu_trace"}.get(announced, announced)
                current = _Block(report, fields, [], [])
                blocks.append(current)
                continue
            if fields is None or len(fields) != len(current.header):
                raise InputError(path, f"row has {len(fields or [])} fields, the {current.report} header has "
                                 f"{len(current.header)} (truncated or edited?); re-run nsys stats", number)
            current.rows.append(fields)
            current.lines.append(number)
        return blocks


def _scaled(header: list[str], name: str) -> tuple[int | None, float]:
    """Index of a column by base name, and the factor that turns its values into ns (or bytes)."""
    for index, column in enumerate(header):
        base, unit = _column(column)
        if base == name:
            return index, TIME_UNITS.get(unit or "ns", SIZE_UNITS.get(unit or "", 1.0))
    return None, 1.0


@dataclass
class _Row:
    """One row of a report block, read by column base name with units applied."""
    path: Path
    block: _Block
    index: int

    def text(self, name: str) -> str | None:
        column, _ = _scaled(self.block.header, name)
        cell = self.block.rows[self.index][column].strip() if column is not None else ""
        return cell or None

    def value(self, name: str, scaled: bool = True) -> float | None:
        column, factor = _scaled(self.block.header, name)
        cell = self.text(name)
        if cell is None:
            return None
        cell = cell.replace(",", "")
        if cell in ("-", "N/A", "n/a"):
            return None
        try:
            return float(cell) * (factor if scaled else 1.0)
        except ValueError:
            raise InputError(self.path, f"{cell!r} is not a number", self.block.lines[self.index]) from None

    def whole(self, name: str) -> int | None:
        number = self.value(name)
        return None if number is None else int(round(number))


def _summary(path: Path, block: _Block, columns: dict) -> pl.DataFrame:
    rows = []
    for i in range(len(block.rows)):
        row = _Row(path, block, i)
        instances = row.value("Kern Inst") if block.report == "nvtx_kern_sum" else row.value("Instances")
        total = row.value("Total Time")
        if instances is None or total is None:
            raise InputError(path, f"{block.report} row without instances or total time", block.lines[i])
        out = {"instances": int(instances), "total_ns": total, "avg_ns": row.value("Avg"),
               "median_ns": row.value("Med"), "min_ns": row.value("Min"), "max_ns": row.value("Max"),
               "stddev_ns": row.value("StdDev"), "time_pct": row.value("Time", scaled=False)}
        if columns is NVTX_SUMMARY_COLUMNS:
            out.update(nvtx_range=row.text("Range"), style=row.text("Style"))
        else:
            out.update(report=block.report, nvtx_range=row.text("NVTX Range"),
                       grid_dims=_dims_text(row.text("GridXYZ")), block_dims=_dims_text(row.text("BlockXYZ")),
                       kernel_name=row.text("Kernel Name") if block.report == "nvtx_kern_sum" else row.text("Name"))
        rows.append(out)
    return pl.DataFrame(rows, schema=columns)


def _dims_text(text: str | None) -> str | None:
    """GridXYZ "1024    1    1" -> "(1024, 1, 1)", the launch-dims spelling of the other tables."""
    if not text:
        return None
    parts = text.split()
    return f"({', '.join(parts)})" if len(parts) == 3 else text


DEVICE = re.compile(r"^(?P<name>.*?)\s*\((?P<id>\d+)\)$")


def _trace(path: Path, block: _Block) -> pl.DataFrame:
    rows = []
    for i in range(len(block.rows)):
        row = _Row(path, block, i)
        start, duration = row.whole("Start"), row.whole("Duration")
        if start is None or duration is None:
            raise InputError(path, "cuda_gpu_trace row without Start or Duration", block.lines[i])
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
        })
    return pl.DataFrame(rows, schema=TIMELINE_COLUMNS)
