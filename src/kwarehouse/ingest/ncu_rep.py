"""Nsight Compute report files (.ncu-rep), read directly through NVIDIA's `ncu_report` Python module
(PyPI package ncu-report; `pip install "kwarehouse[ncu-rep]"`).

Every action (profiled kernel) of every range becomes one launch, numbered across ranges in order as
ncu's own CSV export numbers them (ID), with every metric (value and unit as stored, full precision)
and its NVTX push/pop state. The rows are those of the raw CSV page of the same report; the report
API does not expose the process id, process name or host name, so those stay empty, and ncu's rule
results are not read from it (export the details page for them).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import cells, ncu_csv
from kwarehouse.ingest.base import LAUNCH_COLUMNS, METRIC_COLUMNS, ReadResult

MAGIC = b"NVR\x00"
# Internal breakdown metrics the report keeps for its charts; the CSV raw page does not list them.
SKIPPED_PREFIXES = ("breakdown:",)
NO_DATA = "no data"
INSTALL_HINT = 'install the optional reader with: pip install "kwarehouse[ncu-rep]" (NVIDIA\'s ncu-report package)'


def _module():
    try:
        import ncu_report
    except ImportError:
        return None
    return ncu_report


class NcuRep:
    name: ClassVar[str] = "ncu-rep"

    def sniff(self, path: Path, head: bytes) -> bool:
        return head.startswith(MAGIC)

    def read(self, path: Path) -> ReadResult:
        ncu_report = _module()
        if ncu_report is None:
            raise InputError(path, f"an Nsight Compute report file; {INSTALL_HINT}, or export it with "
                             "ncu --import FILE --csv --page raw")
        declared = declared_results(path)
        try:
            context = ncu_report.load_report(str(path))
        except Exception as exc:   # the module raises its own exception types
            detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise InputError(path, f"ncu_report could not load it ({detail}); is the file complete?") from None
        launches, metrics, gpu = [], [], None
        launch_id = 0
        for range_index in range(context.num_ranges()):
            profiled_range = context.range_by_idx(range_index)
            for action_index in range(profiled_range.num_actions()):
                action = profiled_range.action_by_idx(action_index)
                values = _metrics(ncu_report, action)
                gpu = gpu or values.get("device__attribute_display_name", (None, None))[0]
                launches.append(_launch(ncu_report, action, launch_id, values))
                metrics.extend((launch_id, None, name, unit, text) for name, (text, unit) in values.items()
                               if not name.startswith(SKIPPED_PREFIXES))
                launch_id += 1
        if not launches:
            raise InputError(path, f"the report holds no kernel results; truncated? {CUT_HINT}")
        if declared is not None and launch_id != declared:
            raise InputError(path, f"ncu_report read {launch_id} of the {declared} kernel results the file "
                             f"declares; {CUT_HINT}")
        # kernel_mangled rides along as an extra launch column; the pipeline keeps it beside the name
        schema = {**LAUNCH_COLUMNS, "kernel_mangled": pl.String}
        # a report has no lines: a warning names the metric (as its column) and the launch
        warnings: list[str] = []
        frame = cells.checked_metrics(path, pl.DataFrame(metrics, schema=METRIC_COLUMNS, orient="row"),
                                      lambda at: [(None, metrics[p][2], None, metrics[p][2] + " unit") for p in at],
                                      warnings)
        return ReadResult(path=path, format=self.name, page="raw",
                          launches=pl.DataFrame(launches, schema=schema),
                          # the API's values are in ncu's base units, errata and all (ncu_base_unit_errata.csv)
                          metrics=ncu_csv.undo_base_unit_errata(frame),
                          gpu_name=gpu, base_units=True, warnings=warnings)


CUT_HINT = "if it is still being copied, wait for the copy to finish; otherwise re-export it with ncu -o"


def declared_results(path: Path) -> int | None:
    """How many profile results the report file declares, after checking that its blocks fill the file
    exactly; InputError when the file ends inside a block (cut short), None for a layout not known.

    A report is "NVR\\0", a u32-sized FileHeader message, then blocks to the end of the file: a u32
    size, a BlockHeader protobuf message (NumSources = 1, NumResults = 2, PayloadSize = 5; ncu's
    extras/FileFormat/ProfilerReport.proto) and PayloadSize bytes of sources and results. Only the
    headers are read (seeking past payloads), so this costs a few reads however large the file.
    A file cut exactly at a block boundary reads as a complete shorter report (fewer launches).
    """
    size = path.stat().st_size
    with open(path, "rb") as handle:
        def u32(at: int) -> int | None:
            handle.seek(at)
            raw = handle.read(4)
            return struct.unpack("<I", raw)[0] if len(raw) == 4 else None
        header = u32(len(MAGIC))
        if header is None:
            raise InputError(path, f"the report ends inside its file header; {CUT_HINT}")
        at, results = len(MAGIC) + 4 + header, 0
        while at < size:
            block = u32(at)
            if block is None or at + 4 + block > size:
                raise InputError(path, f"the report ends inside a block header at byte {at:,} of {size:,}; "
                                 f"{CUT_HINT}")
            handle.seek(at + 4)
            fields = _varint_fields(handle.read(block))
            if fields is None or 5 not in fields:
                return None      # not the layout above: leave the judgement to ncu_report
            at += 4 + block + fields[5]
            if at > size:
                raise InputError(path, f"the report is cut short: {size:,} bytes where its blocks need {at:,}; "
                                 f"{CUT_HINT}")
            results += fields.get(2, 0)
        if at != size:
            raise InputError(path, f"the report ends inside its file header; {CUT_HINT}")
    return results


def _varint_fields(message: bytes) -> dict[int, int] | None:
    """The varint fields of a protobuf message (field number -> value), or None when it does not parse."""
    fields, at = {}, 0
    def varint():
        nonlocal at
        value = shift = 0
        while True:
            if at >= len(message) or shift > 63:
                raise ValueError("varint")
            byte = message[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value
    try:
        while at < len(message):
            key = varint()
            number, wire = key >> 3, key & 7
            if wire == 0:
                fields[number] = varint()
            elif wire == 2:
                length = varint()      # read before `at` is, since varint() moves it
                at += length
            elif wire == 1:
                at += 8
            elif wire == 5:
                at += 4
            else:
                return None
            if at > len(message):
                return None
    except ValueError:
        return None
    return fields


def _metrics(ncu_report, action) -> dict[str, tuple[str, str]]:
    """metric name -> (value as text, unit), as the raw CSV page would hold it (full precision)."""
    out = {}
    string_kind = ncu_report.IMetric.ValueKind_STRING
    integer_kinds = (ncu_report.IMetric.ValueKind_UINT32, ncu_report.IMetric.ValueKind_UINT64)
    for name in action.metric_names():
        metric = action.metric_by_name(name)
        if metric is None:
            continue
        kind = metric.kind()
        if not metric.has_value():
            text = NO_DATA     # what the CSV export prints for a metric ncu could not collect
        elif kind == string_kind:
            text = metric.as_string()
        elif kind in integer_kinds:
            text = str(metric.as_uint64())
        else:
            text = repr(metric.as_double())
        out[name] = (text, metric.unit() or "")
    return out


def _launch(ncu_report, action, launch_id: int, values: dict) -> dict:
    def number(name):
        text = values.get(name, (None, None))[0]
        try:
            return int(float(text)) if text is not None else None
        except ValueError:
            return None
    def dims(prefix):
        parts = [number(f"launch__{prefix}_dim_{axis}") for axis in "xyz"]
        return f"({parts[0]}, {parts[1]}, {parts[2]})" if None not in parts else None
    major, minor = number("device__attribute_compute_capability_major"), number(
        "device__attribute_compute_capability_minor")
    return {
        "launch_id": launch_id, "kernel_name": action.name(ncu_report.IAction.NameBase_DEMANGLED),
        "kernel_mangled": action.name(ncu_report.IAction.NameBase_MANGLED),
        "process_id": None, "process_name": None, "host_name": None,
        "context_id": number("launch__context_id"), "stream_id": number("launch__stream_id"),
        "device_id": number("launch__device_id"),
        "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None,
        "block_dims": dims("block"), "grid_dims": dims("grid"),
        "nvtx_push_pop": _nvtx_cell(action), "nvtx_start_end": None,
    }


def _nvtx_cell(action) -> str | None:
    """The action's NVTX push/pop stacks in the CSV export's cell format (without the thread id,
    which the report API does not give), so one parser reads both."""
    state = action.nvtx_state()
    if state is None:
        return None
    ranges = []
    for domain_id in state.domains():
        domain = state.domain_by_id(domain_id)
        for name in domain.push_pop_ranges():
            ranges.append(f'"{domain.name()}:{name}:none:none:none:none:none:none"')
    return "0  " + "  ".join(ranges) + " " if ranges else None
