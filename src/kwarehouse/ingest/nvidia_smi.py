"""nvidia-smi logs: `--query-gpu=... --format=csv[,nounits] -l/-lms N` CSV, and the `dmon` / `pmon` text tables.

--query-gpu CSV: a header of the queried fields as nvidia-smi prints them ("timestamp, name, index,
  utilization.gpu [%], clocks.current.sm [MHz], ..."), then one line per GPU per sample, cells
  separated by ", ". With `nounits` the header keeps its [unit] and the cells drop it. Any field list
  is read: identity fields (timestamp, index, name, uuid, pci.bus_id) become columns, every other field
  a sample row (named by telemetry_fields.csv, else as printed). Without a header (`noheader`) the
  fields cannot be known: the reader asks for the header instead of guessing. The timestamp
  ("2026/11/23 15:05:56.473") is the host's local time without a zone: kwh takes it as UTC.
dmon: '# gpu pwr gtemp ... / # Idx W C ...' header lines (repeated now and then), then one line per
  GPU per sample (`-d` seconds apart); with `-o DT` two leading Date (YYYYMMDD) and Time (HH:MM:SS)
  columns give each line's time (host time, taken as UTC); without them the samples have no time.
pmon: the same layout, one line per process ('# gpu pid type sm mem ... command'), '-' where the GPU
  ran no process in that sample (such lines are passed over).

A sample line with bytes that are not UTF-8 is left out with a warning (telemetry.read_lines), and
so is a dmon/pmon cell that is not the whole number those tables print ("2.619" in a localized copy
may be 2.619 or 2,619: stored NULL with a warning, never as either guess).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from kwarehouse.errors import InputError
from kwarehouse.ingest import base, telemetry
from kwarehouse.ingest.base import ReadResult

QUERY_SOURCE, DMON_SOURCE, PMON_SOURCE = "nvidia-smi-query", "nvidia-smi-dmon", "nvidia-smi-pmon"
HEADER_CELL = re.compile(r"^(?P<name>[a-z][a-z0-9_.]*)(?:\s*\[(?P<unit>[^\[\]]+)\])?$")
TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")
# A line of a headerless log (--format=csv,noheader) begins with the timestamp when it was queried.
HEADERLESS = re.compile(rb"^\s*\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}\.\d{3}, ")
# Query fields that identify the GPU: columns of every sample row, not samples themselves.
IDENTITY = {"timestamp": "timestamp_ns", "index": "gpu_index", "name": "gpu_name", "gpu_name": "gpu_name",
            "uuid": "gpu_uuid", "gpu_uuid": "gpu_uuid", "pci.bus_id": "pci_bus_id", "gpu_bus_id": "pci_bus_id"}
# Units of fields whose header carries none.
DEFAULT_UNITS = {"gpu_temperature": "C", "memory_temperature": "C", "throttle_reasons": "bitmask"}
TRUNCATED = ("the file ends in the middle of a line (still being written or copied, or cut short?); "
             "ingest it once complete, or delete the incomplete last line")
NO_HEADER = ("no header line: a --format=csv,noheader log does not say which fields its columns are; "
             "log with --format=csv (or csv,nounits), which prints the field names first")


# What dmon and pmon print in a value cell: a whole number (NVML's integer readings), or a bitmask in hex.
WHOLE_NUMBER = re.compile(r"^-?(\d+|0x[0-9a-fA-F]+)$")


def _lines(path: Path) -> tuple[list[str], set[int]]:
    base.refuse_oversized(path)
    return telemetry.read_lines(path)


def _ends_cut(path: Path, lines: list[str]) -> None:
    if lines and not lines[-1].endswith("\n"):
        raise InputError(path, TRUNCATED, len(lines))


def _result(path: Path, name: str, rows: list[dict], warnings: list[str]) -> ReadResult:
    samples = telemetry.frame(path, rows, warnings)
    return ReadResult(path=path, format=name, page="samples", tool="telemetry", samples=samples,
                      gpu_name=telemetry.first_gpu_name(samples), warnings=warnings)


class NvidiaSmiQuery:
    name: ClassVar[str] = QUERY_SOURCE

    def sniff(self, path: Path, head: bytes) -> bool:
        first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        if HEADERLESS.match(head.lstrip(b"\xef\xbb\xbf")):
            return True
        cells = [c.strip() for c in first.split(",")]
        # nvidia-smi separates cells with ", " (kwh's NVML sample file, a plain CSV, does not)
        if len(cells) < 2 or first.count(", ") != len(cells) - 1 or not all(HEADER_CELL.match(c) for c in cells):
            return False
        names = {HEADER_CELL.match(c)["name"] for c in cells}
        known = {f for s, f in telemetry.field_names() if s == QUERY_SOURCE} | set(IDENTITY)
        return bool(names & known) and bool(names - {"name", "index"})

    def read(self, path: Path) -> ReadResult:
        lines, undecodable = _lines(path)
        numbered = [(n, line.rstrip("\r\n")) for n, line in enumerate(lines, 1) if line.strip()]
        if not numbered:
            raise InputError(path, "no header line and no samples")
        if numbered[0][0] in undecodable:
            raise InputError(path, "the header line has bytes that are not UTF-8; is this an nvidia-smi log?",
                             numbered[0][0])
        if TIMESTAMP.match(numbered[0][1].split(",")[0].strip()):
            raise InputError(path, NO_HEADER, numbered[0][0])
        header_text = numbered[0][1]
        header = [HEADER_CELL.match(c.strip()) for c in header_text.split(",")]
        if not all(header):
            bad = next(c for c, m in zip(header_text.split(","), header) if not m)
            raise InputError(path, f"header cell {bad.strip()!r} is not an nvidia-smi field name", numbered[0][0])
        columns = [(m["name"], m["unit"]) for m in header]
        # a field named twice (a log written by a script that listed it twice, or a copy pasted
        # together) is read once: its cells must agree, else the line is a warning
        first_of = {}
        for index, column in enumerate(columns):
            first_of.setdefault(column, index)
        repeats = [(index, first_of[column]) for index, column in enumerate(columns) if first_of[column] != index]
        _ends_cut(path, lines)
        with_units: dict[int, tuple[bool, int]] = {}   # column -> (cells carry the unit, line that decided)
        rows, warnings = [], []
        for number, text in numbered[1:]:
            if text == header_text:       # a log appended to by a second nvidia-smi run repeats the header
                continue
            if number in undecodable:
                warnings.append(telemetry.not_utf8(path, number))
                continue
            cells = [c.strip() for c in text.split(",")]
            if len(cells) != len(columns):
                raise InputError(path, f"{len(cells)} fields where the header has {len(columns)}; "
                                       "is the line cut short or two lines run together?", number)
            differing = [columns[index][0] for index, first in repeats if cells[index] != cells[first]]
            if differing:
                warnings.append(str(InputError(path, f"column {differing[0]} is in the header twice and its two "
                                               "cells differ on this line (left out)", number)))
                continue
            identity = {"timestamp_ns": None, "gpu_index": None, "gpu_name": None, "gpu_uuid": None,
                        "pci_bus_id": None}
            values = []
            for index, ((name, unit), cell) in enumerate(zip(columns, cells)):
                if repeats and first_of[(name, unit)] != index:
                    continue
                if name in IDENTITY:
                    identity[IDENTITY[name]] = self._identity(path, number, name, cell)
                    continue
                values.append((name, unit, cell, self._value(path, number, index, name, unit, cell, with_units)))
            for name, unit, cell, value in values:
                field = telemetry.field_name(QUERY_SOURCE, name)
                unit = unit or DEFAULT_UNITS.get(field)
                rows.append({"source": QUERY_SOURCE, "line": number, **identity, "process_id": None,
                             "process_name": None, "field": field, "source_field": name,
                             "value": None if value is None else telemetry.convert(value, unit)[0],
                             "unit": telemetry.base_unit(unit),
                             "value_text": None if value is not None or cell in telemetry.MISSING else cell})
        return _result(path, self.name, rows, warnings)

    @staticmethod
    def _identity(path: Path, number: int, name: str, cell: str):
        if cell in telemetry.MISSING:
            return None
        if name == "timestamp":
            if not TIMESTAMP.match(cell):
                raise InputError(path, f"timestamp {cell!r} is not nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm", number)
            pattern = "%Y/%m/%d %H:%M:%S.%f" if "." in cell else "%Y/%m/%d %H:%M:%S"
            return telemetry.utc_ns(datetime.strptime(cell, pattern))
        if name == "index":
            if not cell.isdigit():
                raise InputError(path, f"GPU index {cell!r} is not a number", number)
            return int(cell)
        return cell

    @staticmethod
    def _value(path: Path, number: int, index: int, name: str, unit: str | None, cell: str,
               with_units: dict[int, tuple[bool, int]]) -> float | None:
        """The cell's number (None for [N/A] or text); every cell of a column must be written alike:
        all with the header's unit (--format=csv) or all without (nounits)."""
        if cell in telemetry.MISSING:
            return None
        text = cell
        if unit:
            carries = cell.endswith(" " + unit)
            decided = with_units.setdefault(index, (carries, number))
            if decided[0] != carries:
                looks = f"'<number> {unit}'" if decided[0] else "a bare number"
                raise InputError(path, f"units mixed in column {name} [{unit}]: {cell!r}, where line {decided[1]} "
                                       f"had {looks}; one log per --format", number)
            text = cell[: -len(unit) - 1] if carries else cell
        try:
            return telemetry.number(text)
        except ValueError:
            if unit:
                raise InputError(path, f"{cell!r} in column {name} [{unit}] is not a number in {unit}", number) from None
            return None    # a text field (pstate "P0", driver_version): kept as value_text


