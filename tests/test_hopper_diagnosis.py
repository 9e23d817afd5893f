"""Issue 33.3 (rest): Hopper GEMM diagnosis on real H100 captures. Neighbouring GEMMs on one input (Llama's
q/k/v and gate/up projections) as a bounded fusion candidate; the K-loop length (short K: prologue/epilogue-
dominated, not short of ILP); the L2-resident memory floor and the compute floor at the GPU's highest clock on
warm timelines; model_efficiency's NULL (not 0) where a column's basis is missing. Fixtures:
tests/data/gemm-trace-llama-h100 (the corpus llama trace trimmed to its first layer, tools/trim_torch_trace.py),
ncu-llama-h100-variants (its ncu export: the GPU's DRAM peak), tensor-ncu-gpt2-h100 + torch-trace-gpt2 (ncu with
the tensor and hierarchical roofline sections: L2 peak, tensor peak per cycle) and nsys-sqlite-rtx3090."""

from __future__ import annotations

import pytest
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store.warehouse import Warehouse

SHARED = "GEMMs sharing an input (fusion candidate)"
BF16_DATASHEET = 989.5e12     # gpu_peaks.csv, H100 SXM dense BF16: the trace's roof (no clock measured)


def _warehouse(tmp_path_factory, name: str, *folders: str) -> Warehouse:
    warehouse = Warehouse(tmp_path_factory.mktemp(name) / "wh")
    assert ingest_job.ingest([DATA / f for f in folders], warehouse).failed == []
    return warehouse


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Warehouse:
    return _warehouse(tmp_path_factory, "llama", "gemm-trace-llama-h100", "ncu-llama-h100-variants")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Warehouse:
    return _warehouse(tmp_path_factory, "gpt2", "tensor-ncu-gpt2-h100", "torch-trace-gpt2")


def _dram_peak(warehouse: Warehouse) -> float:
    return rows(warehouse, "SELECT max(peak_dram_bytes_per_s) FROM kernels")[0][0]


def test_gate_up_and_qkv_projections_share_their_input(llama):
    """Layer 0 of the Llama trace: q_proj [2048, 1024, 1024], k_proj and v_proj [2048, 256, 1024] back to back
    (one input: the normed hidden states), then attention, o_proj, the residual add and RMSNorm (9 kernels),
    gate_proj [2048, 2816, 1024], SiLU of its output, up_proj [2048, 2816, 1024], mul, down_proj (K = 2816).
    Two groups: q/k/v and gate/up; o_proj and gate_proj (same M and K, another A) are not neighbours."""
    got = rows(llama, "SELECT subject, launches, gpu_time_ns, floor_ns, est_time_saved_ns, evidence, fix, basis "
                      f"FROM design_signals WHERE signal = '{SHARED}' ORDER BY subject")
    assert [(s, n) for s, n, *_ in got] == [
        ("aten::mm x2 [2048, 2816 + 2816, 1024] bf16 on nvjet_sm90_tst_176x128_64x5_1x2_h_bz_TNN", 2),
        ("aten::mm x3 [2048, 1024 + 256 + 256, 1024] bf16 on nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT / "
         "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT", 3)]
    peak = _dram_peak(llama)
    a_read_ns = 2048 * 1024 * 2 / peak * 1e9          # A [2048, 1024] bf16 read once more per shorter member
    (_, _, time_ns, floor_ns, est, evidence, fix, basis), (_, _, qkv_ns, qkv_floor, qkv_est, *_) = got
    # gate/up: the shorter member is up_proj, 18.017 us in the trace; its floor is its FLOPs at 80 % of the
    # BF16 datasheet peak, 2 x 2048 x 2816 x 1024 / (0.8 x 989.5e12) = 14.92 us (its 21.5 MB at the DRAM peak:
    # 6.4 us). The saving is the re-read of A, 1.25 us, below the 3.1 us above the floor
    assert time_ns == 18017
    assert floor_ns == pytest.approx(2 * 2048 * 2816 * 1024 / (0.8 * BF16_DATASHEET) * 1e9)
    assert est == pytest.approx(a_read_ns) and est <= time_ns - floor_ns
    assert basis == "kernel time" and "gate_up_proj" in fix
    assert "N = 2816 + 2816" in evidence and "A: 4.19 MB" in evidence and "launch gaps" in evidence
    # q/k/v: k_proj and v_proj (5.185 + 4.640 us) each re-read A: two re-reads, within their time above floor
    assert qkv_ns == 5185 + 4640
    assert qkv_est <= 2 * a_read_ns + 1e-6 and qkv_est <= qkv_ns - qkv_floor


