"""What the two ncu CSV pages share: finding the table in the file, parsing it, the launch columns.

Real files are messier than `ncu --csv` documents: users redirect ncu's stdout, so program output and
`==PROF==`/`==WARNING==` lines come before (and between) CSV lines; pages from old versions have other
columns. Everything here is defensive and every failure names the file and line.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import base
from kwarehouse.ingest.base import LAUNCH_COLUMNS

# Every ncu CSV page starts with these two quoted columns.
HEADER_START = b'"ID","Process ID"'
# ncu's own log lines, which land in the file when stdout was redirected.
_TOOL_LINE = re.compile(rb"^==[A-Z]+==")

# Export column -> launch column. Columns not listed (and not NVTX) are metrics on the raw page.
LAUNCH_FIELDS = {
    "ID": "launch_id", "Process ID": "process_id", "Process Name": "process_name",
    "Host Name": "host_name", "Kernel Name": "kernel_name", "Context": "context_id",
    "Stream": "stream_id", "Device": "device_id", "CC": "compute_capability",
    "Block Size": "block_dims", "Grid Size": "grid_dims",
}
# No ncu CSV row comes near this; a longer line is a corrupt or foreign file (and would cost memory).
MAX_LINE_BYTES = 32 << 20
TRUNCATED_ROW = ("file ends in the middle of a row (truncated?); re-export it with ncu --csv, or, if it is "
                 "still being copied, wait for the copy to finish")
# "27.595.520": a number printed with a locale's dot grouping. ncu --csv prints 27,595,520 (C locale);
# reading the dots as decimal points would silently be wrong by orders of magnitude.
LOCALE_NUMBER = re.compile(r"^[+-]?\d{1,3}(\.\d{3}){2,}(,\d+)?$")

# Columns that describe the launch but that kwh does not keep (old versions' wall-clock "Kernel Time").
IGNORED_FIELDS = {"Kernel Time"}


def is_nvtx_column(name: str) -> str | None:
    """Which NVTX launch column an export header is, if any (ncu --nvtx adds two)."""
    if "Push/Pop" in name:
        return "nvtx_push_pop"
    if "Start/Stop" in name:
        return "nvtx_start_end"
    return None


def find_header(data: bytes) -> int | None:
    """Byte offset of the ncu CSV header line, or None. Anything before it is ignored."""
    if data.startswith(HEADER_START):
        return 0
    at = data.find(b"\n" + HEADER_START)
    return None if at < 0 else at + 1


def header_columns(head: bytes) -> list[str] | None:
    """The header's column names from the first bytes of a file, or None when it has no ncu header."""
    start = find_header(head)
    if start is None:
        return None
    line = head[start:].split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
    return next(csv.reader([line]))


@dataclass
class NcuTable:
    """The CSV table of a page: all cells as text, and the file line of each row (1-based)."""

    frame: pl.DataFrame
    row_lines: list[int] | range
    header_line: int


def read_table(path: Path, data: bytes | None = None) -> NcuTable:
    """Parse the CSV table of an ncu export, every cell as text (None where a row was short).
    data: the file's bytes, where the caller read them already (ingest hashes them first); only a
    file no longer than MAX_LINE_BYTES comes so (a longer one is scanned before it is read)."""
    if data is None or len(data) > MAX_LINE_BYTES:
        data = _read_bounded(path)
    if not data or data.isspace():
        raise InputError(path, "file is empty; expected an ncu CSV export (ncu --csv --page raw|details)")
    data = data.removeprefix(b"\xef\xbb\xbf")
    start = find_header(data)
    if start is None:
        raise InputError(path, 'no ncu CSV header ("ID","Process ID",...) found; '
                         "was it exported with ncu --import REPORT --csv --page raw|details?")
    header_line = data.count(b"\n", 0, start) + 1
    table = data[start:]
    del data
    if _clean(table):
        # The usual file: rows only, every line ended. The table is parsed as it is and a row's file
        # line is its index past the header (no list of lines is built, and the lines are counted
        # only to word a parse error).
        frame = _parse(path, table, None, header_line)
        return NcuTable(frame, range(header_line + 1, header_line + 1 + frame.height), header_line)
    lines = table.split(b"\n")
    line_numbers = list(range(header_line, header_line + len(lines)))
    kept = [i for i, line in enumerate(lines) if line.strip() and not _TOOL_LINE.match(line)]
    # ncu ends every line it writes, the last one too (every real export seen does): a last row
    # without its newline is a file cut short - still being copied, or truncated. No ncu cell holds
    # a newline, so a line is a row.
    # A last row without its newline that still has every field, closed, is a complete file someone
    # saved without the final newline (a cut between fields leaves fewer fields).
    last = lines[kept[-1]].rstrip(b"\r")
    unterminated = kept[-1] == len(lines) - 1 and not (
        len(kept) > 1 and last.endswith(b'"') and _fields(last) == _fields(lines[kept[0]]))
    if unterminated or not (last.endswith(b'"') or last.endswith(b",")):
        raise InputError(path, TRUNCATED_ROW, line=line_numbers[kept[-1]])
    if len(kept) == len(lines) - 1:
        body = table            # nothing to drop but the empty string after the last newline
    else:
        # ncu's log lines and blank lines between rows: drop them, keep true line numbers.
        body = b"\n".join(lines[i] for i in kept)
    line_numbers = [line_numbers[i] for i in kept]
    del lines, table
    return NcuTable(_parse(path, body, line_numbers, header_line), line_numbers[1:], header_line)


