"""Issue 18, the performance model: the peak table, tensor-core FLOPs from ncu's counters, the roof of
each launch's math dtype and the share of it reached, on real exports."""

from __future__ import annotations

import doctest
import subprocess

import pytest
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.normalize.launches import LAUNCH_COLUMNS, kernel_rows
from kwarehouse.jobs import renormalize as renormalize_job
from kwarehouse.normalize import peaks
from kwarehouse.store.warehouse import Warehouse

# SM compute capability of each table model, for the CUDA-core check below (CUDA C Programming Guide)
CC = {"H100 SXM": "9.0", "A100 SXM4 80GB": "8.0", "A100 SXM4 40GB": "8.0", "A100 PCIe 80GB": "8.0",
      "A100 PCIe 40GB": "8.0", "RTX 3060": "8.6", "RTX 3090": "8.6", "RTX 4090": "8.9", "RTX 5090": "12.0",
      "GTX 1080": "6.1"}


def test_peaks_doctests():
    assert doctest.testmod(peaks).failed == 0


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),          # corpus h100-2026-11: ncu's name of the SXM5 card
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", None),                      # another card: no row rather than the wrong one
    ("NVIDIA B200", "B200"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),    # tests/data/nsys-sqlite-a100
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A10G", None),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla T4", "T4"),
    ("NVIDIA GeForce RTX 3060", "RTX 3060"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),        # tests/data/nsys-sqlite-rtx3090
    ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA GeForce GTX 1080", "GTX 1080"),        # tests/data/ncu-gtx1080-raw
    ("", None),
])
def test_device_names_map_to_table_models(name, model):
    assert peaks.gpu_model(name) == model


def test_the_table_covers_the_issue_gpus_and_cites_every_row():
    table = peaks.peak_table()
    models = {m for m, _ in table}
    assert models >= {"H100 SXM", "H100 PCIe", "H200 SXM", "B200", "A100 SXM4 80GB", "A100 PCIe 80GB", "A10",
                      "L4", "L40S", "T4", "RTX 3060", "RTX 3090", "RTX 4090", "RTX 5090", "GTX 1080"}
    for p in table.values():
        assert p.source.startswith("NVIDIA "), p
        # one value per GPU: DRAM bandwidth, SMs and clock agree over its rows
        first = next(q for q in table.values() if q.gpu_model == p.gpu_model)
        assert (p.dram_bytes_per_s, p.sm_count, p.boost_clock_hz) == (
            first.dram_bytes_per_s, first.sm_count, first.boost_clock_hz)


def test_published_peaks_agree_with_each_other():
    table = peaks.peak_table()
    for (model, dtype), p in table.items():
        bf16 = table.get((model, "bf16")) or table.get((model, "fp16"))
        if dtype in ("fp8_e4m3", "fp8_e5m2") and bf16:   # FP8 runs at twice the 16-bit rate
            assert p.tensor_dense_flops_per_s == pytest.approx(2 * bf16.tensor_dense_flops_per_s, rel=0.02)  # L40S: 733 vs 362.05
        if dtype == "tf32" and bf16:                       # TF32 at half of it
            assert p.tensor_dense_flops_per_s == pytest.approx(bf16.tensor_dense_flops_per_s / 2, rel=0.02)  # L40S: 183 vs 362.05
    # CUDA-core FP32 = SMs x FP32 lanes per SM (device_peaks.toml) x 2 (FMA) x boost clock
    from kwarehouse.normalize import derived
    lanes = derived.lanes_per_sm()
    for model, cc in CC.items():
        p = table[(model, "fp32")]
        assert p.cuda_core_flops_per_s == pytest.approx(
            p.sm_count * lanes[cc]["fp32"] * 2 * p.boost_clock_hz, rel=0.01), model
    # ncu's own dense BF16 peak on the corpus H100 (540,672 FLOP per cycle, from
    # sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum.peak_sustained) is the datasheet's
    # 989.5 TFLOP/s at 1.83 GHz
    assert table[("H100 SXM", "bf16")].tensor_dense_flops_per_s == pytest.approx(540_672 * 1.83e9, rel=1e-3)


