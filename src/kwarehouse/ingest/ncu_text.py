"""ncu console text: what `ncu ./app > out.txt` (or `ncu --import R`) prints without --csv.

The same report as the details page, laid out for people:

    [464] python3.12@127.0.0.1                                    <- process: [pid] name@host
      void kern<16>(char *) (1024, 1, 1)x(96, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
        NVTX Push/Pop Stack for Thread 464:                       <- with --nvtx
          <default domain>
            <0,gpt2.iteration>
        Section: GPU Speed Of Light Throughput
        ----------------------- ----------- ------------
        Metric Name             Metric Unit Metric Value
        ----------------------- ----------- ------------
        DRAM Frequency                  Ghz         2.60
        ----------------------- ----------- ------------

        OPT   Est. Local Speedup: 96.85%                          <- a rule: type, speedup, description
              This kernel grid is too small to fill ...              wrapped to the console width
        ----- ------------------------------------------         <- between two rules of a section

`--page details` and `--print-units base` print the same layout (base units, more digits). Rows come
back in the details page's terms (section, display label, unit, value as printed), so normalize maps
labels to metric names as for the details CSV. The text has no launch IDs: launches are numbered
0, 1, ... in the order printed, which is ncu's ID order. Rules are printed under the section's
display name and without their name: ncu_sections.csv and ncu_rules.csv give both back, so the rules
of a console capture equal those of the details CSV of the same report.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import captured_text, ncu_csv
from kwarehouse.ingest.cells import metric_cell_problem
from kwarehouse.ingest.base import LAUNCH_COLUMNS, METRIC_COLUMNS, RULE_COLUMNS, ReadResult
from kwarehouse.normalize.units import to_base

PROCESS = re.compile(r"^\[(?P<pid>\d+)\] (?P<name>.*)@(?P<host>[^@]*)$")
# The launch line; the kernel name may hold spaces and parentheses, so the fields anchor on the right.
LAUNCH = re.compile(r"^  (?P<name>\S.*) \((?P<grid>\d+, \d+, \d+)\)x\((?P<block>\d+, \d+, \d+)\), "
                    r"Context (?P<context>\d+), Stream (?P<stream>\d+)"
                    r"(?:, Device (?P<device>\d+))?(?:, CC (?P<cc>\d+\.\d+))?\s*$")
SECTION = re.compile(r"^    Section: (?P<section>.+?)\s*$")
RULE = re.compile(r"^    (?P<type>OPT|INF|WRN|ERR)   (?P<text>.*?)\s*$")
SPEEDUP = re.compile(r"^Est\. (?:(?P<kind>Local|Global) )?Speedup: (?P<value>[\d,.]+)%$")
RULE_TEXT = re.compile(r"^          (?P<text>.*?)\s*$")    # a rule's wrapped description
DASHES = re.compile(r"^    -+( -+)+\s*$")                  # table borders and rule separators
NVTX_THREAD = re.compile(r"^    NVTX Push/Pop Stack for Thread (?P<thread>\d+):\s*$")
NVTX_DOMAIN = re.compile(r"^      (?P<domain>\S.*?)\s*$")
NVTX_RANGE = re.compile(r"^        <(?P<level>\d+),(?P<text>.*)>\s*$")
TABLE_HEADER = ("Metric Name", "Metric Unit", "Metric Value")
# A table's value as ncu prints it: one word ("1,123", "2.60", "PolicySpread") or words of letters ("no data").
VALUE = re.compile(r"^(?:\S+|[A-Za-z/ ]+)$")
# What a byte that is not UTF-8 is decoded as (captured_text.read_text replaces it).
NOT_UTF8 = "\ufffd"
TRUNCATED = ("file ends in the middle of {what} (truncated?); re-capture it, or, if it is still being "
             "copied, wait for the copy to finish")


def _data(name: str) -> list[dict[str, str]]:
    text = resources.files("kwarehouse.ingest").joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


@functools.cache
def section_ids() -> dict[str, str]:
    """Section display name -> identifier (ncu_sections.csv)."""
    return {row["label"]: row["section"] for row in _data("ncu_sections.csv")}


@functools.cache
def rule_names() -> list[tuple[str, re.Pattern, str]]:
    """(section identifier, description start, rule name), in file order (ncu_rules.csv)."""
    # case-blind: releases recase words in a message ("float (fp32)" in an ncu of the RTX 5090 sample,
    # "float (FP32)" in 2025.3.1's SpeedOfLight_Roofline.py)
    return [(row["section"], re.compile(row["starts_with"], re.IGNORECASE), row["rule_name"])
            for row in _data("ncu_rules.csv")]


def rule_name(section: str, description: str) -> str:
    """The rule that printed `description` in `section`; '' for a message no row of ncu_rules.csv knows
    (a newer ncu's): the row is kept with its text and type, never dropped or left without a name.

    >>> rule_name("SpeedOfLight", "This workload is utilizing greater than 80.0% of the available compute")
    'SOLBottleneck'
    >>> rule_name("SpeedOfLight", "A message of some future ncu release.")
    ''
    """
    return next((name for s, start, name in rule_names() if s == section and start.match(description)), "")


@dataclass
class _Launch:
    fields: dict
    line: int
    launch_id: int
    nvtx: list[tuple[str, str]] = field(default_factory=list)
    nvtx_thread: str | None = None


# Lines that begin a line of their own, never the continuation of one a terminal wrapped.
LINE_STARTS = re.compile(r"^(?:\[\d+\] |    Section: |    (?:OPT|INF|WRN|ERR)   |        <\d+,|    NVTX Push/Pop |"
                         r"    -+ -|==[A-Z]+== )")
# A launch line a terminal wrapped runs over at most this many lines.
WRAPPED_LAUNCH_LINES = 6


class NcuText:
    name: ClassVar[str] = "ncu-text"
    decodes_captures: ClassVar[bool] = True    # reads UTF-16, BOM, CR-only text itself (captured_text)

    def sniff(self, path: Path, head: bytes) -> bool:
        # Cheap test first (a substring search), then one launch line followed by a section.
        at = head.find(b"\n    Section: ")
        if at < 0:
            return False
        lines = head[:at].decode("utf-8", "replace").splitlines()[-200:]
        # a launch line, whole or wrapped by a terminal over the next few lines
        return any(LAUNCH.match("".join(lines[i:i + parts])) for i in range(len(lines))
                   for parts in range(1, WRAPPED_LAUNCH_LINES + 1) if i + parts <= len(lines))

    def read(self, path: Path) -> ReadResult:
        captured = captured_text.captured_lines(captured_text.read_text(path))
        if captured.lines and not captured.ends_with_newline:
            # ncu ends every line it prints: a last line without its newline was cut short
            raise InputError(path, TRUNCATED.format(what="a line"), line=captured.numbers[-1])
        best: tuple[tuple[int, int], ReadResult] | None = None
        first_error: InputError | None = None
        # the text as it is, and unwrapped where a terminal may have wrapped it: the one read best
        for reading in captured_text.readings(captured, LINE_STARTS):
            try:
                result = _Parser(path, reading.numbers).parse(reading.lines)
            except InputError as exc:
                first_error = first_error or exc
                continue
            score = (result.launches.height, result.metrics.height + result.rules.height - len(result.warnings))
            if best is None or score > best[0]:
                best = (score, result)
        if best is None:
            raise first_error
        return best[1]


class _Parser:
    """One pass over the lines; anything outside the report's layout (program output, ==PROF== lines,
    warnings) is passed over."""

    def __init__(self, path: Path, numbers):
        self.path = path
        self.numbers = numbers       # the editor's line number of each line
        self.warnings: list[InputError] = []
        self.lost_launch = False     # a launch whose launch line could not be read: its rows are passed over
        self.sections: set[str] = set()   # sections of the current launch
        self.process: dict = {}
        self.launches: list[_Launch] = []
        self.metrics: list[tuple] = []
        self.rules: list[tuple] = []
        self.section: str | None = None
        self.table: list[int] | None = None   # column starts while inside a table
        self.table_part = 0          # borders seen: 1 before the header, 2 in the rows, 3 closed
        self.table_line = 0
        self.table_known = True      # a Metric Name / Unit / Value table (others are passed over)
        self.rule: list | None = None
        self.in_nvtx = False
        self.nvtx_domain = ""

    def parse(self, lines: list[str]) -> ReadResult:
        for number, line in zip(self.numbers, lines):
            self._line(number, line)
        if self.table is not None:
            raise InputError(self.path, TRUNCATED.format(what=f'the "{self.section}" table'),
                             line=self.table_line)
        self._end_rule()
        if not self.launches:
            raise InputError(self.path, "no profiled kernel in this ncu text; did ncu profile any kernel?")
        self._reject_cut_last_launch()
        launches = pl.DataFrame([self._launch_row(launch) for launch in self.launches],
                                schema=LAUNCH_COLUMNS, orient="row")
        metrics = pl.DataFrame(self.metrics, schema=METRIC_COLUMNS, orient="row")
        rules = pl.DataFrame([rule[:-1] for rule in self.rules], schema=RULE_COLUMNS, orient="row")
        units = set(metrics["unit"].drop_nulls().to_list())
        return ReadResult(path=self.path, format=NcuText.name, page="text", launches=launches,
                          metrics=metrics, rules=rules,
                          names_mangled=bool(launches["kernel_name"].str.starts_with("_Z").any()),
                          base_units=all(to_base(u)[1] == 1.0 for u in units),
                          warnings=[str(w) for w in self.warnings])

    def _launch_id(self) -> int:
        """The current launch's ID: its place in ncu's order, counting a launch whose line was lost."""
        return self.launches[-1].launch_id

    def _line(self, number: int, line: str) -> None:
        if NOT_UTF8 in line and self.table is None:
            # read with the byte replaced (a kernel name, a rule message): kept, and said
            self.warnings.append(InputError(self.path, "a byte that is not UTF-8, read as U+FFFD; the text was "
                                            "edited or re-encoded", line=number))
        if self.table is not None:
            self._table_line(number, line)
            return
        if self.rule is not None:
            if (match := RULE_TEXT.match(line)) and match["text"]:
                self.rule[3].append(match["text"])
                return
            self._end_rule()
        if match := PROCESS.match(line):
            self.process = {"process_id": int(match["pid"]), "process_name": match["name"],
                            "host_name": match["host"]}
        elif match := LAUNCH.match(line):
            launch_id = self.launches[-1].launch_id + 1 + self.lost_launch if self.launches else 0
            self.launches.append(_Launch(dict(match.groupdict()), number, launch_id))
            self.section, self.in_nvtx, self.lost_launch, self.sections = None, False, False, set()
        elif not self.launches or self.lost_launch:
            return                    # program output before the report, or a launch whose line was lost
        elif match := SECTION.match(line):
            if match["section"] in self.sections:
                # a section twice in one launch: the next launch's line was not readable (a message
                # written into it); its rows are left out rather than given to this launch
                self.lost_launch = True
                self.warnings.append(InputError(self.path, "a launch whose launch line cannot be read (left "
                                                f"out); the section {match['section']!r} repeats here", number))
                return
            self.sections.add(match["section"])
            self.section, self.in_nvtx = match["section"], False
        elif DASHES.match(line) and self.section is not None and not self.rules_started():
            self.table = [m.start() for m in re.finditer(r"-+", line)]
            self.table_part, self.table_line, self.table_known = 1, number, True
        elif match := RULE.match(line):
            self.rule = [match["type"], None, None, []]
            if speedup := SPEEDUP.match(match["text"]):
                self.rule[1] = (speedup["kind"] or "global").lower()
                self.rule[2] = speedup["value"]
            else:
                self.rule[3].append(match["text"])
        elif match := NVTX_THREAD.match(line):
            self.in_nvtx, self.nvtx_domain = True, ""
            self.launches[-1].nvtx_thread = match["thread"]
        elif self.in_nvtx and (match := NVTX_RANGE.match(line)):
            self.launches[-1].nvtx.append((self.nvtx_domain, match["text"]))
        elif self.in_nvtx and (match := NVTX_DOMAIN.match(line)):
            self.nvtx_domain = match["domain"]
        else:
            self.in_nvtx = False

    def rules_started(self) -> bool:
        """A border after a section's rules separates two rules; a table comes before them."""
        return bool(self.rules) and self.rules[-1][0] == self._launch_id() \
            and self.rules[-1][-1] == self.section

    def _table_line(self, number: int, line: str) -> None:
        if DASHES.match(line):
            self.table_part += 1
            if self.table_part == 3:
                self.table = None
            return
        if captured_text.is_tool_message(line):
            return            # ncu's own ==PROF== / ==WARNING== lines between two rows
        if LAUNCH.match(line) or SECTION.match(line):
            # the table's closing border was lost (a message written into it): the table ends here
            self.warnings.append(InputError(self.path, f'the "{self.section}" table has no closing border',
                                            self.table_line))
            self.table = None
            self._line(number, line)
            return
        cells = tuple(line[start:end].strip() for start, end in zip(self.table, [*self.table[1:], None]))
        if self.table_part == 1:
            # another kind of table (a section this reader does not know): its rows are not metrics
            self.table_known = cells == TABLE_HEADER
            return
        if not self.table_known:
            return
        if self.table_part != 2 or not line.startswith("    ") or not line.strip() \
                or len(cells) != 3 or not VALUE.match(cells[2]):
            # anything else in the value column is text written into the row
            self.warnings.append(InputError(self.path, f'a line that does not fit the "{self.section}" table '
                                            "(left out); the text was edited, or something else was written "
                                            "into it", line=number))
            return
        name, unit, value = cells
        if NOT_UTF8 in line:
            # a byte that is not UTF-8 (decoded as U+FFFD): the label no longer names its metric
            self.warnings.append(InputError(self.path, f'a row of the "{self.section}" table with a byte that is not '
                                            "UTF-8 (left out); the text was edited or re-encoded", line=number))
            return
        if ncu_csv.LOCALIZED_NUMBER.match(value):
            self.warnings.append(InputError(self.path, f"{name}: a number printed in a locale's format ({value!r}), "
                                            f"not ncu's: left out; {ncu_csv.LOCALIZED_FIX}", line=number))
            return
        if problem := metric_cell_problem(value, unit):
            column, why = problem
            self.warnings.append(InputError(self.path, f'the "{self.section}" table, {name}, {column}: {why}: '
                                            "stored as NULL", line=number))
            value = None
        self.metrics.append((self._launch_id(), self.section, name, unit, value))

    def _end_rule(self) -> None:
        if self.rule is None:
            return
        rule_type, speedup_type, speedup, text = self.rule
        self.rule = None
        section = section_ids().get(self.section or "", self.section)
        # one space between words, as the details CSV reader keeps (ncu's wrapping loses double spaces)
        description = re.sub(" {2,}", " ", " ".join(text))
        # the last element is the section label, for rules_started (dropped below)
        self.rules.append((self._launch_id(), section, rule_name(section or "", description), rule_type,
                           description, speedup_type, speedup, self.section))

    def _launch_row(self, launch: _Launch) -> tuple:
        f = launch.fields
        nvtx = None
        if launch.nvtx_thread is not None:
            # in the details CSV's own layout: thread, then each open range quoted as "domain:message"
            nvtx = launch.nvtx_thread + "  " + "  ".join(f'"{d}:{t}"' for d, t in launch.nvtx) + " "
        return (launch.launch_id, f["name"], self.process.get("process_id"), self.process.get("process_name"),
                self.process.get("host_name"), int(f["context"]), int(f["stream"]),
                int(f["device"]) if f["device"] is not None else None, f["cc"],
                f"({f['block']})", f"({f['grid']})", nvtx, None)

    def _reject_cut_last_launch(self) -> None:
        """The text cut between two sections (or tables) of its last launch: that launch has only a
        leading part of the (section, metric) rows every other launch of its compute capability has."""
        rows: dict[int, list[tuple[str, str]]] = {}
        for launch_id, section, name, _, _ in self.metrics:
            rows.setdefault(launch_id, []).append((section, name))
        last = self.launches[-1]
        if any((w.line or 0) >= last.line for w in self.warnings):
            return            # rows of the last launch were left out with a warning: not a cut
        cc = last.fields["cc"]
        others = {tuple(rows.get(launch.launch_id, [])) for launch in self.launches[:-1] if launch.fields["cc"] == cc}
        if len(others) != 1:
            return
        full, mine = next(iter(others)), tuple(rows.get(last.launch_id, []))
        if len(mine) < len(full) and full[:len(mine)] == mine:
            raise InputError(self.path, f"the last launch has {len(mine)} of the {len(full)} metric rows every "
                             "other launch has: " + TRUNCATED.format(what="its report"), line=last.line)

