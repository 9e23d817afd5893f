"""Published GPU peaks as data: gpu_peaks.csv (one row per GPU model and math dtype, each with its
source) and gpu_names.csv (the device names tools print -> the table's gpu_model).

>>> gpu_model("NVIDIA H100 80GB HBM3")
'H100 SXM'
>>> peak("NVIDIA H100 80GB HBM3", "bf16").tensor_dense_flops_per_s
989500000000000.0
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from importlib import resources

import polars as pl

from kwarehouse.errors import InputError

NUMBER_COLUMNS = ("tensor_dense_flops_per_s", "cuda_core_flops_per_s", "dram_bytes_per_s", "l2_bytes_per_s",
                  "sm_count", "boost_clock_hz")
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8")


@dataclass(frozen=True)
class Peak:
    gpu_model: str
    dtype: str
    tensor_dense_flops_per_s: float | None
    cuda_core_flops_per_s: float | None
    dram_bytes_per_s: float | None
    l2_bytes_per_s: float | None
    sm_count: float | None
    boost_clock_hz: float | None
    source: str


def _rows(name: str) -> list[tuple[int, dict[str, str]]]:
    text = resources.files("kwarehouse.normalize").joinpath(name).read_text(encoding="utf-8")
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.startswith("#")]
    reader = csv.DictReader([line for _, line in lines])
    return [(number, row) for (number, _), row in zip(lines[1:], reader)]


@functools.cache
def peak_table() -> dict[tuple[str, str], Peak]:
    """(gpu_model, dtype) -> Peak, from gpu_peaks.csv; an empty cell is None."""
    table = {}
    for number, row in _rows("gpu_peaks.csv"):
        if row["dtype"] not in DTYPES:
            raise InputError("kwarehouse/normalize/gpu_peaks.csv", f"unknown dtype {row['dtype']!r}", number)
        values = {c: float(row[c]) if row[c].strip() else None for c in NUMBER_COLUMNS}
        table[(row["gpu_model"], row["dtype"])] = Peak(row["gpu_model"], row["dtype"], **values,
                                                       source=row["source"])
    return table


@functools.cache
def name_patterns() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(row["pattern"]), row["gpu_model"]) for _, row in _rows("gpu_names.csv"))


@functools.cache
def gpu_model(device_name: str | None) -> str | None:
    """The gpu_peaks.csv model of a device name as a tool printed it, or None."""
    if not device_name:
        return None
    for pattern, model in name_patterns():
        if pattern.search(device_name.strip()):
            return model
    return None


def peak(device_name: str | None, dtype: str | None) -> Peak | None:
    return peak_table().get((gpu_model(device_name), dtype))


def peak_frame() -> pl.DataFrame:
    """The whole table, one row per (gpu_model, dtype), in file order: the `gpu_peaks` table of every
    query surface (kwh sql, warehouse.duckdb, the Python API, Spark)."""
    rows = [p.__dict__ for p in peak_table().values()]
    return pl.DataFrame(rows, schema={"gpu_model": pl.String, "dtype": pl.String,
                                      **{c: pl.Float64 for c in NUMBER_COLUMNS}, "source": pl.String})