# -- tensor FLOPs from ncu's counters, on the trimmed real export ------------------------------------

TENSOR = DATA / "tensor-ncu-gpt2-h100"   # corpus h100-2026-11b gpt2, first 11 launches (tests/data/README.md)


@pytest.fixture(scope="module")
def gpt2_11b(tmp_path_factory) -> Warehouse:
    warehouse = Warehouse(tmp_path_factory.mktemp("tensor") / "wh")
    assert ingest_job.ingest([TENSOR], warehouse).failed == []
    return warehouse


def _launch(warehouse: Warehouse, launch_id: int) -> dict:
    con = warehouse.connect()
    try:
        cursor = con.execute("SELECT * FROM kernels WHERE launch_id = ?", [launch_id])
        return dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    finally:
        con.close()


def test_tensor_counters_count_two_flops_per_multiply_add(gpt2_11b):
    """GPT-2's attention output projection: aten::addmm of [1024, 768] x [768, 768] (the op's input
    shapes recorded by emit_nvtx in the NVTX stack): 2 x M x N x K FLOPs, exactly."""
    k = _launch(gpt2_11b, 10)
    assert k["framework_op"] == "aten::addmm" and k["op_shapes"].startswith("[[768], [1024, 768], [768, 768]")
    m, kk, n = 1024, 768, 768
    assert k["tensor_flops"] == pytest.approx(2 * m * n * kk, rel=0.02)
    assert k["tensor_flops"] == 2 * m * n * kk                     # in fact exactly
    assert k["flops"] == pytest.approx(k["tensor_flops"] + k["flops_fp32"])   # + the epilogue's CUDA-core FLOPs
    assert k["flops_source"] == "ncu tensor counters" and k["math_dtype"] == "bf16"


def test_tensor_counters_count_the_work_done_in_whole_tiles(gpt2_11b):
    """The QKV projection [1024, 768] x [768, 2304] runs as nvjet 192x96 tiles: M = 1024 needs 11 tiles
    of 96 rows (1056), and the counters count those rows: 2 x 1056 x 768 x 2304, 3.1 % above 2·M·N·K.
    Causal SDPA (B 4, H 12, S 256, D 64) computes 6 of its 8 (64 x 128) blocks of QK^T and PV: 3/4 of
    the non-causal 4·B·H·S²·D, not the ideal half."""
    qkv = _launch(gpt2_11b, 6)
    assert qkv["op_shapes"].startswith("[[2304], [1024, 768], [768, 2304]")
    assert qkv["tensor_flops"] == 2 * 1056 * 768 * 2304
    assert qkv["tensor_flops"] / (2 * 1024 * 768 * 2304) == pytest.approx(1.03125)
    sdpa = _launch(gpt2_11b, 9)
    assert sdpa["framework_op"] == "aten::_cudnn_attention_forward"
    assert sdpa["tensor_flops"] == 4 * 4 * 12 * 256 * 256 * 64 * 3 // 4


def test_the_counters_decide_the_math_dtype_and_the_roof(gpt2_11b):
    sdpa = _launch(gpt2_11b, 9)
    # its name says "f16" for any 16-bit float (the rules give unknown); the counters count bf16
    assert sdpa["math_dtype"] == "bf16"
    for launch_id in (6, 9, 10):
        k = _launch(gpt2_11b, launch_id)
        # roof: ncu's dense BF16 peak, 540,672 FLOP per SM cycle on the H100, at the clock it measured
        clock = rows(gpt2_11b, "SELECT value FROM metrics WHERE launch_id = ? AND metric = "
                               "'sm__cycles_elapsed.avg.per_second'", [launch_id])[0][0]
        assert k["peak_flops_per_s"] == pytest.approx(540_672 * clock)
        assert 1.6e9 < clock < 2.0e9      # unlocked clocks: below the 1.98 GHz boost
        assert k["achieved_flops_per_s"] == pytest.approx(k["flops"] / k["duration_ns"] * 1e9)
        assert k["pct_of_peak"] == pytest.approx(100 * k["achieved_flops_per_s"] / k["peak_flops_per_s"])
        # FLOP efficiency and the elapsed-basis tensor pipe agree on wgmma kernels (within a point);
        # the active-basis tensor_pipe_pct reads far higher on these under-filled grids
        assert k["pct_of_peak"] == pytest.approx(k["tensor_util_pct"], abs=1.0)
        assert k["tensor_pipe_pct"] > 1.3 * k["tensor_util_pct"]


