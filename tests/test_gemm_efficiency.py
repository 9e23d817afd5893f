"""Issue 18: the gemm_efficiency view (and timeline_shape_flops), checked by hand on the trimmed real
exports of tests/data and, where ../shared is present, on the corpus."""

from __future__ import annotations

import subprocess

import pytest
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.normalize import peaks
from kwarehouse.store.warehouse import Warehouse

H100 = "NVIDIA H100 80GB HBM3"
COLUMNS = ["model", "gpu", "op", "m", "n", "k", "batch", "math_dtype", "kernel_id", "launches", "gpu_time_ns",
           "tflops", "pct_of_peak", "misaligned", "wave_fill_pct", "est_time_saved_ns"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Warehouse:
    """compiled_mlp (its torch trace and its ncu report without NVTX) and GPT-2's first 40 GPU events."""
    warehouse = Warehouse(tmp_path_factory.mktemp("gemm") / "wh")
    report = ingest_job.ingest([DATA / "torch-trace-compiled_mlp", DATA / "ncu-rep-compiled-mlp",
                              DATA / "torch-trace-gpt2"], warehouse)
    assert report.failed == []
    return warehouse


def _rows(warehouse: Warehouse, where: str = "TRUE") -> list[dict]:
    con = warehouse.connect()
    try:
        cursor = con.execute(f"SELECT * FROM gemm_efficiency WHERE {where} ORDER BY model, gpu_time_ns DESC")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, r)) for r in cursor.fetchall()]
    finally:
        con.close()


def test_the_issue_names_the_columns(fleet):
    con = fleet.connect()
    names = [d[0] for d in con.execute("SELECT * FROM gemm_efficiency LIMIT 0").description]
    con.close()
    assert names[:len(COLUMNS)] == COLUMNS
    assert {"evidence", "estimate_basis", "time_basis", "kernel_base", "wave_basis"} <= set(names)


def test_compiled_mlp_gemm_by_hand(fleet):
    """The nvjet GEMM of compiled_mlp's up/gate projections ([4096, 2048] x [2048, 8192], 8 launches in
    the trace's two iterations): TFLOP/s from the trace's own durations, 70-90 % of the BF16 peak."""
    (row,) = _rows(fleet, "model = 'compiled_mlp' AND n = 8192")
    durations = [d for d, in rows(fleet, "SELECT duration_ns FROM kernel_launches WHERE model = 'compiled_mlp' "
                                         "AND gemm_n = 8192")]
    assert (row["op"], row["m"], row["n"], row["k"], row["batch"], row["math_dtype"]) == (
        "aten::mm", 4096, 8192, 2048, 1, "bf16")
    assert row["launches"] == len(durations) == 8 and row["gpu_time_ns"] == sum(durations)
    flops = 2 * 4096 * 8192 * 2048 * 8
    assert row["tflops"] == pytest.approx(flops / (sum(durations) * 1e-9) / 1e12)
    peak = peaks.peak(H100, "bf16").tensor_dense_flops_per_s
    assert row["pct_of_peak"] == pytest.approx(100 * flops / (sum(durations) * 1e-9) / peak)
    assert 70 < row["pct_of_peak"] < 90
    assert row["time_basis"] == "timeline" and row["misaligned"] is False and row["tiny"] is False
    # nvjet is persistent: grid 132 on 132 SMs, one full wave; ncu measured it (its report has no NVTX,
    # the kernel and grid join it to the trace)
    assert row["wave_basis"] == "ncu waves_per_sm" and row["wave_fill_pct"] == pytest.approx(100)
    # the estimate compares with the other well-shaped GEMM on the GPU (the down projection, 84 %)
    other = _rows(fleet, "model = 'compiled_mlp' AND n = 2048")[0]
    assert row["estimate_basis"].startswith("ESTIMATE: time at ") and "4096x2048x8192" in row["estimate_basis"]
    expected_ns = flops / (other["pct_of_peak"] / 100 * peak) * 1e9
    # ... but never more than the time above its floor: its FLOPs at 80 % of the BF16 peak (issue 33.1;
    # the down projection's 84 % is faster than that floor, so the floor binds: 17.5 us, not 79.3 us)
    floor_ns = flops / (0.8 * peak) * 1e9
    assert row["floor_ns"] == pytest.approx(floor_ns) and row["shape_class"] == "compute-bound shape"
    assert row["est_time_saved_ns"] == pytest.approx(
        min(max(0.0, row["gpu_time_ns"] - expected_ns), row["gpu_time_ns"] - floor_ns))
    assert row["est_time_saved_ns"] < row["gpu_time_ns"] - expected_ns