class _Table:
    """dmon and pmon: '#'-prefixed name and unit lines, then whitespace-separated values."""

    name: ClassVar[str]
    key: ClassVar[str] = "pid"  # the column only pmon has

    def sniff(self, path: Path, head: bytes) -> bool:
        first, _, rest = head.lstrip(b"\xef\xbb\xbf").partition(b"\n")
        second = rest.split(b"\n", 1)[0]
        names = first.decode("utf-8", "replace").lstrip("#").split()
        units = second.decode("utf-8", "replace")
        return (first.startswith(b"#") and units.startswith("#") and "gpu" in names
                and ("Idx" in units.split()) and (self.key in names) == (self.name == PMON_SOURCE))

    def read(self, path: Path) -> ReadResult:
        lines, undecodable = _lines(path)
        _ends_cut(path, lines)
        names: list[str] | None = None
        units: list[str] | None = None
        rows: list[dict] = []
        warnings: list[str] = []
        for number, raw in enumerate(lines, 1):
            text = raw.rstrip("\r\n")
            if not text.strip():
                if text and names is not None:
                    # the tables print no line of blanks: a sample line whose every cell was emptied
                    warnings.append(str(InputError(path, "a line of blanks among the samples (left out): a sample "
                                                   "line with every value missing?", number)))
                continue
            if number in undecodable:
                if text.startswith("#"):
                    raise InputError(path, "a header line with bytes that are not UTF-8; is this "
                                     f"{self.name.replace('-', ' ')} output?", number)
                warnings.append(telemetry.not_utf8(path, number))
                continue
            if text.startswith("#"):
                tokens = text.lstrip("#").split()
                if names is None or (units is not None and "Idx" not in tokens):
                    names, units = tokens, None
                else:
                    units = tokens
                continue
            if names is None or units is None or len(units) != len(names):
                raise InputError(path, f"a sample line before the '# gpu ...' and '# Idx ...' header lines; "
                                       f"is this {self.name.replace('-', ' ')} output complete?", number)
            cells = text.split()
            if len(cells) != len(names):
                # cells are told apart only by blanks: with one more or one less, which value is which
                # column cannot be known (a number written "2 619", a line cut or run into another)
                warnings.append(str(InputError(path, f"{len(cells)} values where the header names {len(names)} "
                                               "columns (left out): a line cut short, run into another, or a "
                                               "number or command name with a blank in it?", number)))
                continue
            rows.extend(self._samples(path, number, dict(zip(names, cells)), dict(zip(names, units)), warnings))
        if names is None:
            raise InputError(path, "no '# gpu ...' header line")
        return _result(path, self.name, rows, warnings)

    def _samples(self, path: Path, number: int, cells: dict[str, str], units: dict[str, str],
                 warnings: list[str]) -> list[dict]:
        identity = {"timestamp_ns": _dmon_time(path, number, cells.get("Date"), cells.get("Time")),
                    "gpu_index": _int(path, number, "gpu", cells["gpu"]), "gpu_name": None, "gpu_uuid": None,
                    "pci_bus_id": None, "process_id": None, "process_name": None}
        if self.name == PMON_SOURCE:
            if cells.get("pid") in telemetry.MISSING:
                return []            # the GPU ran no process in this sample
            identity["process_id"] = _int(path, number, "pid", cells["pid"])
            identity["process_name"] = cells.get("command")
        rows = []
        for name, cell in cells.items():
            if name in ("gpu", "Date", "Time", "pid", "command"):
                continue
            field = telemetry.field_name(self.name, name)
            unit = units.get(name)
            unit = None if unit in ("#", "name") else unit
            value = None
            if cell not in telemetry.MISSING and name != "type":
                if WHOLE_NUMBER.match(cell):
                    value = telemetry.number(cell)
                else:
                    # "2.619" in a copy written with a German locale is 2,619 MHz, in another 2.619:
                    # neither is guessed
                    warnings.append(str(InputError(path, f"{cell!r} in column {name} is not the whole number "
                                                   f"{self.name.replace('-', ' ')} prints (a localized or edited "
                                                   "copy?); stored as missing", number)))
            rows.append({"source": self.name, "line": number, **identity, "field": field, "source_field": name,
                         "value": None if value is None else telemetry.convert(value, unit)[0],
                         "unit": telemetry.base_unit(unit),
                         "value_text": cell if name == "type" and cell not in telemetry.MISSING else None})
        return rows


class NvidiaSmiDmon(_Table):
    name: ClassVar[str] = DMON_SOURCE


class NvidiaSmiPmon(_Table):
    name: ClassVar[str] = PMON_SOURCE


def _int(path: Path, number: int, column: str, cell: str) -> int:
    if not cell.isdigit():
        raise InputError(path, f"{column} {cell!r} is not a number", number)
    return int(cell)


def _dmon_time(path: Path, number: int, day: str | None, clock: str | None) -> int | None:
    """dmon -o DT: Date YYYYMMDD and Time HH:MM:SS (host time, taken as UTC); -o T alone has no date."""
    if day is None or clock is None:
        return None
    try:
        return telemetry.utc_ns(datetime.strptime(f"{day} {clock}", "%Y%m%d %H:%M:%S"))
    except ValueError:
        raise InputError(path, f"date/time {day} {clock!r} is not dmon's YYYYMMDD HH:MM:SS", number) from None
