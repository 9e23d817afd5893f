"""Polluted copies of real torch traces, nsys exports and telemetry logs (issue 31, part 3): what kwh
cannot read exactly is a warning naming the file and line, and is left out or stored NULL, never
stored changed. Each polluted file is derived by code from a real one under tests/data."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from kwarehouse import ingest
from kwarehouse.errors import InputError

DATA = Path(__file__).parent / "data"
TORCH_WARNING = ("/opt/torch/.venv/lib/python3.12/site-packages/torch/profiler/profiler.py:224: UserWarning: "
                 "Warning: Profiler clears events at the end of each cycle.")


def _copy(tmp_path: Path, source: Path, content: bytes, name: str | None = None) -> Path:
    path = tmp_path / (name or source.name)
    path.write_bytes(content)
    return path


def test_a_trace_with_a_warning_line_before_its_json_is_read_whole_with_a_warning(tmp_path):
    """The one-line rank0 trace with a stderr line before it was skipped as "not a profiler export
    (text)"; its JSON is complete, so it is read exactly, the line before it one warning."""
    source = DATA / "multirank-ddp-h200/rank0/rank0.trace.json"
    path = _copy(tmp_path, source, TORCH_WARNING.encode() + b"\n" + source.read_bytes())
    polluted, clean = ingest.read(path), ingest.read(source)
    assert polluted.timeline.equals(clean.timeline) and polluted.gpu_name == clean.gpu_name
    assert len(polluted.warnings) == 1 and polluted.warnings[0].startswith(f"{path}:1: 1 line(s) before")


def test_a_trace_with_a_line_of_text_inside_its_json_is_refused_at_that_line(tmp_path):
    source = DATA / "torch-trace-custom_cupy/trace.json"
    lines = source.read_bytes().split(b"\n")
    path = _copy(tmp_path, source, b"\n".join(lines[:300] + [TORCH_WARNING.encode()] + lines[300:]))
    with pytest.raises(InputError, match=r"trace.json:301: not valid JSON .*A line of other output"):
        ingest.read(path)


def _dmon_with(tmp_path: Path, edit) -> tuple[Path, list[str]]:
    source = DATA / "telemetry-smi-gpt2-h100/nvidia-smi-dmon.txt"
    lines = source.read_text().splitlines(keepends=True)
    lines[5] = edit(lines[5])
    return _copy(tmp_path, source, "".join(lines).encode()), lines


def test_a_dmon_number_with_a_grouping_dot_is_stored_missing_with_a_warning(tmp_path):
    """'2.619' where dmon prints 2619 MHz was stored as 2.619 MHz (2,619,000 Hz)."""
    path, _ = _dmon_with(tmp_path, lambda line: line.replace("   2619 ", "  2.619 ", 1))
    result = ingest.read(path)
    clock = result.samples.filter(line=6, field="memory_clock")
    assert clock["value"].to_list() == [None]
    assert result.warnings == [f"{path}:6: '2.619' in column mclk is not the whole number nvidia smi dmon prints "
                               "(a localized or edited copy?); stored as missing"]
    others = result.samples.filter(field="memory_clock", line=7)["value"].to_list()
    assert others == [2619e6]


def test_a_dmon_line_of_blanks_is_a_warning_not_a_silent_gap(tmp_path):
    path, lines = _dmon_with(tmp_path, lambda line: " " * len(line.rstrip("\n")) + "\n")
    result = ingest.read(path)
    assert result.warnings == [f"{path}:6: a line of blanks among the samples (left out): a sample line with every "
                               "value missing?"]
    assert 6 not in result.samples["line"].to_list() and 7 in result.samples["line"].to_list()


def test_a_dmon_line_with_one_value_too_many_is_left_out_with_a_warning(tmp_path):
    """'2 619' (a French copy) made the line one value longer: every later column shifted by one."""
    path, _ = _dmon_with(tmp_path, lambda line: line.replace("   2619 ", "  2 619 ", 1))
    result = ingest.read(path)
    assert len(result.warnings) == 1 and result.warnings[0].startswith(f"{path}:6: 23 values where the header names 22")
    assert 6 not in result.samples["line"].to_list()


def test_a_pmon_line_with_a_byte_that_is_not_utf8_is_left_out_with_a_warning(tmp_path):
    """The process name 'python3' with a Latin-1 byte inside was stored as 'p\\ufffdython3'."""
    source = DATA / "telemetry-gemm-h100/nvidia-smi-pmon.txt"
    raw = source.read_bytes()
    at = raw.index(b"python3")
    number = raw[:at].count(b"\n") + 1
    path = _copy(tmp_path, source, raw[:at + 1] + b"\xe9" + raw[at + 1:])
    result = ingest.read(path)
    assert result.warnings == [f"{path}:{number}: a line with bytes that are not UTF-8 (left out): its names and "
                               "numbers cannot be read exactly; was the log re-encoded or damaged in a copy?"]
    names = set(result.samples["process_name"].drop_nulls().to_list())
    assert names == set(ingest.read(source).samples["process_name"].drop_nulls().to_list()) and "\ufffd" not in str(names)
    assert number not in result.samples["line"].to_list()


