"""Derived metrics for the roofline: FLOPs by precision, arithmetic intensity, achieved FLOP/s and
the device's peak FLOP/s and DRAM bandwidth.

FLOPs follow ncu's SpeedOfLight_RooflineChart section: add + mul + 2 x fma thread instructions
(an FMA is two operations), per precision. ncu collects them as rates per elapsed cycle summed over
sub-partitions, so the count is rate x SM clock x duration; where a user collected the plain
`.sum` counts, those are used as they are. Tensor-core work is not in these counters (ncu reports
it as pipe utilisation, kernels.tensor_pipe_pct), so a GEMM's FLOPs here are its CUDA-core FLOPs.

Peaks come from ncu's own roofline metrics when the export has them (peak_sustained FMA per cycle
x 2 x clock; peak DRAM bytes per cycle x DRAM clock), else from the CUDA device attributes:
SMs x lanes per SM for the compute capability (device_peaks.toml) x 2 x SM clock, and memory
clock x 2 (double data rate) x bus width / 8.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

import polars as pl

PRECISIONS = {"fp16": "h", "fp32": "f", "fp64": "d"}
RATE = "smsp__sass_thread_inst_executed_op_{}{}_pred_on.sum.per_cycle_elapsed"
COUNT = "smsp__sass_thread_inst_executed_op_{}{}_pred_on.sum"
PEAK_FMA = "sm__sass_thread_inst_executed_op_{}fma_pred_on.sum.peak_sustained"
SMSP_CLOCK = ["smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second",
              "gpc__cycles_elapsed.avg.per_second"]
SM_CLOCK = ["sm__cycles_elapsed.avg.per_second", "gpc__cycles_elapsed.avg.per_second"]
DRAM_PEAK = ("dram__bytes.sum.peak_sustained", "dram__cycles_elapsed.avg.per_second")
DEVICE = ("device__attribute_multiprocessor_count", "device__attribute_clock_rate",
          "device__attribute_memory_clock_rate", "device__attribute_global_memory_bus_width")
KHZ = 1e3
NS = 1e-9

DERIVED_COLUMNS = ("flops_fp16", "flops_fp32", "flops_fp64", "flops", "achieved_flops_per_s",
                   "arithmetic_intensity", "peak_fp32_flops_per_s", "peak_fp64_flops_per_s",
                   "peak_dram_bytes_per_s")


@functools.cache
def lanes_per_sm() -> dict[str, dict[str, int]]:
    text = resources.files("kwarehouse.normalize").joinpath("device_peaks.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["lanes"]


def wanted_metrics() -> list[str]:
    names = {*SMSP_CLOCK, *SM_CLOCK, *DRAM_PEAK, *DEVICE}
    for letter in PRECISIONS.values():
        for op in ("add", "mul", "fma"):
            names |= {RATE.format(letter, op), COUNT.format(letter, op)}
        names.add(PEAK_FMA.format(letter))
    return sorted(names)


def _col(frame: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name) if name in frame.columns else pl.lit(None, dtype=pl.Float64)


def _first(frame: pl.DataFrame, names: list[str]) -> pl.Expr:
    return pl.coalesce([_col(frame, n) for n in names] + [pl.lit(None, dtype=pl.Float64)])


def _flops(frame: pl.DataFrame, letter: str, duration_s: pl.Expr) -> pl.Expr:
    """add + mul + 2 x fma of one precision: plain counts where collected, else rate x clock x time."""
    def weighted(template: str) -> pl.Expr:
        terms = [_col(frame, template.format(letter, op)) * weight
                 for op, weight in (("add", 1), ("mul", 1), ("fma", 2))]
        return pl.when(pl.any_horizontal([t.is_not_null() for t in terms])).then(pl.sum_horizontal(terms))
    return pl.coalesce(weighted(COUNT), weighted(RATE) * _first(frame, SMSP_CLOCK) * duration_s)


def derived_columns(kernels: pl.DataFrame, wide: pl.DataFrame) -> pl.DataFrame:
    """DERIVED_COLUMNS for each launch of `kernels` (needs launch_id, duration_ns, dram_bytes,
    compute_capability) from `wide`: one row per launch_id, a column per metric of wanted_metrics()."""
    frame = kernels.select("launch_id", "duration_ns", "dram_bytes", "compute_capability").join(
        wide, on="launch_id", how="left")
    duration_s = pl.col("duration_ns") * NS
    lanes = lanes_per_sm()
    fp32_lanes = pl.col("compute_capability").replace_strict(
        {cc: v["fp32"] for cc, v in lanes.items()}, default=None, return_dtype=pl.Float64)
    fp64_lanes = pl.col("compute_capability").replace_strict(
        {cc: v["fp64"] for cc, v in lanes.items()}, default=None, return_dtype=pl.Float64)
    sm_clock = _first(frame, SM_CLOCK)
    device_clock = _col(frame, DEVICE[1]) * KHZ
    sms = _col(frame, DEVICE[0])
    frame = frame.with_columns(
        *[_flops(frame, letter, duration_s).alias(f"flops_{precision}")
          for precision, letter in PRECISIONS.items()],
        pl.coalesce(_col(frame, PEAK_FMA.format("f")) * 2 * sm_clock,
                    sms * fp32_lanes * 2 * device_clock).alias("peak_fp32_flops_per_s"),
        pl.coalesce(_col(frame, PEAK_FMA.format("d")) * 2 * sm_clock,
                    sms * fp64_lanes * 2 * device_clock).alias("peak_fp64_flops_per_s"),
        pl.coalesce(_col(frame, DRAM_PEAK[0]) * _col(frame, DRAM_PEAK[1]),
                    _col(frame, DEVICE[2]) * KHZ * 2 * _col(frame, DEVICE[3]) / 8).alias("peak_dram_bytes_per_s"),
    )
    precisions = [pl.col(f"flops_{p}") for p in PRECISIONS]
    frame = frame.with_columns(
        pl.when(pl.any_horizontal([p.is_not_null() for p in precisions]))
        .then(pl.sum_horizontal(precisions)).alias("flops"))
    return frame.with_columns(
        (pl.col("flops") / pl.when(duration_s > 0).then(duration_s)).alias("achieved_flops_per_s"),
        (pl.col("flops") / pl.when(pl.col("dram_bytes") > 0).then(pl.col("dram_bytes")))
        .alias("arithmetic_intensity"),
    ).select("launch_id", *[pl.col(c).cast(pl.Float64) for c in DERIVED_COLUMNS])