def test_gpt2_gemms_and_no_attention(fleet):
    got = _rows(fleet, "model = 'gpt2'")
    # addmm [bias, A, B]: M = 1024 tokens, the three projections and the MLP of the first layers
    assert {(r["op"], r["m"], r["n"], r["k"]) for r in got} == {
        ("aten::addmm", 1024, 2304, 768), ("aten::addmm", 1024, 768, 768), ("aten::addmm", 1024, 3072, 768),
        ("aten::addmm", 1024, 768, 3072)}
    for r in got:
        assert not r["misaligned"] and r["est_time_saved_ns"] >= 0 and 0 < r["pct_of_peak"] < 100


def test_an_ncu_only_model_uses_ncu_time_and_its_own_roof(tmp_path):
    """GPT-2 profiled by ncu with NVTX and the tensor roofline section, no timeline: ncu's durations are
    the time, and the roof is ncu's BF16 peak per cycle x the SM clock it measured."""
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest([DATA / "tensor-ncu-gpt2-h100"], warehouse).failed == []
    (row,) = _rows(warehouse, "n = 768 AND k = 768")
    (duration, peak), = rows(warehouse, "SELECT duration_ns, peak_flops_per_s FROM kernels WHERE launch_id = 10")
    assert row["time_basis"] == "ncu replay" and row["launches"] == 1 and row["gpu_time_ns"] == duration
    assert row["pct_of_peak"] == pytest.approx(100 * 2 * 1024 * 768 * 768 / (duration * 1e-9) / peak)
    assert row["wave_basis"] == "ncu waves_per_sm"


def test_timeline_shape_flops_needs_agreement(fleet):
    # both compiled_mlp GEMM shapes run one nvjet kernel with one grid: same FLOPs and M, different N, K
    (got,) = rows(fleet, "SELECT flops, gemm_m, gemm_n, gemm_k, timeline_launches FROM timeline_shape_flops "
                         "WHERE model = 'compiled_mlp'")
    assert got == (2.0 * 4096 * 8192 * 2048, 4096, None, None, 12)


CORPUS = DATA.parents[2] / "shared" / "corpus" / "h100-2026-11"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Warehouse:
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus not present")
    root = tmp_path_factory.mktemp("corpus")
    for model in ("compiled_mlp", "gpt2", "llama"):
        subprocess.run(["tar", "xJf", str(CORPUS / f"{model}.tar.xz"), "-C", str(root), f"{model}/trace.json",
                        f"{model}/{model}.raw.csv", f"{model}/manifest.ncu.json", f"{model}/manifest.torchprof.json",
                        f"{model}/ncu_version.txt"], check=True)
    warehouse = Warehouse(root / "wh")
    assert ingest_job.ingest([root / m for m in ("compiled_mlp", "gpt2", "llama")], warehouse).failed == []
    return warehouse


def test_corpus_expectations_of_the_issue(corpus):
    # compiled_mlp's nvjet GEMMs: 70-90 % of the H100's BF16 peak
    mlp = _rows(corpus, "model = 'compiled_mlp'")
    assert len(mlp) == 2 and all(70 < r["pct_of_peak"] < 90 for r in mlp)
    # llama's MLP GEMM 2048 x 2816 x 1024: near 60 % (its real time in the trace: ~65 %)
    (llama,) = _rows(corpus, "model = 'llama' AND m = 2048 AND n = 2816 AND k = 1024")
    assert 55 < llama["pct_of_peak"] < 72 and not llama["misaligned"]
    # GPT-2's lm_head (vocabulary 50,257): misaligned, an sm75 CUTLASS fallback, < 20 % of peak, and time
    # to save at the efficiency of the nearest well-shaped GEMM
    (head,) = _rows(corpus, "model = 'gpt2' AND n = 50257")
    assert head["misaligned"] and head["pct_of_peak"] < 20 and head["est_time_saved_ns"] > 0
    assert "N = 50257 not a multiple of 8" in head["evidence"] and "cutlass_75" in head["evidence"]
    assert head["estimate_basis"].startswith("ESTIMATE")
    # it is the GEMM with the most time to save in this fleet
    assert max(_rows(corpus), key=lambda r: r["est_time_saved_ns"] or 0)["n"] == 50257
