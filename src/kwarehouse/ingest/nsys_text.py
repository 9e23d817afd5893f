"""Nsight Systems stats reports as console text: what `nsys profile --stats=true` prints after the
program's own output, and `nsys stats` with its default --format column (one or several reports).

    [6/8] Executing 'cuda_gpu_kern_sum' stats report          <- or: Processing [db] with [.../R.py]...
                                                                   and " ** Title (R):"
     Time (%)  Total Time (ns)  Instances  Avg (ns)  ...  Name   <- header, names centred in their column
     --------  ---------------  ---------  --------  ...  ----   <- one run of dashes per column
        100.0        1,831,281      1,010   1,813.1  ...  vectorAdd(const float *, ...)
                                                               <- a blank line ends the table
    SKIPPED: /tmp/r.sqlite does not contain CUDA kernel data.   <- a report with nothing to show

`nsys stats --format table` draws the same tables in boxes ("+----+----+" borders, "| cell |" rows):
cells are cut at the border's "+" marks.

Columns are cut at the dash runs (the last column runs to the end of the line), numbers lose their
thousands separators, "None" is a missing value, and each table becomes the same block the CSV reader
makes (nsys_stats_csv.Block), so both formats give the same rows. Releases before 2022 printed titles such
as "CUDA Kernel Statistics (nanoseconds)" over unit-less headers ("Time(%)", "Average", "Minimum"); the
title gives the report and the unit.

Long names: nsys 2024+ cuts a name in a column table to 100 characters and ends it with "…" (U+2026);
other tools' copies end with "...". A cut kernel name is completed from the full names the same capture
holds (a CSV block, a cuda_gpu_trace or nvtx_kern_sum table that printed it whole) when exactly one full
name starts with the cut text; otherwise it is kept as printed, "…" included, so a cut name never
passes for a whole one and two kernels cut to the same text stay two rows. Releases before 2022 cut
names at the column width without a mark: those cannot be told from whole names. The full names are
kept sorted, so the names starting with a cut text are found by bisection (a capture with 64,000 cut
names took 20 minutes when each was compared with every full name).

No line of nsys's tables comes near MAX_LINE_BYTES (the limit kwh's text readers share, README:
"a 100 MB field"): a file holding a longer line is refused after one pass over it a chunk at a time,
before it is read into memory (a 100 MB kernel name otherwise cost 2 GB to store).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from pathlib import Path
from typing import ClassVar

from kwarehouse.errors import InputError
from kwarehouse.ingest import base, captured_text, ncu_csv, nsys_stats_csv
from kwarehouse.ingest.base import ReadResult
from kwarehouse.ingest.nsys_stats_csv import Block, announced_report, report_of

DASHES = re.compile(r"^ *-+( +-+)+ *$")
BORDER = re.compile(r"^\+(-+\+)+\s*$")          # --format table: +----------+------+
# Titles of the releases before 2022 (no report name on the line), and the unit they give.
OLD_TITLE = re.compile(r"^(?P<title>[A-Za-z ]+?) \((?P<unit>nanoseconds|KiB)\)\s*$")
OLD_TITLES = {"CUDA Kernel Statistics": "cuda_gpu_kern_sum", "CUDA API Statistics": "cuda_api_sum",
              "NVTX Push-Pop Range Statistics": "nvtx_sum", "Operating System Runtime API Statistics": "osrt_sum"}
OLD_MEMORY_TITLE = "CUDA Memory Operation Statistics"
# lines nsys writes around the tables: enough (with no table) to know a capture is nsys stats output
CHATTER = re.compile(r"^(Processing \[.*\] with \[.*\.py\]|\[\d+/\d+\] Executing '\w+' stats report|"
                     r"SKIPPED: .* does not contain |Generating CUDA \w+ ?\w* Statistics)", re.MULTILINE)
ELLIPSES = ("\u2026", "...")
# Lines that begin a line of their own, never the continuation of one a terminal wrapped.
LINE_STARTS = re.compile(r"^(?:\[\d+/\d+\] |Processing \[| ?\*\* |SKIPPED: |Generating |NOTICE: )")
# The longest line (in UTF-8 bytes) kwh reads from a text export: the ncu CSV pages' limit.
MAX_LINE_BYTES = ncu_csv.MAX_LINE_BYTES


class NsysText:
    name: ClassVar[str] = "nsys-text"
    decodes_captures: ClassVar[bool] = True    # reads UTF-16, BOM, CR-only text itself (captured_text)

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.decode("utf-8", errors="replace")
        lines = text.splitlines()
        for i, line in enumerate(lines[1:], 1):
            if DASHES.match(line) and report_of(_cells(lines[i - 1], _spans(line))):
                return True
            if BORDER.match(lines[i - 1]) and report_of(_boxed(line, lines[i - 1])):
                return True
        # no column table: stats output whose reports all were skipped, unless it is CSV
        return bool(CHATTER.search(text)) and not nsys_stats_csv.csv_table_in(text)

    def read(self, path: Path) -> ReadResult:
        captured_text.refuse_giant_line(path, MAX_LINE_BYTES, "nsys console text")
        captured = nsys_stats_csv.read_text(path, "nsys stats or nsys profile --stats=true console output")
        best: tuple[int, ReadResult] | None = None
        first_error: InputError | None = None
        # the text as it is, and unwrapped where a terminal may have wrapped it: the one read best
        for reading in captured_text.readings(captured, LINE_STARTS):
            try:
                blocks = _Parser(path, reading.numbers).blocks(reading.lines)
                _complete_cut_names(blocks)
                result = nsys_stats_csv.result(path, self.name, blocks, reading.lines)
            except InputError as exc:
                first_error = first_error or exc
                continue
            score = _rows_read(result) - len(result.warnings)
            if best is None or score > best[0]:
                best = (score, result)
        if best is None:
            raise first_error
        return best[1]


def _rows_read(result: ReadResult) -> int:
    frames = (result.timeline, result.summaries, result.nvtx_summaries, *result.tables.values())
    return sum(frame.height for frame in frames if frame is not None)


def _boxed(line: str, border: str) -> list[str]:
    """A "| a | b |" row cut at its border's "+" marks."""
    marks = [m.start() for m in re.finditer(r"\+", border.rstrip())]
    return [line[start + 1:end].strip() for start, end in zip(marks, marks[1:])]