def _read_bounded(path: Path) -> bytes:
    """The file's bytes, refusing first a file too large to read or holding a giant line."""
    try:
        size = path.stat().st_size
        base.refuse_oversized(path, size)
        # One bounded pass first: a giant line (garbage after a valid header) is refused before the
        # file is read into memory. A file no longer than the limit cannot hold such a line.
        if size > MAX_LINE_BYTES:
            scan = base.scan_lines(path, stop_above=MAX_LINE_BYTES)
            if scan.longest > MAX_LINE_BYTES:
                raise InputError(path, f"a {scan.longest >> 20} MB line; no ncu export has rows like it "
                                 "(corrupt file, or not an ncu CSV)", line=scan.longest_line)
        return path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc.strerror}; check it exists and is readable") from exc


# A line of ncu's log ("==PROF==") or of nothing but blanks: the slow path drops such lines. (One
# regex pass over the bytes; cheaper than a substring test per pattern.)
_NOT_A_ROW = re.compile(rb"\n(?:==|[ \t\r\f\v]*\n)")


def _clean(table: bytes) -> bool:
    """Whether the table (header onwards) is rows only: no ncu log line, no blank line, and its last
    row ended and closed as a complete ncu row ends; anything else takes the line-by-line path,
    which finds and words what is wrong."""
    if not table.endswith(b"\n") or _NOT_A_ROW.search(table):
        return False
    end = len(table) - 1
    last = table[table.rfind(b"\n", 0, end) + 1:end].rstrip(b"\r")
    return last.strip() != b"" and (last.endswith(b'"') or last.endswith(b","))


def _parse(path: Path, body: bytes, line_numbers, header_line: int) -> pl.DataFrame:
    """The rows of `body` as text cells; a parse failure names its file line (line_numbers[i] is the
    file line of the body's i-th line; None: the body's lines are the file's from the header on)."""
    try:
        frame = pl.read_csv(io.BytesIO(body), infer_schema=False, raise_if_empty=False)
    except pl.exceptions.PolarsError as exc:
        if line_numbers is None:
            line_numbers = range(header_line, header_line + body.count(b"\n"))
        bad = _locate_bad_row(body)
        if bad and bad[0] >= len(line_numbers) - 1 and "end of data" in bad[1]:
            raise InputError(path, TRUNCATED_ROW, line=line_numbers[-1]) from exc
        line = line_numbers[min(bad[0], len(line_numbers) - 1)] if bad else None
        reason = bad[1] if bad else str(exc).splitlines()[0]
        raise InputError(path, f"malformed CSV row: {reason}; the file is not a clean ncu --csv export",
                         line=line) from exc
    if len(set(frame.columns)) != len(frame.columns):
        raise InputError(path, "header repeats a column name; not an ncu CSV export", line=header_line)
    return frame


def _fields(line: bytes) -> int:
    """How many CSV fields one line holds."""
    return len(next(csv.reader([line.decode("utf-8", "replace")]), []))


def _locate_bad_row(body: bytes) -> tuple[int, str] | None:
    """Slow path after a parse failure: find the first row whose field count differs from the header."""
    text = body.decode("utf-8", "replace")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        width = len(next(reader))
        for index, row in enumerate(reader, start=1):
            if len(row) > width:
                return reader.line_num - 1, f"{len(row)} fields where the header has {width}"
    except csv.Error as exc:
        return reader.line_num - 1, str(exc)
    return None