def test_launches_without_tensor_work_keep_their_cuda_core_flops_and_roof(gpt2_11b, tmp_path):
    layer_norm = _launch(gpt2_11b, 5)
    assert layer_norm["tensor_flops"] == 0 and layer_norm["flops_source"] == "ncu CUDA-core counters"
    assert layer_norm["flops"] == pytest.approx(layer_norm["flops_fp32"])
    assert layer_norm["peak_flops_per_s"] == layer_norm["peak_fp32_flops_per_s"]
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse)   # no tensor counters in this export
    got = rows(warehouse, "SELECT kernel_name, flops FROM kernels WHERE kernel_name IN ('saxpy', 'naive_sgemm') "
                          "AND tensor_flops IS NULL AND flops_source = 'ncu CUDA-core counters'")
    assert len(got) == 2
    for name, flops in got:
        assert flops == pytest.approx(2 * 2**24 if name == "saxpy" else 2 * 1024**3, rel=0.01)


def test_without_ncus_own_peaks_the_published_table_gives_the_roof(gpt2_11b):
    import polars as pl
    from kwarehouse import normalize
    (run_id, _, _), = gpt2_11b.runs()
    stored = gpt2_11b.read_run(run_id)
    metrics = pl.from_arrow(stored["metrics"]).drop("run_id", "model", "gpu")
    metrics = metrics.filter(~pl.col("metric").str.ends_with(".peak_sustained"))   # as --metrics without them
    kernels = kernel_rows(pl.from_arrow(stored["kernels"]).select(LAUNCH_COLUMNS), metrics,
                                   normalize.KernelRules.load())
    gemm = kernels.filter(pl.col("launch_id") == 10).row(0, named=True)
    assert gemm["peak_flops_per_s"] == peaks.peak("NVIDIA H100 80GB HBM3", "bf16").tensor_dense_flops_per_s == 989.5e12
    assert gemm["tensor_flops"] == 2 * 1024 * 768 * 768


def test_renormalize_recomputes_the_same_tensor_columns_from_stored_metrics(gpt2_11b, tmp_path):
    import shutil
    copy = Warehouse(shutil.copytree(gpt2_11b.root, tmp_path / "wh"))
    copy.refresh_duckdb()
    before = rows(copy, "SELECT * FROM kernels ORDER BY launch_id")
    assert renormalize_job.renormalize(copy).unchanged == 1
    assert rows(copy, "SELECT * FROM kernels ORDER BY launch_id") == before


def test_the_roofline_view_draws_tensor_kernels_against_their_roof(gpt2_11b):
    # (this raw page has dram__bytes.sum.per_second but no dram__bytes.sum: dram_bytes, and so the
    # intensity, are NULL for it; the roof and the FLOP/s are there)
    (achieved, peak), = rows(gpt2_11b, "SELECT achieved_flops_per_s, peak_flops_per_s FROM roofline "
                                       "WHERE level = 'launch' AND launch_id = 10")
    assert achieved > 100e12 and peak > 900e12


CORPUS_11B = DATA.parents[2] / "shared" / "corpus" / "h100-2026-11b"