def _spans(dashes: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """The line cut at the columns' starts; the last column runs to the end of the line (a name
    longer than nsys's column width is printed whole in old releases)."""
    starts = [start for start, _ in spans]
    return [line[start:end].strip() for start, end in zip(starts, [*starts[1:], None])]


class _Parser:
    def __init__(self, path: Path, numbers):
        self.path = path
        self.numbers = numbers        # the editor's line number of each line

    def blocks(self, lines: list[str]) -> list[Block]:
        self.last = nsys_stats_csv.last_content(lines)
        blocks: list[Block] = []
        announced: str | None = None
        unit: str | None = None
        i = 0
        while i < len(lines):
            line = lines[i]
            if report := announced_report(line):
                announced, unit = report, None
            elif title := OLD_TITLE.match(line):
                unit = title["unit"]
                announced = (_old_memory_report(unit) if title["title"] == OLD_MEMORY_TITLE
                             else OLD_TITLES.get(title["title"], title["title"]))
            elif BORDER.match(line) and i + 2 < len(lines) and lines[i + 1].startswith("|") \
                    and BORDER.match(lines[i + 2]):
                header = _boxed(lines[i + 1], line)
                report = report_of(header)
                if report is not None or announced is not None:
                    block = Block(announced or report or "", header, [], [], default_unit=unit,
                                  announced=announced is not None)
                    i = self._boxed_rows(lines, i + 3, line, block)
                    blocks.append(block)
                    announced, unit = None, None
                    continue
            elif i > 0 and DASHES.match(line) and lines[i - 1].strip():
                spans = _spans(line)
                header = _cells(lines[i - 1], spans)
                report = report_of(header)
                if report is not None or announced is not None:
                    block = Block(announced or report or "", header, [], [], default_unit=unit,
                                  announced=announced is not None)
                    i = self._rows(lines, i + 1, spans, block)
                    blocks.append(block)
                    announced, unit = None, None
                    continue
            i += 1
        return blocks

    def _rows(self, lines: list[str], i: int, spans: list[tuple[int, int]], block: Block) -> int:
        """Read the table's rows from line i to the blank line that ends it; the index after it."""
        while i < len(lines) and lines[i].strip():
            line = lines[i]
            if captured_text.is_tool_message(line):
                i += 1        # nsys's stderr between two rows: not a row, not the table's end
                continue
            if len(line) < spans[-1][0] and len(block.header) > 1:
                self._misfit(block, i)
                i += 1
                continue
            block.rows.append(_cells(line, spans))
            block.lines.append(self.numbers[i])
            i += 1
        if not block.rows and not block.warnings:
            # nsys prints SKIPPED, never an empty table: the capture was cut after the header
            raise InputError(self.path, f"the {block.report or 'report'} table has a header but no rows: file "
                             "cut short (still being copied?); wait for the copy to finish or re-capture it",
                             self.numbers[i - 1])
        return i

    def _misfit(self, block: Block, i: int) -> None:
        """Line i does not fit the block's table: the file was cut there when it is the last line
        with content (raised), else that row's warning."""
        error = InputError(self.path, f"a line that does not fit the {block.report or 'report'} table "
                           "(edited or cut?); re-capture it", self.numbers[i])
        if i >= self.last:
            raise error
        block.warnings.append(error)

    def _boxed_rows(self, lines: list[str], i: int, border: str, block: Block) -> int:
        """Rows of a --format table box from line i to its closing border; the index after it."""
        while i < len(lines) and (lines[i].startswith("|") or captured_text.is_tool_message(lines[i])):
            if not lines[i].startswith("|"):
                i += 1        # nsys's stderr between two rows
                continue
            if len(lines[i].rstrip()) != len(border.rstrip()):
                self._misfit(block, i)
                i += 1
                continue
            block.rows.append(_boxed(lines[i], border))
            block.lines.append(self.numbers[i])
            i += 1
        if i >= len(lines) or not BORDER.match(lines[i]) or not (block.rows or block.warnings):
            raise InputError(self.path, f"the {block.report or 'report'} table ends without its closing border: "
                             "file cut short (still being copied?); wait for the copy to finish or re-capture it",
                             self.numbers[min(i, len(lines) - 1)])
        return i + 1


def _old_memory_report(unit: str) -> str:
    return "cuda_gpu_mem_time_sum" if unit == "nanoseconds" else "cuda_gpu_mem_size_sum"


def _name_column(block: Block) -> int | None:
    wanted = "Kernel Name" if block.report == "nvtx_kern_sum" else "Name"
    for index, column in enumerate(block.header):
        if nsys_stats_csv.column_name(column)[0] == wanted:
            return index
    return None


def _complete_cut_names(blocks: list[Block]) -> None:
    """Replace each cut kernel name by the one full name of the capture it starts, where there is
    exactly one (see the module docstring)."""
    kernel_blocks = [b for b in blocks if b.report in nsys_stats_csv.KERNEL_REPORTS]
    whole: set[str] = set()
    for block in kernel_blocks:
        if (column := _name_column(block)) is not None:
            whole.update(row[column] for row in block.rows if not row[column].endswith(ELLIPSES))
    # sorted, the names a text starts are one run from where the text would be inserted
    full = sorted(whole)
    for block in kernel_blocks:
        if (column := _name_column(block)) is None:
            continue
        for row in block.rows:
            name = row[column]
            mark = next((e for e in ELLIPSES if name.endswith(e)), None)
            if mark is None:
                continue
            prefix = name[: -len(mark)]
            first = bisect_left(full, prefix)
            matches = [f for f in full[first:first + 2] if f.startswith(prefix)]
            if len(matches) == 1:
                row[column] = matches[0]
