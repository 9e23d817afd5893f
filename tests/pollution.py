"""A pollution suite (issue 31, part 3; after Pollock, "a data loading benchmark" of polluted CSV files):
polluted variants derived by code from real exports, and a harness that ingests each one through
kwh's own ingest next to a clean copy of another real export and says what kwh made of it.

The generator (`variants`) takes one real export (`Source`: every file under tests/data and, when
present, the corpus tarballs and public samples under ../shared that kwh ingests cleanly alone) and
makes the variants that make sense for its format: cut mid-line and mid-row, a stderr line between
rows and spliced into a row, a `\\r` progress bar, a header repeated mid-file, mixed line endings, a
BOM, a non-UTF-8 byte in the file name and in a kernel name, localized numbers (1.234,5 and
1 234,5), `n/a` and empty cells, duplicated, reordered and extra columns, an ncu rule message kwh
has never seen, a gzip copy cut short; SQLite exports: truncated, a table or a column dropped, a
NULL in a kernel row, a name that is not UTF-8; JSON traces: cut, keys reordered, duplicated,
added; cells at the edges (issue 32): 1e400, 2^64, a unit no tool prints, a time past 2262, a details
page cut at a row end inside its last launch's last section. Each variant records what its
pollution touched (`Damage`): the launches (ncu), the kernel correlation ids (traces), the text of
the lines, or the whole file.

The harness (`Harness.score`) classifies each variant. Definitions (strict, in this order):

* **crashed**: the ingest raised (a traceback), or a failure line is an internal error ("internal",
  "please report", a traceback) or is not one line naming the polluted file, or the clean neighbour
  in the same command failed, or its stored rows differ from those it stores when ingested alone.
* **refused**: the polluted file failed with one line that names it (`path: ...` or `path:LINE:
  ...`), and nothing from it was stored.
* **lost**: anything else that is not intact: the file was skipped without an error, a row that the
  pollution did not touch is missing or changed, a row appeared that the clean original does not
  have, or touched rows are missing or changed with no warning naming the file.
* **intact**: the file went in, and the stored rows of every table equal those of the clean
  original ingested alone, except rows the pollution touched, which may be missing or changed only
  when a warning names the file (`RunSummary.warnings`, where the readers add it, or a note of its
  run that the clean original's run does not have). Two documented exceptions need no warning: an
  `n/a`/empty cell may come back as a NULL value (or, in the long `metrics` table, as no row), and
  an ncu rule message kwh has never seen is stored with its text (its rule name may then be empty).

Rows are compared whole, every column but the ones that name the file or the moment of ingest
(VOLATILE), as multisets per table. A row is "touched" when its launch_id / correlation_id is one the
pollution touched, when one of its text values appears in a touched line, or when the pollution
touched the whole file (SQLite and ncu-rep cuts, dropped tables, telemetry rows, JSON cuts). The
runs row is touched whenever anything is.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
import traceback
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE / "data"
SHARED = HERE.parent.parent / "shared"          # ../shared beside the repository, when present
if not SHARED.exists():
    SHARED = Path("/work/shared")

# What the ingest may legitimately store differently for the same rows: where the file was read
# from, under which run id, and when.
VOLATILE = frozenset({"run_id", "source_dir", "source_files", "source_sha256", "ingested_at"})
# Files kept beside an export that make its run's metadata (copied with it, never polluted).
SIDECAR_NAMES = ("ncu_version.txt", "ncu.log")
# Folders of tests/data that are not exports to pollute.
NOT_SOURCES = ("bad", "kernel-names")

# Real text the tools write to stderr, copied from real captures: what lands in a console capture
# saved with `> out.txt 2>&1`.
STDERR_LINES = {
    # tests/data/meta-ncu-log-gpt2-h100/ncu.log (ncu 2025.3.1)
    "ncu": "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling "
           "results may be inconsistent.",
    # what nsys printed into the osrt_sum table of the capture of issue 31 (tests/data/nsys-stats-derived-*)
    "nsys": "SKIPPED: report1.sqlite does not contain NV Tools Extension (NVTX) data.",
    # ../shared/corpus/h100-2026-11/*/torchprof.log (torch 2.11)
    "torch": "/opt/torch/.venv/lib/python3.12/site-packages/torch/profiler/profiler.py:224: UserWarning: "
             "Warning: Profiler clears events at the end of each cycle.Only events from the current cycle "
             "will be reported.To keep events across cycles, set acc_events=True.",
}
# nsys's progress bar as a capture keeps it: one line rewritten in place with \r.
PROGRESS_BAR = ("[1/8] [0%                          ] report1.nsys-rep\r"
                "[1/8] [=======32%                  ] report1.nsys-rep\r"
                "[1/8] [========================100%] report1.nsys-rep\n")
# A rule message from a newer ncu than kwh knows: SOLBottleneck's text as issue 31 quotes it from a
# real report (ncu_rules.csv lacked it when this suite was written).
UNSEEN_RULE_TEXT = ("This workload is utilizing greater than 80.0% of the available compute or memory "
                    "performance of the device.")
# The name of the column the extra-column variant adds (an ncu-style metric name, so a raw page's
# reader, which keeps every column as a metric, stores it as one: the harness leaves those rows out).
EXTRA_COLUMN = "pollution__extra_column"
NCU_IDENTITY_COLUMNS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                        "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
                        "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type"}
NUMBER = re.compile(r"^-?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")
NCU_LAUNCH_LINE = re.compile(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+")
NCU_METRIC_ROW = re.compile(r"^    (?!-)\S.*? {2,}(\S+ +)?-?[\d,]+(\.\d+)?\s*$")
NCU_RULE_START = re.compile(r"^    (OPT|WRN|INF|ERR) +(\S.*?)\s*$")

CSV_FORMATS = ("ncu-raw-csv", "ncu-details-csv", "nsys-stats-csv", "nvml-samples", "nvidia-smi-query")
TEXT_FORMATS = ("ncu-text", "nsys-text", "nvidia-smi-dmon", "nvidia-smi-pmon", "dcgmi-dmon")
NCU_FORMATS = ("ncu-raw-csv", "ncu-details-csv", "ncu-text")


@dataclass(frozen=True)
class Source:
    """A real export that kwh ingests cleanly alone, and the metadata files beside it."""
    path: Path
    format: str                   # the reader that claims it (kwh's --format names)
    label: str                    # where it came from, for the score: tests/data/..., corpus/..., public-samples/...
    sidecars: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Damage:
    """What a pollution touched, so the harness knows which stored rows must come out unchanged."""
    launches: frozenset[int] = frozenset()        # ncu launch ids of touched rows
    launches_from: int | None = None              # ncu: this launch and every later one (a cut)
    correlations: frozenset[int] = frozenset()    # timeline rows by correlation id (torch traces)
    lines: tuple[str, ...] = ()                   # original text of touched lines (other text formats)
    whole_file: bool = False                      # any row may differ (with a warning)

    @property
    def any(self) -> bool:
        return bool(self.launches or self.launches_from is not None or self.correlations or self.lines
                    or self.whole_file)


NO_DAMAGE = Damage()


@dataclass
class Variant:
    source: Source
    kind: str                     # the column of the score: "bom", "cut-mid-row", ...
    name: str                     # the polluted file's name (may hold surrogate-escaped bytes)
    content: bytes
    damage: Damage = NO_DAMAGE
    note: str = ""                # what exactly was done, one line
    nulls_ok: bool = False        # touched values may come back NULL without a warning (n/a, empty cells)
    # maps rows of a table to a form where a documented difference vanishes (both sides are mapped)
    allowed: Callable[[str, dict], dict] | None = None
    detail: str = ""              # which one, where a source has several of a kind (the dropped table)

    @property
    def id(self) -> str:
        return f"{self.source.label}::{self.kind}" + (f":{self.detail}" if self.detail else "")


# ---------------------------------------------------------------------------------------- sources

def find_sources(roots: Iterable[Path] | None = None, shared: bool = True, scratch: Path | None = None) -> list[Source]:
    """Every export under tests/data (and, with `shared`, the corpus tarballs extracted into `scratch`
    and the public samples), one per distinct content, with the reader kwh's sniffing picks."""
    from kwarehouse import ingest as readers
    candidates: list[tuple[Path, str]] = []
    for path in sorted((roots and list(roots)) or [DATA]):
        for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
            relative = file.relative_to(DATA) if file.is_relative_to(DATA) else None
            if relative is not None and relative.parts[0] in NOT_SOURCES:
                continue
            candidates.append((file, f"tests/data/{relative}" if relative else str(file)))
    if shared and SHARED.exists():
        if scratch is not None:
            for tarball in sorted((SHARED / "corpus").glob("*/*.tar.xz")):
                target = scratch / "corpus" / tarball.parent.name
                model = tarball.name.removesuffix(".tar.xz")
                if not (target / model).exists():
                    target.mkdir(parents=True, exist_ok=True)
                    with tarfile.open(tarball) as archive:
                        archive.extractall(target, filter="data")
                for file in sorted(p for p in (target / model).rglob("*") if p.is_file()):
                    candidates.append((file, f"corpus/{file.relative_to(scratch / 'corpus')}"))
        for file in sorted((SHARED / "public-samples").glob("*")):
            if file.is_file():
                candidates.append((file, f"public-samples/{file.name}"))
    sources, seen = [], set()
    for file, label in candidates:
        if file.name in SIDECAR_NAMES or (file.name.startswith("manifest") and file.suffix == ".json"):
            continue
        reader = readers.sniff(file)
        if reader is None:
            continue
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        sidecars = tuple(sorted(p for p in file.parent.iterdir() if p.is_file() and (
            p.name in SIDECAR_NAMES or (p.name.startswith("manifest") and p.suffix == ".json"))))
        sources.append(Source(file, reader.name, label, sidecars))
    return sources


