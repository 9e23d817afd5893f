"""Derived metrics for the roofline: FLOPs by precision and unit, arithmetic intensity, achieved FLOP/s,
the device's peaks, the roof of each launch's math dtype and the share of it reached.

CUDA-core FLOPs follow ncu's SpeedOfLight_RooflineChart section: add + mul + 2 x fma thread
instructions (an FMA is two operations), per precision. ncu collects them as rates per elapsed cycle
summed over sub-partitions, so the count is rate x SM clock x duration; where a user collected the
plain `.sum` counts, those are used as they are. They see no tensor-core work.

Tensor-core FLOPs come from the SpeedOfLight_HierarchicalTensorRooflineChart section's
sm__ops_path_tensor_src_<dtype>.sum counters, one per source dtype. They count FLOPs (an MMA's
multiply-add is two): on the corpus H100 the nvjet GEMM of llama's aten::mm [2048, 1024] x [1024, 1024]
reads 4,294,967,296 = 2 x 2048 x 1024 x 1024 (tests/test_performance_model.py). Where they are
exported, the dtype with the most tensor FLOPs is the launch's math_dtype (the name rules decide
otherwise), and the roof is that dtype's dense tensor peak: ncu's own peak per cycle
(sm__ops_path_tensor_op_<hgmma|hmma|...>_src_<dtype>..._sparsity_off.sum.peak_sustained, the best
instruction path; the src_<dtype> path peaks include 2:4 sparsity) x the SM clock ncu measured for the
launch, else the published peak of gpu_peaks.csv. Launches without tensor FLOPs keep the CUDA-core
roof: FP64 where FP64 FLOPs dominate, else FP32.

Without tensor counters, the main kernel of a GEMM, conv or attention op takes the op's FLOPs from its
input shapes (shape_flops, computed by normalize.op_shape_flops with op_flops.py; flops_source 'op
shapes'): the op's math only, its epilogue's CUDA-core FLOPs stay in flops_fp16/32/64. Its roof is the
dense tensor peak of its math_dtype (as above: ncu's per-cycle peak x clock, else gpu_peaks.csv); FP32
and FP64 GEMMs get the CUDA-core roof, an unknown dtype none.

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

from kwarehouse.normalize import op_flops

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

# Tensor FLOPs by source dtype (sum of the names listed; fp8: e4m3 and e5m2 alike, dense and 2:4 sparse).
TENSOR_OPS = {
    "bf16": ["sm__ops_path_tensor_src_bf16_dst_fp32.sum", "sm__ops_path_tensor_src_bf16_dst_bf16.sum"],  # 2nd: sm_120
    "fp16": ["sm__ops_path_tensor_src_fp16.sum"],
    "tf32": ["sm__ops_path_tensor_src_tf32_dst_fp32.sum"],
    "fp8": ["sm__ops_path_tensor_src_fp8_sparsity_off.sum", "sm__ops_path_tensor_src_fp8_sparsity_on.sum"],
    "int8": ["sm__ops_path_tensor_src_int8.sum"],
    "fp64": ["sm__ops_path_tensor_src_fp64.sum"],
}
# Dense tensor peak per SM-cycle by dtype: the best instruction path (wgmma on sm_90, mma.sync before).
_PEAK = "sm__ops_path_tensor_op_{}_src_{}_sparsity_off.sum.peak_sustained"
TENSOR_PEAK_PER_CYCLE = {
    "bf16": [_PEAK.format(op, "bf16_dst_fp32") for op in ("hgmma", "hmma")],
    "fp16": [_PEAK.format("hgmma", "fp16"), _PEAK.format("hmma", "fp16_dst_fp32"), _PEAK.format("hmma", "fp16_dst_fp16")],
    "tf32": [_PEAK.format(op, "tf32_dst_fp32") for op in ("hgmma", "hmma")],
    "fp8": ["sm__ops_path_tensor_src_fp8_sparsity_off.sum.peak_sustained"],
    "int8": [_PEAK.format(op, "int8") for op in ("igmma", "imma")],
    "fp64": ["sm__ops_path_tensor_src_fp64.sum.peak_sustained"],
}
# gpu_peaks.csv row of each counter dtype
TABLE_DTYPE = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8": "fp8_e4m3", "int8": "int8", "fp64": "fp64"}
TENSOR_COUNTERS = "ncu tensor counters"
CUDA_CORE_COUNTERS = "ncu CUDA-core counters"
# math_dtype -> the counter dtype whose tensor roof applies to a shape-FLOP kernel (fp32: none, the
# CUDA-core roof; tf32 only where the name says so)
MATH_TO_COUNTER_DTYPE = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
                         "int8": "int8", "fp64": "fp64"}

DERIVED_COLUMNS = ("flops_fp16", "flops_fp32", "flops_fp64", "tensor_flops", "flops", "flops_source",
                   "math_dtype", "achieved_flops_per_s", "arithmetic_intensity", "peak_fp32_flops_per_s",
                   "peak_fp64_flops_per_s", "peak_dram_bytes_per_s", "peak_flops_per_s", "pct_of_peak",
                   "useful_flops", "sm_clock_hz", "max_sm_clock_hz", "datasheet_peak_flops_per_s")
# Op classes whose math runs on tensor cores (in any dtype but FP32/FP64): without tensor counters or op
# shapes their CUDA-core counters see only the epilogue, so they get no CUDA-core roof and no pct_of_peak.
TENSOR_OP_CLASSES = ("gemm", "conv", "attention")
STRING_COLUMNS = ("flops_source", "math_dtype")


@functools.cache
def lanes_per_sm() -> dict[str, dict[str, int]]:
    text = resources.files("kwarehouse.normalize").joinpath("device_peaks.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["lanes"]


def wanted_metrics() -> list[str]:
    names = {*SMSP_CLOCK, *SM_CLOCK, *DRAM_PEAK, *DEVICE}
    for listed in (*TENSOR_OPS.values(), *TENSOR_PEAK_PER_CYCLE.values()):
        names.update(listed)
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


def _tensor(frame: pl.DataFrame) -> tuple[dict[str, pl.Expr], pl.Expr]:
    """Tensor FLOPs per counter dtype (null where not exported) and their sum."""
    by_dtype = {}
    for dtype, names in TENSOR_OPS.items():
        present = [pl.col(n) for n in names if n in frame.columns]
        if present:
            by_dtype[dtype] = pl.when(pl.any_horizontal([p.is_not_null() for p in present])).then(
                pl.sum_horizontal(present))
    if not by_dtype:
        return {}, pl.lit(None, dtype=pl.Float64)
    total = pl.when(pl.any_horizontal([e.is_not_null() for e in by_dtype.values()])).then(
        pl.sum_horizontal(list(by_dtype.values())))
    return by_dtype, total


def derived_columns(kernels: pl.DataFrame, wide: pl.DataFrame, device_names: pl.DataFrame | None = None) -> pl.DataFrame:
    """DERIVED_COLUMNS for each launch of `kernels` (needs launch_id, duration_ns, dram_bytes,
    compute_capability, math_dtype) from `wide`: one row per launch_id, a column per metric of
    wanted_metrics(); `device_names` (launch_id, device_name) picks gpu_peaks.csv rows."""
    if "math_dtype" not in kernels.columns:
        kernels = kernels.with_columns(pl.lit("unknown").alias("math_dtype"))
    if "shape_flops" not in kernels.columns:
        kernels = kernels.with_columns(pl.lit(None, dtype=pl.Float64).alias("shape_flops"),
                                       pl.lit(None, dtype=pl.String).alias("shape_flops_source"))
    if "op_class" not in kernels.columns:
        kernels = kernels.with_columns(pl.lit(None, dtype=pl.String).alias("op_class"))
    frame = kernels.select("launch_id", "duration_ns", "dram_bytes", "compute_capability", "math_dtype",
                           "op_class", "shape_flops", "shape_flops_source").join(wide, on="launch_id", how="left")
    if device_names is not None:
        frame = frame.join(device_names.unique("launch_id"), on="launch_id", how="left")
    else:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("device_name"))
    duration_s = pl.col("duration_ns") * NS
    lanes = lanes_per_sm()
    fp32_lanes = pl.col("compute_capability").replace_strict(
        {cc: v["fp32"] for cc, v in lanes.items()}, default=None, return_dtype=pl.Float64)
    fp64_lanes = pl.col("compute_capability").replace_strict(
        {cc: v["fp64"] for cc, v in lanes.items()}, default=None, return_dtype=pl.Float64)
    sm_clock = _first(frame, SM_CLOCK)
    device_clock = _col(frame, DEVICE[1]) * KHZ
    sms = _col(frame, DEVICE[0])
    by_dtype, tensor_total = _tensor(frame)
    frame = frame.with_columns(
        *[_flops(frame, letter, duration_s).alias(f"flops_{precision}")
          for precision, letter in PRECISIONS.items()],
        tensor_total.alias("tensor_flops"),
        pl.coalesce(_col(frame, PEAK_FMA.format("f")) * 2 * sm_clock,
                    sms * fp32_lanes * 2 * device_clock).alias("peak_fp32_flops_per_s"),
        pl.coalesce(_col(frame, PEAK_FMA.format("d")) * 2 * sm_clock,
                    sms * fp64_lanes * 2 * device_clock).alias("peak_fp64_flops_per_s"),
        pl.coalesce(_col(frame, DRAM_PEAK[0]) * _col(frame, DRAM_PEAK[1]),
                    _col(frame, DEVICE[2]) * KHZ * 2 * _col(frame, DEVICE[3]) / 8).alias("peak_dram_bytes_per_s"),
    )
    # The tensor counters decide the math dtype: the source dtype with the most FLOPs (fp8 keeps the
    # name's e4m3/e5m2 where it says, the counters do not tell them apart).
    tensor_dtype = pl.lit(None, dtype=pl.String)
    if by_dtype:
        most = pl.max_horizontal([e.fill_null(0) for e in by_dtype.values()])
        tensor_dtype = pl.coalesce([pl.when((e.fill_null(0) == most) & (most > 0)).then(pl.lit(d))
                                    for d, e in by_dtype.items()])
    name_dtype = pl.col("math_dtype").fill_null("unknown")
    has_tensor = pl.col("tensor_flops").fill_null(0) > 0
    frame = frame.with_columns(
        pl.when(has_tensor & (tensor_dtype == "fp8"))
        .then(pl.when(name_dtype.str.starts_with("fp8")).then(name_dtype).otherwise(pl.lit("unknown")))
        .when(has_tensor).then(tensor_dtype).otherwise(name_dtype).alias("math_dtype"),
        tensor_dtype.alias("_counter_dtype"))
    precisions = [pl.col(f"flops_{p}") for p in PRECISIONS]
    cuda_core = pl.when(pl.any_horizontal([p.is_not_null() for p in precisions])).then(pl.sum_horizontal(precisions))
    # all FLOPs = CUDA-core + tensor; without CUDA-core counters, a tensor kernel's FLOPs are its tensor
    # FLOPs (its epilogue's few CUDA-core FLOPs unseen) and a kernel without tensor work has no count.
    # Without tensor counters, the main kernel of a GEMM/conv/attention op takes its op's FLOPs from the
    # input shapes (op_flops.py): the math of the op alone, its epilogue's CUDA-core FLOPs left out (they
    # stay in flops_fp16/32/64).
    by_shapes = ~has_tensor & pl.col("shape_flops").is_not_null()
    frame = frame.with_columns(
        pl.when(by_shapes).then(pl.col("shape_flops"))
        .when(cuda_core.is_not_null()).then(cuda_core + pl.col("tensor_flops").fill_null(0))
        .when(has_tensor).then(pl.col("tensor_flops")).alias("flops"),
        pl.when(has_tensor).then(pl.lit(TENSOR_COUNTERS))
        .when(by_shapes).then(pl.col("shape_flops_source"))
        .when(cuda_core.is_not_null()).then(pl.lit(CUDA_CORE_COUNTERS)).alias("flops_source"))
    # the roof's dtype: the counters' where they counted tensor work, else the math dtype of a shape-FLOP
    # kernel (its dtype's dense tensor peak; FP32 and FP64 without one fall to the CUDA-core peaks below)
    frame = frame.with_columns(
        pl.when(has_tensor).then(pl.col("_counter_dtype"))
        .when(by_shapes).then(pl.col("math_dtype").replace_strict(MATH_TO_COUNTER_DTYPE, default=None))
        .alias("_roof_dtype"))
    fp64_dominates = pl.col("flops_fp64").fill_null(0) > pl.col("flops_fp32").fill_null(0) + pl.col(
        "flops_fp16").fill_null(0)
    # a GEMM/conv/attention kernel of a tensor dtype whose tensor work nobody counted (no tensor counters,
    # no op shapes): its CUDA-core FLOPs are its epilogue's, so it is measured against no roof at all
    # (an FP8 4096³ GEMM read 10 % of the FP32 CUDA-core roof that way); its roof is its dtype's tensor peak
    tensor_uncounted = (pl.col("tensor_flops").is_null() & ~by_shapes & pl.col("op_class").is_in(TENSOR_OP_CLASSES)
                        & ~pl.col("math_dtype").fill_null("unknown").is_in(["fp32", "fp64"]))
    frame = frame.with_columns(
        pl.when(tensor_uncounted).then(pl.col("math_dtype").replace_strict(MATH_TO_COUNTER_DTYPE, default=None))
        .otherwise(pl.col("_roof_dtype")).alias("_roof_dtype"))
    frame = frame.with_columns(_tensor_roof(frame, sm_clock).alias("_tensor_roof"))
    frame = frame.with_columns(
        pl.when(tensor_uncounted).then(pl.col("_tensor_roof"))
        .when(has_tensor | (by_shapes & pl.col("_tensor_roof").is_not_null())).then(pl.col("_tensor_roof"))
        .when(by_shapes & (pl.col("math_dtype") == "fp64")).then(pl.col("peak_fp64_flops_per_s"))
        .when(by_shapes & (pl.col("math_dtype") == "fp32")).then(pl.col("peak_fp32_flops_per_s"))
        .when(by_shapes).then(None)   # dtype unknown: no roof rather than the wrong one
        .when(fp64_dominates | ((pl.col("math_dtype") == "fp64") & cuda_core.is_null()))
        .then(pl.col("peak_fp64_flops_per_s"))
        .otherwise(pl.col("peak_fp32_flops_per_s")).alias("peak_flops_per_s"),
        (pl.col("flops") / pl.when(duration_s > 0).then(duration_s)).alias("achieved_flops_per_s"),
        (pl.col("flops") / pl.when(pl.col("dram_bytes") > 0).then(pl.col("dram_bytes")))
        .alias("arithmetic_intensity"),
    )
    frame = frame.with_columns(
        pl.when(~tensor_uncounted).then(
            100 * pl.col("achieved_flops_per_s") / pl.when(pl.col("peak_flops_per_s") > 0).then(pl.col("peak_flops_per_s")))
        .alias("pct_of_peak"),
        # the op's math from its input shapes (op_flops.py: 2·M·N·K, conv without channel padding, causal
        # attention halved where recorded), beside the executed tensor_flops the counters count in whole tiles
        # (only where nothing was assumed: attention without a recorded causal flag counts its full work,
        # up to twice the useful; a conv whose stride NVTX did not record reads 4x on a stride-2 conv)
        pl.when(pl.col("shape_flops_source") == op_flops.SOURCE).then(pl.col("shape_flops"))
        .alias("useful_flops"),
        sm_clock.alias("sm_clock_hz"),
        device_clock.alias("max_sm_clock_hz"),
        _datasheet_peak(frame, tensor_uncounted | has_tensor | (by_shapes & pl.col("_tensor_roof").is_not_null()))
        .alias("datasheet_peak_flops_per_s"))
    return frame.select("launch_id", *[pl.col(c) if c in STRING_COLUMNS else pl.col(c).cast(pl.Float64)
                                       for c in DERIVED_COLUMNS])


def _datasheet_peak(frame: pl.DataFrame, tensor_roof: pl.Expr) -> pl.Expr:
    """The published peak (gpu_peaks.csv, at the datasheet's clock) of the roof peak_flops_per_s names:
    the dense tensor peak of the roof dtype where the roof is a tensor one, else the FP64 or FP32
    CUDA-core peak; NULL where the table has no row for the device. pct_of_peak is at the clock ncu
    measured; this is the basis a datasheet reader expects (they differ by 20-25 % on throttled GEMMs)."""
    from kwarehouse.normalize import peaks
    names = frame["device_name"].drop_nulls().unique().to_list()
    table = {}
    for name in names:
        for dtype, table_dtype in TABLE_DTYPE.items():
            if (p := peaks.peak(name, table_dtype)) is not None and p.tensor_dense_flops_per_s is not None:
                table[f"{name}|tensor|{dtype}"] = p.tensor_dense_flops_per_s
        for dtype in ("fp32", "fp64"):
            if (p := peaks.peak(name, dtype)) is not None and p.cuda_core_flops_per_s is not None:
                table[f"{name}|core|{dtype}"] = p.cuda_core_flops_per_s
    if not table:
        return pl.lit(None, dtype=pl.Float64)
    core_dtype = pl.when(pl.col("peak_flops_per_s") == pl.col("peak_fp64_flops_per_s")).then(pl.lit("fp64")) \
        .otherwise(pl.lit("fp32"))
    key = pl.when(tensor_roof).then(pl.concat_str(pl.col("device_name"), pl.lit("|tensor|"), pl.col("_roof_dtype"))) \
        .when(pl.col("peak_flops_per_s").is_not_null()).then(
            pl.concat_str(pl.col("device_name"), pl.lit("|core|"), core_dtype))
    return key.replace_strict(table, default=None, return_dtype=pl.Float64)


def _tensor_roof(frame: pl.DataFrame, sm_clock: pl.Expr) -> pl.Expr:
    """Dense tensor peak FLOP/s of the launch's roof dtype (_roof_dtype: the counters' dtype, or the math
    dtype of a shape-FLOP kernel): ncu's per-cycle peak x the SM clock it measured, else gpu_peaks.csv
    for the device name."""
    from kwarehouse.normalize import peaks
    options = []
    for dtype, names in TENSOR_PEAK_PER_CYCLE.items():
        present = [pl.col(n) for n in names if n in frame.columns]
        if present:
            options.append(pl.when(pl.col("_roof_dtype") == dtype).then(pl.max_horizontal(present) * sm_clock))
    ncu_peak = pl.coalesce(options) if options else pl.lit(None, dtype=pl.Float64)
    names = frame["device_name"].drop_nulls().unique().to_list()
    table = {(n, d): p.tensor_dense_flops_per_s for n in names for d, t in TABLE_DTYPE.items()
             if (p := peaks.peak(n, t)) is not None and p.tensor_dense_flops_per_s is not None}
    if not table:
        return ncu_peak
    keys = pl.concat_str(pl.col("device_name"), pl.lit("|"), pl.col("_roof_dtype"))
    published = keys.replace_strict({f"{n}|{d}": v for (n, d), v in table.items()}, default=None,
                                    return_dtype=pl.Float64)
    return pl.coalesce(ncu_peak, published)


# ---------------------------------------------------------------------------------------------------
# Bytes per memory level and the bandwidth peaks of L2 and L1 (the roofline's memory roofs). Kept
# apart from the FLOP logic above: bytes_columns runs before derived_columns, because it also fills
# dram_bytes where an export has only ncu's DRAM rate.
#
# Each column takes the first candidate the export has. A "rate" candidate is ncu's per-second value
# of the kernel, so bytes = rate x the launch's duration. The L2 and L1 candidates come first as ncu's
# hierarchical roofline sections (SpeedOfLight_Hierarchical*RooflineChart, ncu 2025) count them:
#   L2: derived__lts__lts2xbar_bytes = lts__lts2xbar_cycles_active x 32 B (L2 -> SM crossbar traffic),
#   L1: derived__l1tex__lsu_writeback_bytes_mem_lgds (sm_90+; _mem_lg on sm_75-89) = LSU writeback
#       cycles x 128 B (local/global/shared loads reaching registers; TMA copies and wgmma operands
#       read from shared memory bypass it, so a Hopper GEMM's L1 bytes are small);
# then the plain counters a user may have collected (lts__t_bytes.sum, lts__t_sectors.sum x 32,
# l1tex__t_bytes.sum). shared_bytes: smsp__sass_data_bytes_mem_shared.sum (LDS/STS/LDSM/... and the
# wgmma operands read from shared memory), collected by MemoryWorkloadAnalysis_Tables or by name.
# The peaks are ncu's own: bytes per cycle (.peak_sustained) x the unit's clock ncu measured
# (lts__cycles_elapsed / l1tex__cycles_elapsed .avg.per_second), the way its roofline chart draws them.

SECTOR_BYTES = 32
LSU_WRITEBACK_BYTES = 128
L2_CLOCK = "lts__cycles_elapsed.avg.per_second"
L1_CLOCK = "l1tex__cycles_elapsed.avg.per_second"
# column -> candidates: (metric, how) with how = "count" (bytes), "rate" (bytes/s x duration), or a
# number (count x that many bytes), or ("rate", n) (per-second x n bytes x duration)
LEVEL_BYTES = {
    "dram_bytes": [("dram__bytes.sum.per_second", "rate")],
    "l2_bytes": [("derived__lts__lts2xbar_bytes.sum.per_second", "rate"),
                 ("lts__lts2xbar_cycles_active.sum.per_second", ("rate", SECTOR_BYTES)),
                 ("lts__t_bytes.sum", "count"),
                 ("lts__t_sectors.sum", SECTOR_BYTES)],
    "l1_bytes": [("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second", "rate"),
                 ("derived__l1tex__lsu_writeback_bytes_mem_lg.sum.per_second", "rate"),
                 ("l1tex__lsu_writeback_active_mem_lgds.sum.per_second", ("rate", LSU_WRITEBACK_BYTES)),
                 ("l1tex__lsu_writeback_active_mem_lg.sum.per_second", ("rate", LSU_WRITEBACK_BYTES)),
                 ("l1tex__t_bytes.sum", "count")],
    "shared_bytes": [("smsp__sass_data_bytes_mem_shared.sum", "count"),
                     ("sm__sass_data_bytes_mem_shared.sum", "count")],
}
# column -> candidates: (bytes-per-cycle metric, bytes per unit, clock metric)
LEVEL_PEAKS = {
    "peak_l2_bytes_per_s": [("derived__lts__lts2xbar_bytes.sum.peak_sustained", 1, L2_CLOCK),
                            ("lts__lts2xbar_cycles_active.sum.peak_sustained", SECTOR_BYTES, L2_CLOCK),
                            ("lts__t_bytes.sum.peak_sustained", 1, L2_CLOCK)],
    "peak_l1_bytes_per_s": [("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained", 1, L1_CLOCK),
                            ("derived__l1tex__lsu_writeback_bytes_mem_lg.sum.peak_sustained", 1, L1_CLOCK),
                            ("l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained", LSU_WRITEBACK_BYTES, L1_CLOCK),
                            ("l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained", LSU_WRITEBACK_BYTES, L1_CLOCK),
                            ("l1tex__t_bytes.sum.peak_sustained", 1, L1_CLOCK)],
}
BYTES_COLUMNS = ("l2_bytes", "l1_bytes", "shared_bytes", "peak_l2_bytes_per_s", "peak_l1_bytes_per_s")


def bytes_metrics() -> list[str]:
    """The metrics bytes_columns reads."""
    names = {m for candidates in LEVEL_BYTES.values() for m, _ in candidates}
    names |= {n for candidates in LEVEL_PEAKS.values() for m, _, clock in candidates for n in (m, clock)}
    return sorted(names)


def bytes_columns(kernels: pl.DataFrame, wide: pl.DataFrame) -> pl.DataFrame:
    """`kernels` with BYTES_COLUMNS added and dram_bytes filled from ncu's DRAM rate where the export
    has no byte count (dram__bytes.sum.per_second x duration: the tensor-roofline exports of corpus
    11b); `wide` is one row per launch_id with a column per metric of bytes_metrics()."""
    frame = kernels.select("launch_id", "duration_ns").join(wide, on="launch_id", how="left")
    duration_s = pl.col("duration_ns") * NS

    def value(metric: str, how) -> pl.Expr:
        base = _col(frame, metric)
        if how == "count":
            return base
        if how == "rate":
            return base * duration_s
        if isinstance(how, tuple):
            return base * how[1] * duration_s
        return base * how

    levels = {column: pl.coalesce([value(m, how) for m, how in candidates])
              for column, candidates in LEVEL_BYTES.items()}
    peaks = {column: pl.coalesce([_col(frame, m) * per_unit * _col(frame, clock) for m, per_unit, clock in candidates])
             for column, candidates in LEVEL_PEAKS.items()}
    extra = frame.select("launch_id", levels.pop("dram_bytes").alias("_dram_from_rate"),
                         *[e.cast(pl.Float64).alias(c) for c, e in {**levels, **peaks}.items()])
    out = kernels.drop([c for c in BYTES_COLUMNS if c in kernels.columns]).join(extra, on="launch_id", how="left")
    dram = pl.col("dram_bytes") if "dram_bytes" in out.columns else pl.lit(None, dtype=pl.Float64)
    return out.with_columns(pl.coalesce(dram, pl.col("_dram_from_rate")).cast(pl.Float64).alias("dram_bytes")) \
        .drop("_dram_from_rate")