def require_columns(path: Path, table: NcuTable, needed: list[str], hint: str) -> None:
    missing = [c for c in needed if c not in table.frame.columns]
    if missing:
        names = ", ".join(f'"{c}"' for c in missing)
        raise InputError(path, f"no {names} column; {hint}", line=table.header_line)


def reject_short_rows(path: Path, table: NcuTable, frame: pl.DataFrame, column: str, row_index: str) -> None:
    """A row that ends before `column` was cut short: name its line."""
    short = frame.filter(pl.col(column).is_null())
    if short.height:
        first = short[row_index][0]
        raise InputError(path, f'row ends before the "{column}" column (truncated or hand-edited?); '
                         "re-export it with ncu --csv", line=table.row_lines[first])


def launch_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """The launch columns of a page, typed; columns a version lacks come back as nulls."""
    exprs = []
    for source in frame.columns:
        target = LAUNCH_FIELDS.get(source) or is_nvtx_column(source)
        if target:
            exprs.append(_typed(pl.col(source), LAUNCH_COLUMNS[target]).alias(target))
    out = frame.select(exprs)
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in LAUNCH_COLUMNS.items() if c not in out.columns]
    return out.with_columns(missing).select(list(LAUNCH_COLUMNS))


def _typed(expr: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    if dtype == pl.Int64:
        # ncu prints thousands separators ("1,123") and old versions print "304.00" for integers.
        return expr.str.replace_all(",", "").cast(pl.Float64, strict=False).cast(pl.Int64, strict=False)
    return pl.when(expr.str.strip_chars() != "").then(expr.str.strip_chars())


def is_metric_column(name: str) -> bool:
    return name not in LAUNCH_FIELDS and name not in IGNORED_FIELDS and is_nvtx_column(name) is None


def is_mangled(names: pl.Series) -> bool:
    """Itanium-mangled kernel names start with _Z (ncu --print-kernel-base mangled)."""
    names = names.drop_nulls()
    return names.len() > 0 and bool(names.str.starts_with("_Z").any())


def locale_numbers(cells: pl.Series) -> pl.Series:
    """The cells printed with a locale's digit grouping ("27.595.520"), in order."""
    cells = cells.drop_nulls()
    return cells.filter(cells.str.contains(LOCALE_NUMBER.pattern))


def reject_locale_numbers(path: Path, cells: pl.Series) -> None:
    """Refuse values printed with a locale's digit grouping ("27.595.520"), naming the first one's line."""
    found = locale_numbers(cells)
    if found.len():
        cell = found[0]
        data = path.read_bytes()
        at = data.find(f'"{cell}"'.encode())
        line = data.count(b"\n", 0, at) + 1 if at >= 0 else None
        raise InputError(path, f"numbers are locale-formatted ({cell!r}); re-export with LC_ALL=C so ncu "
                         "prints 27,595,520", line=line)


@functools.cache
def base_unit_errata() -> dict[tuple[str, str], tuple[str, float]]:
    """(metric, unit ncu's base units print) -> (unit ncu's default page prints, factor): ncu_base_unit_errata.csv."""
    lines = [line for line in resources.files("kwarehouse.ingest").joinpath("ncu_base_unit_errata.csv")
             .read_text().splitlines() if not line.startswith("#")]
    return {(row["metric"], row["base_unit"]): (row["printed_unit"], float(row["factor"]))
            for row in csv.DictReader(lines)}


def undo_base_unit_errata(metrics: pl.DataFrame) -> pl.DataFrame:
    """Long metric rows (metric, unit, value_text) of a page in base units, with the metrics ncu's base
    units multiply by a denominator's prefix given back in the unit its default page prints."""
    errata = base_unit_errata()
    unit, text = pl.col("unit"), pl.col("value_text")
    for (metric, base_unit), (printed, factor) in errata.items():
        this = (pl.col("metric") == metric) & (unit == base_unit)
        number = text.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)
        text = pl.when(this & number.is_not_null()).then((number / factor).cast(pl.String)).otherwise(text)
        unit = pl.when(this & number.is_not_null()).then(pl.lit(printed)).otherwise(unit)
    return metrics.with_columns(text.alias("value_text"), unit.alias("unit"))
