"""Issue 18, the performance model: the peak table, tensor-core FLOPs from ncu's counters, the roof of
each launch's math dtype and the share of it reached, on real exports."""

from __future__ import annotations

import doctest

import pytest

from kwarehouse.normalize import peaks

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