def test_a_kernel_between_is_allowed_only_up_to_the_threshold(llama, tmp_path):
    """With no kernel allowed between neighbours, gate/up (SiLU between them) is no longer a pair; q/k/v is."""
    import shutil
    root = tmp_path / "wh"
    shutil.copytree(llama.root, root)
    (root / "views").mkdir(exist_ok=True)
    (root / "views" / "bottleneck_thresholds.csv").write_text("name,value\nneighbour_kernels_between,0\n")
    got = [s for s, in rows(Warehouse(root), f"SELECT subject FROM design_signals WHERE signal = '{SHARED}'")]
    assert len(got) == 1 and got[0].startswith("aten::mm x3 [2048, 1024 + 256 + 256, 1024]")


def test_the_k_loop_is_read_from_the_kernel_name(llama):
    """nvjet_sm90_tst_64x64_64x13: 64x64 tiles, 64-wide k-tiles, 13 stages; K = 1024 is 16 k-iterations, longer
    than the 13-stage pipeline and the 4-iteration limit: not short. The K = 1 bmm is short (and tiny)."""
    got = {(m, n, k): rest for m, n, k, *rest in rows(
        llama, "SELECT m, n, k, k_tile, pipeline_stages, k_iterations, short_k, diagnosis FROM gemm_efficiency")}
    assert got[2048, 256, 1024] == [64, 13, 16, False, "memory-bound shape: judged against its memory floor"]
    assert got[2048, 2816, 1024] == [64, 5, 16, False, "compute-bound shape"]
    assert got[32, 512, 1][2:] == [1, True, "tiny problem: launch overhead"]


def test_a_short_k_gemm_is_prologue_dominated_not_short_of_ilp(llama, tmp_path):
    """Raise short_k_iterations to 16: k_proj/v_proj [2048, 256, 1024] (16 k-iterations) become short-K GEMMs.
    Their verdict: prologue/epilogue-dominated, fix a larger (batched/fused) GEMM without split-K, estimate the
    GEMM at its roof: max(its bytes at 90 % of their memory level's peak, its FLOPs at 80 % of the BF16 peak),
    bounded by the time above its floor; no longer a 'low tensor efficiency' GEMM. Its 2.88 MB a launch fit the
    50 MiB L2 of a warm timeline and this ncu export has no L2 peak: no memory term, the compute floor binds."""
    import shutil
    root = tmp_path / "wh"
    shutil.copytree(llama.root, root)
    (root / "views").mkdir(exist_ok=True)
    (root / "views" / "bottleneck_thresholds.csv").write_text("name,value\nshort_k_iterations,16\n")
    warehouse = Warehouse(root)
    (short_k, diagnosis, evidence, time_ns, floor_ns, est), = rows(
        warehouse, "SELECT short_k, diagnosis, evidence, gpu_time_ns, floor_ns, est_time_saved_ns FROM gemm_efficiency "
                   "WHERE m = 2048 AND n = 256 AND k = 1024")
    assert short_k and diagnosis == "short K loop: prologue/epilogue-dominated"
    assert "K = 1024 is 16 k-iteration(s) of 64 in a 13-stage pipeline" in evidence and "not short of ILP" in evidence
    launches = 2
    assert rows(warehouse, "SELECT l2_resident, memory_floor_ns FROM gemm_efficiency WHERE n = 256") == [(True, None)]
    roof_ns = 2 * 2048 * 256 * 1024 * launches / (0.8 * BF16_DATASHEET) * 1e9
    assert floor_ns == pytest.approx(roof_ns) and time_ns == 5185 + 4640
    assert est == pytest.approx(time_ns - roof_ns)
    signals = dict(rows(warehouse, "SELECT signal, fix FROM design_signals WHERE subject LIKE 'aten::mm [2048, 256, 1024]%'"))
    assert "GEMM/conv/attention at low tensor efficiency" not in signals
    assert "avoid split-K" in signals["short-K GEMM (prologue/epilogue-dominated)"] or \
        "torch.bmm or a grouped GEMM" in signals["short-K GEMM (prologue/epilogue-dominated)"]