@pytest.mark.skipif(not CORPUS_11B.is_dir(), reason="../shared/corpus not present")
def test_llama_gemms_share_of_the_bf16_peak_on_the_corpus(tmp_path):
    """llama's MLP GEMM [2048, 1024] x [1024, 2816] (aten::mm shapes from NVTX) reaches about 60 % of the
    H100's 989.5 TFLOP/s datasheet BF16 peak, and ~66 % of the peak at the clock it ran at."""
    subprocess.run(["tar", "xJf", str(CORPUS_11B / "llama.tar.xz"), "-C", str(tmp_path)], check=True)
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([tmp_path / "llama" / "llama.raw.csv"], warehouse)
    got = rows(warehouse, "SELECT tensor_flops, achieved_flops_per_s, pct_of_peak, tensor_util_pct FROM kernels "
                          "WHERE op_shapes = '[[2048, 1024], [1024, 2816]]'")
    assert len(got) == 4
    datasheet = peaks.peak("NVIDIA H100 80GB HBM3", "bf16").tensor_dense_flops_per_s
    for tensor_flops, achieved, pct, util in got:
        assert tensor_flops == 2 * 2048 * 1024 * 2816
        assert 0.55 < achieved / datasheet < 0.65
        assert 60 < pct < 72 and pct == pytest.approx(util, abs=1.0)


def test_without_tensor_counters_the_op_shapes_give_the_flops(gpt2_11b):
    """The same launches with the tensor roofline counters taken out (as corpus A exported them): the
    main kernel of each GEMM/attention op takes its op's FLOPs from the NVTX input shapes ('op shapes'),
    its epilogue's CUDA-core FLOPs left out of flops; the roof stays the BF16 tensor peak at its clock."""
    import polars as pl
    from kwarehouse import normalize
    (run_id, _, _), = gpt2_11b.runs()
    stored = gpt2_11b.read_run(run_id)
    metrics = pl.from_arrow(stored["metrics"]).drop("run_id", "model", "gpu")
    metrics = metrics.filter(~pl.col("metric").str.starts_with("sm__ops_path_tensor_src"))
    kernels = kernel_rows(pl.from_arrow(stored["kernels"]).select(LAUNCH_COLUMNS), metrics,
                                   normalize.KernelRules.load())
    by_id = {row["launch_id"]: row for row in kernels.iter_rows(named=True)}
    gemm = by_id[10]                                   # aten::addmm [768], [1024, 768], [768, 768]
    assert gemm["tensor_flops"] is None and gemm["flops_source"] == "op shapes"
    assert gemm["flops"] == 2 * 1024 * 768 * 768 and gemm["flops_fp32"] > 0      # epilogue kept apart
    assert (gemm["gemm_m"], gemm["gemm_n"], gemm["gemm_k"], gemm["gemm_batch"]) == (1024, 768, 768, 1)
    clock = rows(gpt2_11b, "SELECT value FROM metrics WHERE launch_id = 10 AND metric = "
                           "'sm__cycles_elapsed.avg.per_second'")[0][0]
    assert gemm["peak_flops_per_s"] == pytest.approx(540_672 * clock)
    assert gemm["pct_of_peak"] == pytest.approx(100 * gemm["flops"] / (gemm["duration_ns"] * 1e-9) / gemm["peak_flops_per_s"])
    # within 2 % of what the counters read for the same launch (2·M·N·K exactly here)
    counted = _launch(gpt2_11b, 10)["tensor_flops"]
    assert gemm["flops"] == pytest.approx(counted, rel=0.02)
    # causal SDPA: emit_nvtx records no is_causal, so the full 4·B·H·S²·D is counted; cuDNN's name says
    # "f16" for any 16-bit type, so without counters its dtype, and its roof, are unknown
    sdpa = by_id[9]
    assert sdpa["flops_source"] == "op shapes (causal not recorded)" and sdpa["flops"] == 4 * 4 * 12 * 256 * 256 * 64
    assert sdpa["useful_flops"] is None          # the full work is an upper bound of the useful one
    assert sdpa["math_dtype"] == "unknown" and sdpa["peak_flops_per_s"] is None
    # kernels that are not an op's main GEMM/attention kernel keep their counters
    layer_norm = by_id[5]
    assert layer_norm["flops_source"] == "ncu CUDA-core counters" and layer_norm["gemm_m"] is None