def test_an_nvml_sample_line_with_a_byte_that_is_not_utf8_is_left_out_with_a_warning(tmp_path):
    source = DATA / "profile-h100/conv_quick/discovery/nvml-samples.csv"
    lines = source.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"GPU-", b"G\xe9PU-", 1)
    path = _copy(tmp_path, source, b"\n".join(lines))
    result = ingest.read(path)
    assert len(result.warnings) == 1 and result.warnings[0].startswith(f"{path}:4: a line with bytes that are not UTF-8")
    assert set(result.samples["gpu_uuid"].to_list()) == {"GPU-e11c404d-6750-e350-11fd-766aebec6e70"}
    assert 4 not in result.samples["line"].to_list()


def test_nsys_stats_numbers_with_a_decimal_comma_are_never_read_as_thousands(tmp_path):
    """'17714696,0' (a German copy of 17714696.0 ns) was read as 177146960: the comma taken for a
    thousands separator, and '100,0' % as 1000 %. Now the row is a warning; an nsys console number
    '1,831,281' still reads (test_a_grouped_nsys_number_still_reads)."""
    source = DATA / "nsys-stats-derived-a100/stats_stdout.csv"
    lines = source.read_text().splitlines(keepends=True)
    lines[2] = ('"100,0",88573480,5,"17714696,0","17713960,0",17700808,17733416,"12992,1",'
                '"saxpy(double *, double *, double *, double, int)"\n')
    path = _copy(tmp_path, source, "".join(lines).encode())
    result = ingest.read(path)
    assert len(result.warnings) == 1 and result.warnings[0].startswith(f"{path}:3: ")
    assert "decimal comma" in result.warnings[0] or "is not a number" in result.warnings[0]
    assert result.summaries.filter(report="cuda_gpu_kern_sum").height == 0
    clean = ingest.read(source)
    assert result.timeline.equals(clean.timeline)     # the other reports of the capture are read as before


def test_a_grouped_nsys_number_still_reads():
    from kwarehouse.ingest.nsys_stats_csv import _grouped
    assert _grouped("1,831,281.5") == 1831281.5
    for localized in ("100,0", "88.573,48", "1,83"):
        with pytest.raises(ValueError):
            _grouped(localized)


def _dropped(tmp_path: Path, source: Path, table: str) -> Path:
    path = tmp_path / source.name
    path.write_bytes(source.read_bytes())
    con = sqlite3.connect(path)
    con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    return path


def test_an_nsys_export_without_its_gpu_table_says_the_gpu_is_unknown(tmp_path):
    path = _dropped(tmp_path, DATA / "nsys-sqlite-rtx3090/report1.sqlite", "TARGET_INFO_GPU")
    result = ingest.read(path)
    assert result.gpu_name is None
    assert result.warnings == [f"{path}: no TARGET_INFO_GPU table although the export has kernels: their GPU is "
                               "unknown (stored as 'unknown'); re-export it with nsys export --type sqlite"]


def test_an_nsys_export_with_memcpy_calls_but_no_memcpy_table_says_so(tmp_path):
    source = DATA / "nsys-sqlite-rtx3090/report1.sqlite"
    path = _dropped(tmp_path, source, "CUPTI_ACTIVITY_KIND_MEMCPY")
    result = ingest.read(path)
    assert len(result.warnings) == 1 and "cudaMemcpy call(s) but no CUPTI_ACTIVITY_KIND_MEMCPY table" in result.warnings[0]
    assert "memcpy" not in result.timeline["activity"].to_list()
    assert ingest.read(source).warnings == []


def test_an_nsys_export_without_nvtx_events_is_a_real_shape_and_reads_without_a_warning(tmp_path):
    """nsys writes NVTX_EVENTS only when the program used NVTX (the rtx3090 export has none)."""
    path = _dropped(tmp_path, DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", "NVTX_EVENTS")
    result = ingest.read(path)
    assert result.warnings == [] and result.timeline["nvtx_range"].drop_nulls().len() == 0


def test_a_query_field_logged_twice_is_read_once_and_a_disagreement_is_a_warning(tmp_path):
    source = DATA / "telemetry-gemm-h100/nvidia-smi-query.csv"
    lines = source.read_text().splitlines(keepends=True)
    twice = [line.rstrip("\n").split(", ") for line in lines]
    twice = [cells + [cells[-1]] for cells in twice]
    twice[3][-1] = twice[3][-1] + "0" if twice[3][-1][-1].isdigit() else "1"
    path = _copy(tmp_path, source, "".join(", ".join(cells) + "\n" for cells in twice).encode())
    result, clean = ingest.read(path), ingest.read(source)
    assert result.warnings == [f"{path}:4: column {twice[0][-1].split(' [')[0]} is in the header twice and its two "
                               "cells differ on this line (left out)"]
    assert result.samples.equals(clean.samples.filter(pl.col("line") != 4))
