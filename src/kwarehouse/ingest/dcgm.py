"""`dcgmi dmon -e <field ids> [-d ms] [-c count]` text, as DCGM's dcgmi prints it (dcgmi/DeviceMonitor.cpp
of NVIDIA/DCGM; no DCGM install was at hand, so the layout follows that source and the committed
capture cited in tests/data/dcgmi-dmon/README.md):

    #Entity   SMACT        SMOCC        TENSO        DRAMA
    ID
    GPU 0     0.512        0.204        0.101        0.350

A '#Entity' line of field short names (dcgm_fields.cpp: GRACT, SMACT, SMOCC, TENSO, DRAMA, SMCLK,
POWER, ...) and an 'ID' line of their units, printed again every 14 samples; then one line per
entity per sample: the entity ('GPU 0'; MIG instances 'GPU-I n' / 'GPU-CI n'), then the values.
Profiling fields (1001-1014) are ratios 0-1 with 3 decimals; kwh stores them as % (x100). 'N/A'
(DCGM's blank value, e.g. the first sample after the host engine starts) is a missing value.
dcgmi prints no time on its lines: such samples land in gpu_samples with no timestamp_ns and cannot
be joined to a run's time window. A sample line with bytes that are not UTF-8 is left out with a
warning (telemetry.read_lines).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from kwarehouse.errors import InputError
from kwarehouse.ingest import base, telemetry
from kwarehouse.ingest.base import ReadResult
from kwarehouse.ingest.nvidia_smi import TRUNCATED

SOURCE = "dcgmi-dmon"
ROW = re.compile(r"^(?P<entity>GPU|GPU-I|GPU-CI|vGPU|Switch)\s+(?P<id>\d+)\s+(?P<values>.*?)\s*$")
# What dcgmi prints when ^C stops it (sic, DeviceMonitor.cpp).
STOPPED = "dmon was stopped"
# Fields that dcgmi prints as a ratio 0-1 (DCGM_FT_DOUBLE profiling fields): stored as %.
RATIO_FIELDS = {"GRACT", "SMACT", "SMOCC", "TENSO", "DRAMA", "FP64A", "FP32A", "FP16A", "TIMMA", "THMMA"}
# Units of the other fields kwh knows (the unit line prints " C", " W" or nothing for most).
FIELD_UNITS = {"SMCLK": "MHz", "MMCLK": "MHz", "TMPTR": "C", "POWER": "W", "GPUTL": "%", "MCUTL": "%",
               "FBTTL": "MiB", "FBFRE": "MiB", "FBUSD": "MiB", "PCITX": "B/s", "PCIRX": "B/s",
               "NVLTX": "B/s", "NVLRX": "B/s"}


class DcgmiDmon:
    name: ClassVar[str] = SOURCE

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip(b"\xef\xbb\xbf").lstrip()
        return text.startswith(b"#Entity") and b"\nID" in text[:4096]

    def read(self, path: Path) -> ReadResult:
        base.refuse_oversized(path)
        lines, undecodable = telemetry.read_lines(path)
        if lines and not lines[-1].endswith("\n"):
            raise InputError(path, TRUNCATED, len(lines))
        names: list[str] | None = None
        rows, warnings = [], []
        for number, raw in enumerate(lines, 1):
            text = raw.rstrip("\r\n")
            stripped = text.strip()
            if not stripped or stripped.startswith(STOPPED):
                continue
            if number in undecodable:
                if stripped.startswith("#"):
                    raise InputError(path, "a header line with bytes that are not UTF-8; is this dcgmi dmon output?",
                                     number)
                warnings.append(telemetry.not_utf8(path, number))
                continue
            if stripped.startswith("#Entity"):
                names = stripped.split()[1:]
                continue
            if stripped == "ID" or stripped.startswith("ID "):
                continue
            match = ROW.match(stripped)
            if match is None:
                raise InputError(path, f"not a dcgmi dmon line: {stripped[:80]!r}", number)
            if names is None:
                raise InputError(path, "a sample line before the '#Entity' header line", number)
            if match["entity"] != "GPU":
                raise InputError(path, f"{match['entity']} (MIG) rows are not read; monitor whole GPUs "
                                       "(dcgmi dmon -i <gpu ids>)", number)
            values = match["values"].split()
            if len(values) != len(names):
                raise InputError(path, f"{len(values)} values where the '#Entity' line names {len(names)} fields; "
                                       "is the line cut short?", number)
            for short, cell in zip(names, values):
                rows.append(self._sample(path, number, int(match["id"]), short, cell))
        if names is None:
            raise InputError(path, "no '#Entity' header line")
        samples = telemetry.frame(path, rows, warnings)
        return ReadResult(path=path, format=self.name, page="samples", tool="telemetry", samples=samples,
                          warnings=warnings)

    @staticmethod
    def _sample(path: Path, number: int, gpu: int, short: str, cell: str) -> dict:
        value = None
        if cell not in telemetry.MISSING:
            try:
                value = float(cell)
            except ValueError:
                raise InputError(path, f"{cell!r} in column {short} is not a number", number) from None
        if short in RATIO_FIELDS:
            value, unit = (None if value is None else value * 100.0), "%"
        else:
            unit = telemetry.base_unit(FIELD_UNITS.get(short))
            value = None if value is None else telemetry.convert(value, FIELD_UNITS.get(short))[0]
        return {"source": SOURCE, "line": number, "timestamp_ns": None, "gpu_index": gpu, "gpu_uuid": None,
                "gpu_name": None, "pci_bus_id": None, "process_id": None, "process_name": None,
                "field": telemetry.field_name(SOURCE, short), "source_field": short, "value": value,
                "unit": unit, "value_text": None}
