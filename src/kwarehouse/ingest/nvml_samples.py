"""kwh's NVML sample file: what `kwh profile` writes while the profiled command runs (pynvml, one line per
GPU every DEFAULT_INTERVAL_MS), as CSV or JSON lines. The README's "GPU telemetry" section documents it.

CSV: a header naming the columns (any of COLUMNS, in any order; timestamp_ns and gpu_index required),
then one line per GPU per sample; an empty cell is a missing value:

    timestamp_ns,gpu_index,sm_clock_mhz,mem_clock_mhz,power_mw,gpu_util_pct,mem_util_pct,temperature_c,throttle_reasons
    1795461081785672014,0,345,2619,70773,0,0,28,1

JSON lines: one object per line with the same keys (null = missing):

    {"timestamp_ns": 1795461081785672014, "gpu_index": 0, "sm_clock_mhz": 345, "power_mw": 70773}

timestamp_ns is time.time_ns() when the sample was read (ns since the Unix epoch, UTC). A column kwh
does not know is an error on line 1: the format is kwh's own, so an unknown name is a typo or a
newer writer, not something to guess at. A sample line with bytes that are not UTF-8 is left out
with a warning (telemetry.read_lines): its GPU's uuid or name cannot be read exactly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import ClassVar

from kwarehouse.errors import InputError
from kwarehouse.ingest import base, telemetry
from kwarehouse.ingest.base import ReadResult
from kwarehouse.ingest.nvidia_smi import TRUNCATED

SOURCE = "nvml-samples"
# Every column a sample file may have, in the order kwh profile writes them. The first two are
# required; identity columns (gpu_uuid, gpu_name) are text; the rest are numbers in the unit their
# suffix names (NVML's own units: MHz, mW, %, degrees C, bytes; throttle_reasons is NVML's
# clocks-event-reasons bitmask). sm/tensor/dram activity and SM occupancy are NVML GPM metrics
# (Hopper and later), the same quantities as DCGM's profiling fields, in %.
COLUMNS = ("timestamp_ns", "gpu_index", "gpu_uuid", "gpu_name", "sm_clock_mhz", "mem_clock_mhz", "power_mw",
           "gpu_util_pct", "mem_util_pct", "temperature_c", "memory_used_bytes", "throttle_reasons",
           "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
REQUIRED = ("timestamp_ns", "gpu_index")
IDENTITY = ("timestamp_ns", "gpu_index", "gpu_uuid", "gpu_name")
DEFAULT_INTERVAL_MS = 100
# Column suffix -> unit as printed (converted to the base unit by telemetry.UNITS).
SUFFIX_UNITS = {"_mhz": "MHz", "_mw": "mW", "_pct": "%", "_c": "C", "_bytes": "byte"}


def unit_of(column: str) -> str | None:
    if column == "throttle_reasons":
        return "bitmask"
    return next((unit for suffix, unit in SUFFIX_UNITS.items() if column.endswith(suffix)), None)


class NvmlSamples:
    name: ClassVar[str] = SOURCE

    def sniff(self, path: Path, head: bytes) -> bool:
        first = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].strip()
        if first.startswith(b"{"):
            return b'"timestamp_ns"' in first and b'"gpu_index"' in first
        return first.startswith(b"timestamp_ns,") and b"gpu_index" in first

    def read(self, path: Path) -> ReadResult:
        base.refuse_oversized(path)
        lines, undecodable = telemetry.read_lines(path)
        if lines and not lines[-1].endswith("\n"):
            raise InputError(path, TRUNCATED, len(lines))
        numbered = [(n, line.rstrip("\r\n")) for n, line in enumerate(lines, 1) if line.strip()]
        if not numbered:
            raise InputError(path, "no samples")
        warnings = [telemetry.not_utf8(path, n) for n, _ in numbered[1:] if n in undecodable]
        if numbered[0][0] in undecodable:
            raise InputError(path, "the first line has bytes that are not UTF-8; is this an NVML sample file?",
                             numbered[0][0])
        numbered = [(n, text) for n, text in numbered if n not in undecodable]
        records = self._json(path, numbered) if numbered[0][1].lstrip().startswith("{") else self._csv(path, numbered)
        rows = []
        for number, record in records:
            unknown = sorted(set(record) - set(COLUMNS))
            if unknown:
                raise InputError(path, f"unknown column {unknown[0]!r}; an NVML sample file has "
                                       f"{', '.join(COLUMNS)} (kwarehouse.ingest.nvml_samples.COLUMNS)", number)
            missing = [c for c in REQUIRED if record.get(c) in (None, "")]
            if missing:
                raise InputError(path, f"no {missing[0]}; every sample needs {' and '.join(REQUIRED)}", number)
            identity = {"timestamp_ns": _integer(path, number, "timestamp_ns", record["timestamp_ns"]),
                        "gpu_index": _integer(path, number, "gpu_index", record["gpu_index"]),
                        "gpu_uuid": record.get("gpu_uuid") or None, "gpu_name": record.get("gpu_name") or None}
            for column in COLUMNS:
                if column in IDENTITY or column not in record:
                    continue
                raw = record[column]
                value = None if raw in (None, "") else _number(path, number, column, raw)
                rows.append({"source": SOURCE, "line": number, **identity, "pci_bus_id": None, "process_id": None,
                             "process_name": None, "field": telemetry.field_name(SOURCE, column),
                             "source_field": column,
                             "value": None if value is None else telemetry.convert(value, unit_of(column))[0],
                             "unit": telemetry.base_unit(unit_of(column)), "value_text": None})
        samples = telemetry.frame(path, rows, warnings)
        return ReadResult(path=path, format=self.name, page="samples", tool="telemetry", samples=samples,
                          gpu_name=telemetry.first_gpu_name(samples), warnings=warnings)

    @staticmethod
    def _csv(path: Path, numbered: list[tuple[int, str]]) -> list[tuple[int, dict]]:
        header = next(csv.reader([numbered[0][1]]))
        unknown = sorted(set(header) - set(COLUMNS))
        if unknown:
            raise InputError(path, f"unknown column {unknown[0]!r}; an NVML sample file has "
                                   f"{', '.join(COLUMNS)} (kwarehouse.ingest.nvml_samples.COLUMNS)", numbered[0][0])
        records = []
        for number, text in numbered[1:]:
            cells = next(csv.reader([text]))
            if len(cells) != len(header):
                raise InputError(path, f"{len(cells)} fields where the header has {len(header)}", number)
            records.append((number, dict(zip(header, cells))))
        return records

    @staticmethod
    def _json(path: Path, numbered: list[tuple[int, str]]) -> list[tuple[int, dict]]:
        records = []
        for number, text in numbered:
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"not a JSON object ({exc.msg})", number) from None
            if not isinstance(record, dict):
                raise InputError(path, "not a JSON object", number)
            records.append((number, record))
        return records


def _number(path: Path, number: int, column: str, raw) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise InputError(path, f"{column} {raw!r} is not a number", number)
    try:
        return float(raw)
    except ValueError:
        raise InputError(path, f"{column} {raw!r} is not a number", number) from None


def _integer(path: Path, number: int, column: str, raw) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().isdigit():
        return int(raw)
    raise InputError(path, f"{column} {raw!r} is not a whole number", number)