def test_warm_timeline_floors_use_l2_and_the_highest_clock(gpt2):
    """GPT-2's QKV addmm [1024, 768, 2304] moves 8.39 MB a launch: within the 50 MiB L2 ncu reports
    (device__attribute_l2_cache_size 52,428,800), so on the warm timeline its memory floor is those bytes at the
    L2 peak ncu measured, not the DRAM peak; its compute floor takes the BF16 peak at the GPU's highest clock
    (ncu's tensor peak per cycle x 1.98 GHz), which a timeline, measuring no clock, may reach."""
    (launches, l2_resident, memory_floor, dram_floor, compute_floor, basis), = rows(
        gpt2, "SELECT launches, l2_resident, memory_floor_ns, dram_floor_ns, compute_floor_ns, floor_basis "
              "FROM gemm_efficiency WHERE m = 1024 AND n = 2304 AND k = 768 AND time_basis = 'timeline'")
    l2_size, l2_peak, dram_peak, per_cycle_at_max = rows(gpt2, """
        SELECT (SELECT max(value) FROM metrics WHERE metric = 'device__attribute_l2_cache_size'),
               max(peak_l2_bytes_per_s), max(peak_dram_bytes_per_s),
               max(CASE WHEN flops_source = 'ncu tensor counters' AND math_dtype = 'bf16'
                        THEN peak_flops_per_s / sm_clock_hz * max_sm_clock_hz END) FROM kernels""")[0]
    assert l2_size == 52_428_800 and 8.5e12 < l2_peak < 8.8e12 and per_cycle_at_max == pytest.approx(540_672 * 1.98e9)
    compulsory = (1024 * 768 + 768 * 2304 + 1024 * 2304) * 2
    assert l2_resident and compulsory <= l2_size
    assert memory_floor == pytest.approx(launches * compulsory / l2_peak * 1e9)
    assert dram_floor == pytest.approx(launches * compulsory / dram_peak * 1e9) and memory_floor < dram_floor
    assert compute_floor == pytest.approx(launches * 2 * 1024 * 2304 * 768 / (0.8 * per_cycle_at_max) * 1e9)
    assert basis.startswith("compute:") and "at the GPU's highest clock" in basis


def test_model_efficiency_is_null_where_its_basis_is_missing(tmp_path_factory):
    """A trimmed ncu replay of Llama (embedding and elementwise kernels, no timeline, no shapes) and an nsys
    capture on an RTX 3090 whose kernels no rule classifies: no MFU without a span or useful FLOPs, no tensor-
    busy share without an op class, no throttled share without a measured clock: NULL, and missing_data says why.
    A share whose basis exists stays a number: the Llama replay runs no tensor kernel, 0 %."""
    warehouse = _warehouse(tmp_path_factory, "modeleff", "ncu-llama-h100-variants", "nsys-sqlite-rtx3090")
    got = {m: rest for m, *rest in rows(warehouse, "SELECT model, mfu_pct, mfu_busy_pct, tensor_busy_pct, "
                                                   "throttled_pct, missing_data FROM model_efficiency")}
    mfu, mfu_busy, tensor, throttled, missing = got["llama"]
    assert (mfu, mfu_busy, tensor, throttled) == (None, None, 0.0, 0.0)
    assert "mfu_pct, idle_pct: no timeline span" in missing and "mfu_pct, mfu_busy_pct: no useful FLOPs" in missing
    mfu, mfu_busy, tensor, throttled, missing = got["nsys-sqlite-rtx3090"]
    assert (mfu, mfu_busy, tensor, throttled) == (None, None, None, None)
    assert "tensor_busy_pct: no kernel with a known op class" in missing
    assert "throttled_pct: no SM clock measured" in missing