# ---------------------------------------------------------------------------------- line helpers

def _lines(content: bytes) -> list[str]:
    """The file's lines with their endings, as text (bytes that are not UTF-8 kept as surrogates)."""
    text = content.decode("utf-8", "surrogateescape")
    return re.split(r"(?<=\n)", text)[:-1] + ([text.rsplit("\n", 1)[-1]] if not text.endswith("\n") else [])


def _join(lines: list[str]) -> bytes:
    return "".join(lines).encode("utf-8", "surrogateescape")


def _body(line: str) -> tuple[str, str]:
    """(the line without its ending, the ending)."""
    stripped = line.rstrip("\r\n")
    return stripped, line[len(stripped):]


def csv_fields(text: str) -> list[str]:
    """A CSV line split into its raw fields (quotes kept), so unchanged fields are written back byte for byte.

    >>> csv_fields('"a,b",1,"x""y",')
    ['"a,b"', '1', '"x""y"', '']
    """
    # split on every comma, then glue back the pieces whose comma was inside quotes (an odd number of
    # quotes before it): the same fields as a character-by-character scan, which took most of the
    # variants' generation time (~8 CPU-s over tests/data, once per pytest session at collection)
    pieces = text.split(",")
    if '"' not in text:
        return pieces
    fields, current, quotes = [], None, 0
    for piece in pieces:
        current = piece if current is None else current + "," + piece
        quotes += piece.count('"')
        if quotes % 2 == 0:
            fields.append(current)
            current = None
    if current is not None:
        fields.append(current)
    return fields


def field_value(raw: str) -> str:
    return raw[1:-1].replace('""', '"') if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw


def raw_field(value: str, quoted: bool) -> str:
    if quoted or any(c in value for c in ',"\n'):
        return '"' + value.replace('"', '""') + '"'
    return value


@dataclass
class CsvBlock:
    header: int                   # index of the header line
    rows: list[int]               # indices of the lines after it (units row included)


def csv_blocks(lines: list[str]) -> list[CsvBlock]:
    """Runs of lines of two or more CSV fields: the first of each run is its header. Program output,
    `==PROF==` and nsys's `Processing [...]` lines (one field) and blank lines separate runs."""
    # a source's variants ask for the blocks of the same lines a dozen times: remembered by content
    key = tuple(lines)
    if key not in _BLOCKS:
        if len(_BLOCKS) >= 8:
            _BLOCKS.pop(next(iter(_BLOCKS)))
        _BLOCKS[key] = _csv_blocks(lines)
    return [CsvBlock(b.header, list(b.rows)) for b in _BLOCKS[key]]


_BLOCKS: dict[tuple[str, ...], list[CsvBlock]] = {}


def _csv_blocks(lines: list[str]) -> list[CsvBlock]:
    blocks: list[CsvBlock] = []
    current: CsvBlock | None = None
    for i, line in enumerate(lines):
        body, _ = _body(line)
        if body.strip() and len(csv_fields(body)) >= 2 and not body.startswith(("==", "Processing [")):
            if current is None:
                current = CsvBlock(i, [])
                blocks.append(current)
            else:
                current.rows.append(i)
        else:
            current = None
    return [b for b in blocks if b.rows]


def _header(lines: list[str], block: CsvBlock) -> list[str]:
    return [field_value(f) for f in csv_fields(_body(lines[block.header])[0])]


def data_lines(fmt: str, lines: list[str]) -> list[int]:
    """Indices of the lines that hold a table row kwh reads, in file order."""
    if fmt in CSV_FORMATS:
        out = []
        for block in csv_blocks(lines):
            header = _header(lines, block)
            rows = block.rows
            if fmt == "ncu-raw-csv" and rows:
                rows = rows[1:]                     # the units row
            if "ID" in header:                     # ncu: rows whose ID is a launch number
                at = header.index("ID")
                rows = [i for i in rows if field_value((csv_fields(_body(lines[i])[0]) + [""] * at)[at]).isdigit()]
            out.extend(rows)
        return out
    if fmt == "ncu-text":
        return [i for i, line in enumerate(lines) if NCU_METRIC_ROW.match(_body(line)[0])]
    # column tables of nsys and the telemetry tools: lines with three or more numbers
    return [i for i, line in enumerate(lines)
            if not line.startswith("#") and len(re.findall(r"(?<![\w.])-?[\d,]*\d(\.\d+)?(?![\w.])", line)) >= 3]


def _middle(indices: list[int]) -> int | None:
    return indices[len(indices) // 2] if indices else None


def ncu_launch_of(fmt: str, lines: list[str], index: int) -> int | None:
    """The ncu launch id a line belongs to: its ID field (CSV pages) or the number of launch lines
    before it (the text prints launches in ID order, from 0)."""
    if fmt == "ncu-text":
        count = sum(1 for line in lines[:index + 1] if NCU_LAUNCH_LINE.match(line))
        return count - 1 if count else None
    for block in csv_blocks(lines):
        if index in block.rows:
            header = _header(lines, block)
            if "ID" not in header:
                return None
            fields = csv_fields(_body(lines[index])[0])
            at = header.index("ID")
            value = field_value(fields[at]) if at < len(fields) else ""
            return int(value) if value.isdigit() else None
    return None


def line_damage(source: Source, lines: list[str], index: int) -> Damage:
    """What polluting one line touches."""
    if source.format in NCU_FORMATS:
        launch = ncu_launch_of(source.format, lines, index)
        return Damage(launches=frozenset({launch})) if launch is not None else Damage(whole_file=True)
    if source.format in ("nsys-stats-csv", "nsys-text"):
        return Damage(lines=(_body(lines[index])[0],))
    return Damage(whole_file=True)   # telemetry samples: rows carry no text to attribute them by


def cut_damage(source: Source, lines: list[str], index: int) -> Damage:
    """What cutting the file inside line `index` touches: that line's launch and every later one (ncu),
    else the whole file."""
    if source.format in NCU_FORMATS:
        launch = ncu_launch_of(source.format, lines, index)
        if launch is not None:
            return Damage(launches_from=launch)
    return Damage(whole_file=True)


def _numbers_in(text: str, fmt: str) -> list[tuple[int, int]]:
    """Spans of the numbers of a line: whole CSV fields, or whitespace-separated tokens."""
    spans = []
    if fmt in CSV_FORMATS:
        position = 0
        for raw in csv_fields(text):
            value = field_value(raw).strip()
            if NUMBER.match(value):
                start = position + raw.index(value)
                spans.append((start, start + len(value)))
            position += len(raw) + 1
    else:
        for match in re.finditer(r"\S+", text):
            if NUMBER.match(match.group()):
                spans.append(match.span())
    return spans


def localize(number: str, thousands: str) -> str:
    """A number as a German (thousands='.') or French (thousands=' ') locale prints it.

    >>> localize("1,234.5", "."), localize("1234.5", " "), localize("2.60", ".")
    ('1.234,5', '1 234,5', '2,60')
    """
    negative = number.startswith("-")
    whole, _, fraction = number.lstrip("-").replace(",", "").partition(".")
    groups = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    groups.insert(0, whole)
    return ("-" if negative else "") + thousands.join(groups) + ("," + fraction if fraction else "")


def _rewrite_numbers(source: Source, lines: list[str], index: int, replace: Callable[[str], str],
                     protect: set[str] = frozenset()) -> str | None:
    """Line `index` with each number (not in a `protect`ed CSV column) replaced; None when it has none."""
    body, end = _body(lines[index])
    if source.format in CSV_FORMATS:
        block = next(b for b in csv_blocks(lines) if index in b.rows)
        header = _header(lines, block)
        fields = csv_fields(body)
        changed = False
        for i, raw in enumerate(fields):
            value = field_value(raw)
            if i < len(header) and header[i] in protect or not NUMBER.match(value.strip()):
                continue
            fields[i] = raw_field(replace(value.strip()), raw.startswith('"'))
            changed = True
        return ",".join(fields) + end if changed else None
    spans = _numbers_in(body, source.format)
    if source.format == "ncu-text":
        spans = spans[-1:]                          # the metric value (the name may hold digits)
    if not spans:
        return None
    for start, stop in reversed(spans):
        new = replace(body[start:stop])
        pad = max(0, (stop - start) - len(new))
        body = body[:start] + " " * pad + new + body[stop:]     # right-aligned, as the columns are
    return body + end


# ------------------------------------------------------------------------------- line variants

def line_variants(source: Source, content: bytes) -> Iterator[Variant]:
    fmt = source.format
    lines = _lines(content)
    rows = data_lines(fmt, lines)
    middle = _middle(rows)
    if middle is None:
        return
    tool = "ncu" if fmt.startswith("ncu") else "nsys" if fmt.startswith("nsys") else "torch"
    stderr = STDERR_LINES[tool]
    body, end = _body(lines[middle])
    newline = end or "\n"

    # cut inside a row: halfway through a field's text, and right after a field separator
    cut_at = len(body) // 2
    yield Variant(source, "cut-mid-line", source.path.name, _join(lines[:middle]) + body[:cut_at].encode(
        "utf-8", "surrogateescape"), cut_damage(source, lines, middle), f"cut after {cut_at} characters of line {middle + 1}")
    separators = [m.end() for m in re.finditer("," if fmt in CSV_FORMATS else r" {2,}", body)]
    if fmt in CSV_FORMATS:
        fields = csv_fields(body)
        separators = list(itertools.accumulate(len(f) + 1 for f in fields[:-1]))
    if separators:
        cut_at = min(separators, key=lambda s: abs(s - len(body) // 2))
        yield Variant(source, "cut-mid-row", source.path.name,
                      _join(lines[:middle]) + body[:cut_at].encode("utf-8", "surrogateescape"),
                      cut_damage(source, lines, middle), f"cut after a field separator, line {middle + 1}")

    # stderr: a whole line between two rows, and spliced into a row (stdout's buffer flushed around it)
    yield Variant(source, "stderr-between-rows", source.path.name,
                  _join(lines[:middle] + [stderr + newline] + lines[middle:]), NO_DAMAGE,
                  f"{stderr[:40]}... inserted before line {middle + 1}", allowed=_samples_without_line)
    half = len(body) // 2
    yield Variant(source, "stderr-mid-row", source.path.name,
                  _join(lines[:middle] + [body[:half] + stderr + newline + body[half:] + end] + lines[middle + 1:]),
                  line_damage(source, lines, middle), f"stderr line spliced into line {middle + 1}")
    yield Variant(source, "progress-bar-cr", source.path.name,
                  _join(lines[:middle] + [PROGRESS_BAR.replace("\n", newline)] + lines[middle:]), NO_DAMAGE,
                  f"a \\r progress bar inserted before line {middle + 1}", allowed=_samples_without_line)

    # line endings and encoding marks
    mixed = [(_body(l)[0] + "\r\n") if i % 2 and _body(l)[1] == "\n" else l for i, l in enumerate(lines)]
    yield Variant(source, "mixed-line-endings", source.path.name, _join(mixed), NO_DAMAGE, "every other line ends in CRLF")
    if not content.startswith(b"\xef\xbb\xbf"):
        yield Variant(source, "bom", source.path.name, b"\xef\xbb\xbf" + content, NO_DAMAGE, "UTF-8 BOM prepended")

    # a byte that is not UTF-8 (Latin-1 e-acute) inside a kernel name / the row's first word
    target = body
    if fmt in CSV_FORMATS:
        block = next(b for b in csv_blocks(lines) if middle in b.rows)
        header = _header(lines, block)
        fields = csv_fields(body)
        named = [i for i, h in enumerate(header) if h in ("Kernel Name", "Name", "name", "Range", "Operation")
                 and i < len(fields) and field_value(fields[i])]
        if named:
            at = named[0]
            raw = fields[at]
            inner = 2 if raw.startswith('"') else 1
            fields[at] = raw[:inner] + "\udce9" + raw[inner:]
            target = ",".join(fields)
    if target == body:
        word = re.search(r"[A-Za-z_]{2,}", body)
        if word:
            target = body[:word.start() + 1] + "\udce9" + body[word.start() + 1:]
    if target != body:
        yield Variant(source, "non-utf8-in-name", source.path.name,
                      _join(lines[:middle] + [target + end] + lines[middle + 1:]), line_damage(source, lines, middle),
                      f"byte 0xe9 inserted in a name on line {middle + 1}")

    # localized numbers, n/a and empty cells in one row
    protect = NCU_IDENTITY_COLUMNS
    for kind, replace, nulls_ok in (
            ("localized-1.234,5", lambda n: localize(n, "."), False),
            ("localized-1 234,5", lambda n: localize(n, " "), False),
            ("na-cells", lambda n: "[N/A]" if fmt == "nvidia-smi-query" else "N/A" if fmt == "dcgmi-dmon" else "n/a", True),
            ("empty-cells", lambda n: "", True)):
        if kind == "empty-cells" and fmt not in CSV_FORMATS:
            new = _rewrite_numbers(source, lines, middle, lambda n: " " * len(n), protect)
        else:
            new = _rewrite_numbers(source, lines, middle, replace, protect)
        if new is not None and new != lines[middle]:
            yield Variant(source, kind, source.path.name, _join(lines[:middle] + [new] + lines[middle + 1:]),
                          line_damage(source, lines, middle), f"numbers of line {middle + 1} rewritten",
                          nulls_ok=nulls_ok)

    yield from cell_edge_variants(source, lines, middle)
    if fmt in CSV_FORMATS:
        yield from csv_column_variants(source, lines, middle)
    if fmt == "ncu-details-csv":
        variant = cut_in_last_section_variant(source, lines)
        if variant is not None:
            yield variant
    if fmt in ("ncu-details-csv", "ncu-text"):
        variant = unseen_rule_variant(source, lines, middle)
        if variant is not None:
            yield variant


# A number no float holds (Python and polars read it as inf), and an integer past int64 (2^64).
OVERFLOWING_FLOAT = "1e400"
OVERFLOWING_INT = "18446744073709551616"
# A timestamp past 2262, where int64 nanoseconds end: in microseconds (torch traces), in nanoseconds
# (nsys SQLite, where a session start is added to it).
FAR_TIMESTAMP_US = "9999999999999999"
FAR_TIMESTAMP_NS = "9223372036854000000"
# A unit no profiler prints (issue 32: it was stored as if it were the metric's usual unit).
UNKNOWN_UNIT = "parsec"


def cut_in_last_section_variant(source: Source, lines: list[str]) -> Variant | None:
    """A details page cut exactly after a row halfway through its last launch's last section of
    metric rows (issue 32: a page of one launch cut so was read as complete): structurally a whole,
    shorter file, which only the section's known rows tell from one."""
    block = next((b for b in csv_blocks(lines) if "Section Name" in _header(lines, b)), None)
    if block is None:
        return None
    header = _header(lines, block)
    at_id, at_section, at_metric = header.index("ID"), header.index("Section Name"), header.index("Metric Name")
    rows = [(i, [field_value(f) for f in csv_fields(_body(lines[i])[0])]) for i in block.rows]
    rows = [(i, f) for i, f in rows if len(f) > at_metric and f[at_id].isdigit()]
    if not rows:
        return None
    last_id = rows[-1][1][at_id]
    metric_rows = [(i, f) for i, f in rows if f[at_id] == last_id and f[at_metric]]
    if not metric_rows:
        return None
    section = metric_rows[-1][1][at_section]
    run = [i for i, f in metric_rows if f[at_section] == section]
    run = run[-next((k for k in range(1, len(run) + 1) if k == len(run) or run[-k - 1] != run[-k] - 1), len(run)):]
    if len(run) < 2:
        return None
    keep = run[len(run) // 2 - 1]                     # the file ends after this row
    return Variant(source, "cut-in-last-section", source.path.name, _join(lines[:keep + 1]),
                   Damage(launches_from=int(last_id)),
                   f"cut after line {keep + 1}, {run.index(keep) + 1} of the {len(run)} rows of the last launch's "
                   f'"{section}" section')


def _without_launch_index(table: str, row: dict) -> dict:
    """A timeline row's place (launch_index) left out (both sides): a GPU event whose start or duration
    cannot be stored is left out with a warning, and the launches after it move up one place."""
    return dict(row, launch_index=None) if table == "kernel_launches" and "launch_index" in row else row


def cell_edge_variants(source: Source, lines: list[str], middle: int) -> Iterator[Variant]:
    """Cells at the edges of what a number or unit can be, in the middle row (issue 32, item 6): every
    number 1e400 (inf once parsed); every integer 2^64 (formats whose columns hold integers); the
    row's unit one no tool prints (ncu pages). Each must come back NULL with a warning naming the
    file and line, or refuse the file: never stored as inf, wrapped, or in another unit."""
    fmt = source.format
    damage = line_damage(source, lines, middle)
    new = _rewrite_numbers(source, lines, middle, lambda n: OVERFLOWING_FLOAT, NCU_IDENTITY_COLUMNS)
    if new is not None:
        yield Variant(source, "cell-inf", source.path.name, _join(lines[:middle] + [new] + lines[middle + 1:]),
                      damage, f"numbers of line {middle + 1} set to {OVERFLOWING_FLOAT}", allowed=_without_launch_index)
    if fmt not in NCU_FORMATS:      # ncu metrics are floats: 2^64 is a value they hold
        new = _rewrite_numbers(source, lines, middle, lambda n: OVERFLOWING_INT if n.replace(",", "").isdigit() else n,
                               NCU_IDENTITY_COLUMNS)
        if new is not None and new != lines[middle]:
            yield Variant(source, "int-overflow", source.path.name,
                          _join(lines[:middle] + [new] + lines[middle + 1:]), damage,
                          f"integers of line {middle + 1} set to 2^64", allowed=_without_launch_index)
    body, end = _body(lines[middle])
    changed = None
    if fmt == "ncu-details-csv":
        block = next(b for b in csv_blocks(lines) if middle in b.rows)
        header = _header(lines, block)
        fields = csv_fields(body)
        at = header.index("Metric Unit") if "Metric Unit" in header else None
        if at is not None and at < len(fields):
            fields[at] = raw_field(UNKNOWN_UNIT, fields[at].startswith('"'))
            changed = ",".join(fields) + end
    elif fmt == "ncu-text":
        match = NCU_METRIC_ROW.match(body)
        if match and match.group(1):
            start, stop = match.span(1)
            unit = match.group(1).rstrip()
            changed = body[:start] + UNKNOWN_UNIT.rjust(len(unit)) + body[start + len(unit):] + end
    if changed is not None:
        yield Variant(source, "unknown-unit", source.path.name, _join(lines[:middle] + [changed] + lines[middle + 1:]),
                      damage, f"the unit of line {middle + 1} set to {UNKNOWN_UNIT}")
    if fmt == "ncu-raw-csv":
        # the units row (the line after the header): one metric's unit, so every launch's value of it
        block = next(b for b in csv_blocks(lines) if middle in b.rows)
        header = _header(lines, block)
        units_line = block.rows[0]
        fields = csv_fields(_body(lines[units_line])[0])
        numeric = csv_fields(body)
        at = next((i for i, raw in enumerate(numeric) if i < len(fields) and i < len(header)
                   and header[i] not in NCU_IDENTITY_COLUMNS and field_value(fields[i])
                   and NUMBER.match(field_value(raw).strip())), None)
        if at is not None:
            fields[at] = raw_field(UNKNOWN_UNIT, fields[at].startswith('"'))
            units = ",".join(fields) + _body(lines[units_line])[1]
            yield Variant(source, "unknown-unit", source.path.name,
                          _join(lines[:units_line] + [units] + lines[units_line + 1:]), Damage(whole_file=True),
                          f"the unit of column {header[at]} set to {UNKNOWN_UNIT}")


def _edit_blocks(lines: list[str], edit: Callable[[list[str], bool], list[str]]) -> list[str]:
    """Every line of every CSV block with its fields edited (header: True), the rest unchanged."""
    out = list(lines)
    for block in csv_blocks(lines):
        for i in [block.header, *block.rows]:
            body, end = _body(lines[i])
            out[i] = ",".join(edit(csv_fields(body), i == block.header)) + end
    return out


def csv_column_variants(source: Source, lines: list[str], middle: int) -> Iterator[Variant]:
    blocks = csv_blocks(lines)
    narrowest = min(len(csv_fields(_body(lines[i])[0])) for b in blocks for i in [b.header, *b.rows])
    column = narrowest // 2                         # a column every row of every block has

    def duplicate(fields: list[str], header: bool) -> list[str]:
        return fields[:column + 1] + [fields[column]] + fields[column + 1:]

    def rotate(fields: list[str], header: bool) -> list[str]:
        return [fields[narrowest - 1]] + fields[:narrowest - 1] + fields[narrowest:]

    def extra(fields: list[str], header: bool) -> list[str]:
        quoted = fields[0].startswith('"')
        return fields[:column] + [raw_field(EXTRA_COLUMN if header else "0", quoted)] + fields[column:]

    yield Variant(source, "duplicated-column", source.path.name, _join(_edit_blocks(lines, duplicate)), NO_DAMAGE,
                  f"column {column + 1} written twice")
    yield Variant(source, "reordered-columns", source.path.name, _join(_edit_blocks(lines, rotate)), NO_DAMAGE,
                  f"column {narrowest} moved first")
    yield Variant(source, "extra-column", source.path.name, _join(_edit_blocks(lines, extra)), NO_DAMAGE,
                  f"column {EXTRA_COLUMN} (all 0) inserted at {column + 1}", allowed=_without_extra_column)
    block = next(b for b in blocks if middle in b.rows)
    header_lines = [lines[block.header]] + ([lines[block.rows[0]]] if source.format == "ncu-raw-csv" else [])
    yield Variant(source, "header-repeated", source.path.name,
                  _join(lines[:middle] + header_lines + lines[middle:]), NO_DAMAGE,
                  f"the header line(s) repeated before line {middle + 1}", allowed=_samples_without_line)


def _samples_without_line(table: str, row: dict) -> dict:
    """A telemetry sample's file line left out (both sides): a line inserted before it moves it one
    line down, and the line it is stored with is where it is in the file that was read."""
    return dict(row, line=None) if table == "gpu_samples" else row


def _without_extra_column(table: str, row: dict) -> dict | None:
    """Rows of the added column left out, and the metric count (a raw page's extra column is one more
    metric of every launch) not compared."""
    if any(isinstance(v, str) and "pollution__extra" in v for v in row.values()):
        return None
    return dict(row, metric_count=None) if table == "kernels" and "metric_count" in row else row


def unseen_rule_variant(source: Source, lines: list[str], middle: int) -> Variant | None:
    """One rule message replaced by a text kwh's rule table has never seen, in the launch of the middle row."""
    launch = ncu_launch_of(source.format, lines, middle)
    if source.format == "ncu-details-csv":
        for block in csv_blocks(lines):
            header = _header(lines, block)
            if "Rule Description" not in header:
                continue
            at, name_at = header.index("Rule Description"), header.index("Rule Name")
            candidates = [i for i in block.rows
                          if len(fields := csv_fields(_body(lines[i])[0])) > at and field_value(fields[at])]
            if not candidates:
                continue
            row = min(candidates, key=lambda i: abs(i - middle))
            body, end = _body(lines[row])
            fields = csv_fields(body)
            old = field_value(fields[at])
            fields[at] = raw_field(UNSEEN_RULE_TEXT, fields[at].startswith('"'))
            return Variant(source, "unseen-rule-text", source.path.name,
                           _join(lines[:row] + [",".join(fields) + end] + lines[row + 1:]), NO_DAMAGE,
                           f"rule {field_value(fields[name_at])} of line {row + 1} reworded",
                           allowed=_reworded(old))
        return None
    starts = [i for i, line in enumerate(lines) if NCU_RULE_START.match(_body(line)[0])]
    if not starts:
        return None
    row = min(starts, key=lambda i: abs(i - middle))
    body, end = _body(lines[row])
    match = NCU_RULE_START.match(body)
    old_start = match.group(2)
    new = body[:match.start(2)] + UNSEEN_RULE_TEXT + end
    return Variant(source, "unseen-rule-text", source.path.name, _join(lines[:row] + [new] + lines[row + 1:]),
                   NO_DAMAGE, f"the first line of the rule message on line {row + 1} reworded",
                   allowed=_reworded(old_start, prefix=True))


def _reworded(old: str, prefix: bool = False) -> Callable[[str, dict], dict]:
    """Rows of the rules table whose message is the original or the reworded one become alike: the
    message and rule name replaced by one mark (a NULL rule name stays NULL: that is never right)."""
    old_words = " ".join(old.split())

    def allowed(table: str, row: dict) -> dict:
        if table != "rules" or not isinstance(row.get("description"), str):
            return row
        words = " ".join(row["description"].split())
        if words.startswith(UNSEEN_RULE_TEXT) or (words.startswith(old_words) if prefix else words == old_words):
            row = dict(row, description="<reworded rule message>")
            if row.get("rule_name") is not None:
                row["rule_name"] = "<its rule name>"
        return row
    return allowed


# ------------------------------------------------------------------------------- other formats

def json_variants(source: Source, content: bytes) -> Iterator[Variant]:
    """Variants of a PyTorch profiler trace (Chrome trace JSON)."""
    text = content.decode("utf-8", "surrogateescape")
    lines = _lines(content)
    cut = len(content) * 6 // 10
    yield Variant(source, "cut-mid-line", source.path.name, content[:cut], Damage(whole_file=True),
                  f"cut at byte {cut}")
    middle = len(lines) // 2
    yield Variant(source, "stderr-between-rows", source.path.name,
                  _join(lines[:middle] + [STDERR_LINES["torch"] + "\n"] + lines[middle:]), NO_DAMAGE,
                  f"a stderr line inserted before line {middle + 1}")
    mixed = [(_body(l)[0] + "\r\n") if i % 2 and _body(l)[1] == "\n" else l for i, l in enumerate(lines)]
    yield Variant(source, "mixed-line-endings", source.path.name, _join(mixed), NO_DAMAGE, "every other line ends in CRLF")
    if not content.startswith(b"\xef\xbb\xbf"):
        yield Variant(source, "bom", source.path.name, b"\xef\xbb\xbf" + content, NO_DAMAGE, "UTF-8 BOM prepended")
    kernels = [m for m in re.finditer(r'"cat": "kernel", "name": "([^"\\]*)"', text)]
    if kernels:
        chosen = kernels[len(kernels) // 2]
        correlation = re.search(r'"correlation": (\d+)', text[chosen.end():])
        damage = Damage(correlations=frozenset({int(correlation.group(1))})) if correlation else Damage(whole_file=True)
        start = chosen.start(1) + 1
        yield Variant(source, "non-utf8-in-name", source.path.name,
                      (text[:start] + "\udce9" + text[start:]).encode("utf-8", "surrogateescape"), damage,
                      "byte 0xe9 inserted in a kernel name")
        dur = re.compile(r'"dur": [\d.]+').search(text, chosen.end())
        # a kernel left out (its time unusable) moves what its op's kernels derive (the op's FLOPs go to
        # its longest kernel): every GPU event of the same op is touched
        siblings = _op_siblings(text, damage)
        if dur:
            yield Variant(source, "empty-cells", source.path.name,
                          (text[:dur.start()] + '"dur": null' + text[dur.end():]).encode("utf-8", "surrogateescape"),
                          damage, "one kernel's dur set to null", nulls_ok=True)
            yield Variant(source, "cell-inf", source.path.name,
                          (text[:dur.start()] + f'"dur": {OVERFLOWING_FLOAT}' + text[dur.end():])
                          .encode("utf-8", "surrogateescape"), siblings, f"one kernel's dur set to {OVERFLOWING_FLOAT}",
                          allowed=_without_launch_index)
        ts = re.compile(r'"ts": [\d.]+').search(text, chosen.end())
        if ts:
            for kind, value in (("int-overflow", OVERFLOWING_INT), ("far-timestamp", FAR_TIMESTAMP_US)):
                yield Variant(source, kind, source.path.name,
                              (text[:ts.start()] + f'"ts": {value}' + text[ts.end():]).encode("utf-8", "surrogateescape"),
                              siblings, f"one kernel's ts set to {value}", allowed=_without_launch_index)
    try:
        trace = json.loads(text, object_pairs_hook=list)
    except ValueError:
        return
    yield Variant(source, "reordered-columns", source.path.name, _dump(trace, "reverse").encode(), NO_DAMAGE,
                  "every object's keys in reverse order")
    yield Variant(source, "duplicated-column", source.path.name, _dump(trace, "duplicate").encode(), NO_DAMAGE,
                  "every object's first key written twice")
    yield Variant(source, "extra-column", source.path.name, _dump(trace, "extra").encode(), NO_DAMAGE,
                  f"every object gets a key {EXTRA_COLUMN}")


def _op_siblings(text: str, damage: Damage) -> Damage:
    """`damage` (one GPU event, by correlation id) widened to every GPU event launched by the same
    CPU op (same "External id")."""
    try:
        events = json.loads(text).get("traceEvents") or []
    except (ValueError, AttributeError):
        return damage
    args = [e.get("args") or {} for e in events if isinstance(e, dict) and str(e.get("cat", "")).lower()
            in ("kernel", "gpu_memcpy", "gpu_memset")]
    ops = {a.get("External id") for a in args if a.get("correlation") in damage.correlations} - {None}
    wider = {a.get("correlation") for a in args if a.get("External id") in ops} - {None}
    return Damage(correlations=frozenset(damage.correlations | wider)) if wider else damage


def _dump(value, how: str) -> str:
    """JSON text of a value parsed with object_pairs_hook=list, its objects' keys edited."""
    if isinstance(value, list) and value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        pairs = list(value)
        if how == "reverse":
            pairs.reverse()
        elif how == "duplicate":
            pairs = pairs[:1] + pairs
        elif how == "extra":
            pairs = pairs + [(EXTRA_COLUMN, 0)]
        return "{" + ", ".join(f"{json.dumps(k)}: {_dump(v, how)}" for k, v in pairs) + "}"
    if isinstance(value, list):
        return "[" + ",\n".join(_dump(v, how) for v in value) + "]"
    return json.dumps(value)


def sqlite_variants(source: Source, content: bytes, scratch: Path) -> Iterator[Variant]:
    """Variants of an nsys SQLite export: cut short, a table or column dropped, a NULL, a bad name."""
    cut = len(content) // 2
    yield Variant(source, "truncated", source.path.name, content[:cut], Damage(whole_file=True),
                  f"cut at byte {cut} of {len(content)}")
    work = scratch / f"sqlite-{hashlib.sha256(content).hexdigest()[:12]}.sqlite"

    def edited(statements: list[str]) -> bytes | None:
        work.write_bytes(content)
        try:
            con = sqlite3.connect(work)
            try:
                for statement in statements:
                    con.execute(statement)
                con.commit()
                con.execute("VACUUM")
            finally:
                con.close()
            return work.read_bytes()
        except sqlite3.Error:
            return None
        finally:
            work.unlink(missing_ok=True)

    con = sqlite3.connect(f"file:{source.path}?mode=ro&immutable=1", uri=True)
    try:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        kernel_columns = [row[1] for row in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        kernel_count = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] \
            if "CUPTI_ACTIVITY_KIND_KERNEL" in tables else 0
        name_id = con.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET ?",
                              (kernel_count // 2,)).fetchone() if kernel_count else None
    finally:
        con.close()
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_GPU"):
        if table in tables:
            data = edited([f"DROP TABLE {table}"])
            if data is None:
                continue
            if table == "NVTX_EVENTS":
                # A real export's shape, not damage: nsys writes NVTX_EVENTS only when the program used
                # NVTX (tests/data/nsys-sqlite-rtx3090, nsys 2025.5, has none; nsys stats then says
                # "does not contain NV Tools Extension (NVTX) data"), so no reader can tell this copy
                # from a capture without NVTX. Its kernels are right without a range: intact, with every
                # other value as in the original.
                yield Variant(source, "dropped-table", source.path.name, data, NO_DAMAGE,
                              f"table {table} dropped", allowed=_without_nvtx_context, detail=table)
            else:
                yield Variant(source, "dropped-table", source.path.name, data, Damage(whole_file=True),
                              f"table {table} dropped", detail=table)
    for column in ("registersPerThread", "gridZ"):
        if column in kernel_columns:
            data = edited([f"ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN {column}"])
            if data is not None:
                yield Variant(source, "dropped-column", source.path.name, data, Damage(whole_file=True),
                              f"column CUPTI_ACTIVITY_KIND_KERNEL.{column} dropped")
                break
    if kernel_count:
        data = edited([f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = NULL WHERE rowid = "
                       f"(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET {kernel_count // 2})"])
        if data is not None:
            yield Variant(source, "empty-cells", source.path.name, data, Damage(whole_file=True),
                          "one kernel's end set to NULL", nulls_ok=True)
    if kernel_count:
        row = f"(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET {kernel_count // 2})"
        for kind, assignment in (
                ("cell-inf", f'"end" = {OVERFLOWING_FLOAT}'),
                ("int-overflow", f"start = {OVERFLOWING_INT}.0"),     # SQLite keeps it as a REAL
                ("far-timestamp", f'start = {FAR_TIMESTAMP_NS}, "end" = {FAR_TIMESTAMP_NS} + ("end" - start)')):
            data = edited([f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {assignment} WHERE rowid = {row}"])
            if data is not None:
                yield Variant(source, kind, source.path.name, data, Damage(whole_file=True),
                              f"one kernel's {assignment}")
    if name_id is not None:
        data = edited([f"UPDATE StringIds SET value = CAST(CAST(value AS BLOB) || X'E9' AS TEXT) WHERE id = {name_id[0]}"])
        if data is not None:
            yield Variant(source, "non-utf8-in-name", source.path.name, data, Damage(whole_file=True),
                          "byte 0xe9 appended to one kernel's short name")


NVTX_CONTEXT = ("nvtx_path", "nvtx_range", "framework_op", "framework_op_id", "op_shapes")


def _without_nvtx_context(table: str, row: dict) -> dict:
    """What a timeline row knows from NVTX ranges left out (both sides), for the NVTX_EVENTS variant."""
    return dict(row, **{c: None for c in NVTX_CONTEXT if c in row}) if table == "kernel_launches" else row


def file_name_variant(source: Source, content: bytes) -> Variant:
    """The same bytes under a name that is not UTF-8 (a Latin-1 e-acute), as a copy from an old system keeps it."""
    stem, dot, suffix = source.path.name.partition(".")
    name = os.fsdecode(stem.encode() + b"-\xe9" + (dot + suffix).encode())
    return Variant(source, "non-utf8-file-name", name, content, NO_DAMAGE, "byte 0xe9 in the file name")


def gzip_truncated_variant(source: Source, content: bytes) -> Variant | None:
    """A gzip copy cut at half its compressed length; damage as a cut where its decompression stops."""
    if content[:2] == b"\x1f\x8b":
        return None
    compressed = gzip.compress(content, mtime=0)
    cut = len(compressed) // 2
    try:
        plain = zlib.decompressobj(wbits=31).decompress(compressed[:cut])
    except zlib.error:
        plain = b""
    if source.format in CSV_FORMATS + TEXT_FORMATS:
        lines = _lines(content)
        index = len(_lines(plain)) - 1 if plain else 0
        damage = cut_damage(source, lines, max(index, 0))
    else:
        damage = Damage(whole_file=True)
    return Variant(source, "gzip-truncated", source.path.name + ".gz", compressed[:cut], damage,
                   f"gzip cut at {cut} of {len(compressed)} bytes ({len(plain)} of {len(content)} decompress)")


def variants(source: Source, scratch: Path, kinds: Iterable[str] | None = None) -> list[Variant]:
    """Every variant of one source (only `kinds`, when given), without two of the same content."""
    content = source.path.read_bytes()
    out: list[Variant] = [file_name_variant(source, content)]
    gz = gzip_truncated_variant(source, content)
    if gz is not None:
        out.append(gz)
    if source.format in CSV_FORMATS + TEXT_FORMATS:
        out.extend(line_variants(source, content))
    elif source.format == "torch-trace":
        out.extend(json_variants(source, content))
    elif source.format == "nsys-sqlite":
        out.extend(sqlite_variants(source, content, scratch))
    elif source.format == "ncu-rep":
        cut = len(content) // 2
        out.append(Variant(source, "truncated", source.path.name, content[:cut], Damage(whole_file=True),
                           f"cut at byte {cut} of {len(content)}"))
    wanted = set(kinds) if kinds else None
    seen, unique = {content}, []
    for variant in out:
        if wanted is not None and variant.kind not in wanted:
            continue
        if variant.content in seen and variant.kind != "non-utf8-file-name":
            continue   # a pollution that changed nothing here (e.g. no BOM to add)
        seen.add(variant.content)
        unique.append(variant)
    return unique


# ------------------------------------------------------------------------------------- harness

VERDICTS = ("intact", "refused", "lost", "crashed")


@dataclass
class Outcome:
    variant: Variant
    verdict: str                  # one of VERDICTS
    reason: str                   # one line: why (the error, the lost rows)

    @property
    def bad(self) -> bool:
        return self.verdict in ("lost", "crashed")


@dataclass
class Stored:
    """What one ingest stored from one folder: rows per table (canonical tuples), notes, failures."""
    rows: dict[str, Counter]
    columns: dict[str, tuple[str, ...]]
    notes: list[str]


def canonical(value):
    """A stored value in a hashable, comparable form (NaN equal to NaN, lists as tuples)."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, canonical(v)) for k, v in value.items()))
    return value


def _stored(warehouse, run_ids: list[str], notes: list[str], allowed=None) -> Stored:
    rows: dict[str, Counter] = {}
    columns: dict[str, tuple[str, ...]] = {}
    for run_id in run_ids:
        for table, arrow in warehouse.read_run(run_id).items():
            names = tuple(n for n in arrow.column_names if n not in VOLATILE)
            columns[table] = names
            counter = rows.setdefault(table, Counter())
            for row in arrow.to_pylist():
                row = {k: row[k] for k in names}
                if allowed is not None:
                    row = allowed(table, row)
                    if row is None:
                        continue
                counter[tuple(canonical(row[k]) for k in names)] += 1
    return Stored(rows, columns, notes)


class Harness:
    """Ingests variants beside a clean neighbour and classifies them; caches the clean references."""

    def __init__(self, workdir: Path, neighbours: tuple[Path, Path] | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._references: dict[tuple[Path, int], Stored | str] = {}
        self._count = 0
        # the clean neighbour: a small real ncu raw page, or (beside an ncu raw page) a small real trace
        self.neighbours = neighbours or (DATA / "ncu-custom-cupy-h100" / "custom_cupy.raw.csv",
                                         DATA / "torch-trace-custom_cupy" / "trace.json")

    def _folder(self, purpose: str) -> Path:
        self._count += 1
        folder = self.workdir / f"{self._count:05d}-{purpose}"
        folder.mkdir(parents=True)
        return folder

    @staticmethod
    def _place(folder: Path, name: str, content: bytes, sidecars: Iterable[Path]) -> Path:
        """`content` as `folder/<name of the original folder>/name`, with the metadata files beside it
        (the folder's name is the model where no manifest names one: same as the original's)."""
        for sidecar in sidecars:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sidecar, folder / sidecar.name)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        path.write_bytes(content)
        return path

    def reference(self, path: Path, sidecars: tuple[Path, ...], allowed=None) -> Stored | str:
        """The rows the clean file stores when ingested alone, or why it cannot be a reference."""
        key = (path, id(allowed))
        if key not in self._references:
            self._references[key] = self._reference(path, sidecars, allowed)
        return self._references[key]

    def _reference(self, path: Path, sidecars: tuple[Path, ...], allowed) -> Stored | str:
        from kwarehouse.jobs import ingest as ingest_job
        from kwarehouse.store.warehouse import Warehouse
        folder = self._folder("reference")
        copy = self._place(folder / "files" / path.parent.name, path.name, path.read_bytes(), sidecars)
        warehouse = Warehouse(folder / "wh")
        try:
            report = ingest_job.ingest([copy.parent], warehouse)
            if report.failed:
                return f"refused when clean: {report.failed[0]}"
            runs = [r for r in report.runs if any(Path(f).name == copy.name for f in r.files)]
            if not runs:
                return "nothing stored when clean"
            return _stored(warehouse, [r.run_id for r in runs], [n for r in runs for n in r.notes], allowed)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def neighbour_for(self, variant: Variant) -> Path:
        first, second = self.neighbours
        return second if variant.source.format == "ncu-raw-csv" or variant.source.path == first else first

    def score(self, variant: Variant) -> Outcome:
        from kwarehouse.jobs import ingest as ingest_job
        from kwarehouse.errors import display_path
        from kwarehouse.store.warehouse import Warehouse
        source = variant.source
        reference = self.reference(source.path, source.sidecars, variant.allowed)
        if isinstance(reference, str):
            return Outcome(variant, "refused", f"source not usable: {reference}")
        neighbour = self.neighbour_for(variant)
        neighbour_sidecars = tuple(p for p in neighbour.parent.iterdir()
                                   if p.name.startswith("manifest") and p.suffix == ".json" or p.name in SIDECAR_NAMES)
        neighbour_reference = self.reference(neighbour, neighbour_sidecars)
        folder = self._folder("variant")
        try:
            polluted = self._place(folder / "a" / source.path.parent.name, variant.name, variant.content,
                                   source.sidecars)
            clean = self._place(folder / "b" / neighbour.parent.name, neighbour.name, neighbour.read_bytes(),
                                neighbour_sidecars)
            warehouse = Warehouse(folder / "wh")
            try:
                report = ingest_job.ingest([polluted.parent, clean.parent], warehouse)
            except Exception as exc:   # noqa: BLE001 - a crash is what is measured
                where = traceback.extract_tb(exc.__traceback__)[-1]
                return Outcome(variant, "crashed", f"the ingest raised {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''} ({Path(where.filename).name}:{where.lineno})")
            shown = display_path(polluted)
            mine = [line for line in report.failed if shown in line or polluted.name in line]
            others = [line for line in report.failed if line not in mine]
            if others:
                return Outcome(variant, "crashed", f"another file failed: {others[0]}")
            clean_runs = [r for r in report.runs if any(Path(f).parent == clean.parent for f in r.files)]
            clean_stored = _stored(warehouse, [r.run_id for r in clean_runs], [])
            if not clean_runs or clean_stored.rows != neighbour_reference.rows:
                return Outcome(variant, "crashed", f"the clean neighbour {neighbour.name} was not stored as alone")
            my_runs = [r for r in report.runs if any(Path(f).parent == polluted.parent for f in r.files)]
            for line in mine:
                if "\n" in line or re.search(r"internal|please report|traceback", line, re.I):
                    return Outcome(variant, "crashed", line.splitlines()[0])
                if not line.startswith(shown + ":"):
                    return Outcome(variant, "crashed", f"an error that does not begin with the file: {line}")
            if mine:
                if my_runs:
                    return Outcome(variant, "lost", f"refused ({mine[0]}) yet rows of it were stored")
                return Outcome(variant, "refused", mine[0])
            if not my_runs:
                # recorded as a capture with nothing to store (a kernel table dropped: what an export of a
                # program that ran no kernel is), one line naming the file: as good as a refusal
                empty = [e for e in getattr(report, "empty", []) if e.path == shown or polluted.name in e.path]
                if empty:
                    return Outcome(variant, "refused", f"{empty[0].path}: nothing to store: {empty[0].reason}")
                skipped = [why for path, why in report.skipped if polluted.name in path]
                return Outcome(variant, "lost", f"silently skipped: {skipped[0] if skipped else 'not read, no error'}")
            # the readers' warnings come with each run (RunSummary.warnings), naming the file and line
            warnings = [str(w) for w in [*getattr(report, "warnings", []), *(w for r in my_runs for w in r.warnings)]
                        if shown in str(w) or polluted.name in str(w)]
            notes = [n for r in my_runs for n in r.notes if n not in reference.notes]
            stored = _stored(warehouse, [r.run_id for r in my_runs], [], variant.allowed)
            return compare(variant, reference, stored, warnings + notes)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _touched(damage: Damage, table: str, columns: tuple[str, ...], row: tuple) -> bool:
    if damage.whole_file or table == "runs" and damage.any:
        return True
    values = dict(zip(columns, row))
    launch = values.get("launch_id")
    if launch is not None and (launch in damage.launches or
                               damage.launches_from is not None and launch >= damage.launches_from):
        return True
    if values.get("correlation_id") in damage.correlations:
        return True
    if damage.lines:
        texts = [v for v in values.values() if isinstance(v, str) and len(v) >= 4 and not NUMBER.match(v)]
        return any(t in line for t in texts for line in damage.lines)
    return False


NA_TEXTS = ("n/a", "N/A", "[N/A]", "")


def _nulled_copy(columns: tuple[str, ...], extra: tuple, missing: Counter) -> tuple | None:
    """The missing row that `extra` equals except for values it has as NULL (a value_text of n/a or
    empty where a number was: the cell as exported)."""
    def same(column: str, e, r) -> bool:
        return e == r or e is None or column == "value_text" and r is None and e in NA_TEXTS
    for row in missing:
        if missing[row] and len(row) == len(extra) and all(same(c, e, r) for c, e, r in zip(columns, extra, row)):
            return row
    return None


def _closest(columns: tuple[str, ...], row: tuple, others: Iterable[tuple]) -> str:
    """Which columns differ between `row` and the most similar of `others`: what a lost row lost."""
    best = max(others, key=lambda o: sum(a == b for a, b in zip(row, o)), default=None)
    if best is None:
        return ""
    differ = [f"{c}: {a!r:.60} -> {b!r:.60}" for c, a, b in zip(columns, row, best) if a != b]
    return " [closest stored: " + "; ".join(differ[:4]) + "]" if differ else ""


def compare(variant: Variant, reference: Stored, stored: Stored, warnings: list[str]) -> Outcome:
    """intact or lost, from the stored rows against the clean original's (see the module's docstring)."""
    damage = variant.damage
    untouched_lost: list[str] = []
    touched_changes: list[str] = []
    for table in sorted(set(reference.rows) | set(stored.rows)):
        columns = reference.columns.get(table) or stored.columns.get(table)
        if stored.columns.get(table, columns) != columns:
            untouched_lost.append(f"{table}: columns differ")
            continue
        ref = reference.rows.get(table, Counter())
        got = stored.rows.get(table, Counter())
        missing, extra = ref - got, got - ref
        if variant.nulls_ok:
            for row in list(extra.elements()):
                match = _nulled_copy(columns, row, missing) if _touched(damage, table, columns, row) else None
                if match is not None:
                    missing[match] -= 1
                    extra[row] -= 1
            missing, extra = +missing, +extra
            if table == "metrics":   # a value read as n/a may leave no metric row
                missing = Counter({r: n for r, n in missing.items() if not _touched(damage, table, columns, r)})
        for row, count in missing.items():
            where = untouched_lost if not _touched(damage, table, columns, row) else touched_changes
            where.append(f"{table}: {count} row(s) missing, e.g. {_short(columns, row)}"
                         + (_closest(columns, row, extra) if len(where) < 2 else ""))
        for row, count in extra.items():
            where = untouched_lost if not _touched(damage, table, columns, row) else touched_changes
            where.append(f"{table}: {count} row(s) not in the clean original, e.g. {_short(columns, row)}")
    if untouched_lost:
        return Outcome(variant, "lost", f"{len(untouched_lost)} difference(s) in rows the pollution did not touch: "
                       + "; ".join(untouched_lost[:3]))
    if touched_changes and not warnings:
        if variant.nulls_ok and all(c.startswith(("kernels:", "runs:", "kernel_launches:")) for c in touched_changes):
            # a value read as NULL changes what is derived from it on its own row (class, totals): not a loss
            return Outcome(variant, "intact", "touched values read as NULL")
        return Outcome(variant, "lost", "touched rows changed with no warning: " + "; ".join(touched_changes[:3]))
    return Outcome(variant, "intact", f"{len(touched_changes)} touched difference(s), warned" if touched_changes else "equal")


def _short(columns: tuple[str, ...], row: tuple) -> str:
    values = dict(zip(columns, row))
    keys = [k for k in ("launch_id", "correlation_id", "kernel_name", "metric", "rule_name", "name", "report",
                        "field", "nvtx_range") if k in values]
    text = ", ".join(f"{k}={values[k]!r}" for k in keys[:3]) or repr(row)[:120]
    return text[:160]


# ------------------------------------------------------------------------------------- scoring

def run_all(sources: list[Source], workdir: Path, kinds: Iterable[str] | None = None,
            progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    harness = Harness(workdir / "ingests")
    outcomes = []
    for source in sources:
        for variant in variants(source, workdir, kinds):
            outcome = harness.score(variant)
            outcomes.append(outcome)
            if progress:
                progress(outcome)
    return outcomes


def score_table(outcomes: list[Outcome]) -> list[tuple[str, str, Counter]]:
    """(format, variant kind, Counter of verdicts), sorted."""
    table: dict[tuple[str, str], Counter] = {}
    for outcome in outcomes:
        if outcome.reason.startswith("source not usable"):
            continue
        key = (outcome.variant.source.format, outcome.variant.kind)
        table.setdefault(key, Counter())[outcome.verdict] += 1
    return [(fmt, kind, counts) for (fmt, kind), counts in sorted(table.items())]
