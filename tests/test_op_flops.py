"""Issue 18: FLOPs of framework ops from their input shapes (normalize/op_flops.py), each formula against a
hand computation on real shapes and arguments of the corpus traces (../shared/corpus/h100-2026-11 and
-11b trace.json: the cpu_op's "Input Dims" and "Concrete Inputs", copied as the profiler wrote them), and
the timeline columns they fill on the trimmed real traces of tests/data."""

from __future__ import annotations

import doctest
import json

import pytest
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import renormalize as renormalize_job
from kwarehouse.normalize import op_flops
from kwarehouse.store.warehouse import Warehouse


def test_doctests():
    assert doctest.testmod(op_flops).failed == 0


def args(*values: str) -> str:
    return json.dumps(list(values))


# -- GEMMs --------------------------------------------------------------------------------------------

def test_mm_of_compiled_mlp():
    # compiled_mlp's up projection: aten::mm out= variant, the output is its third input
    got = op_flops.op_flops("aten::mm", "[[4096, 2048], [2048, 8192], [4096, 8192]]", args("", "", ""))
    assert got.flops == 2 * 4096 * 8192 * 2048 == 137_438_953_472
    assert (got.m, got.n, got.k, got.batch, got.op_class) == (4096, 8192, 2048, 1, "gemm")


def test_addmm_skips_the_bias():
    # GPT-2's QKV projection: [bias, A, B, beta, alpha]
    got = op_flops.op_flops("aten::addmm", "[[2304], [1024, 768], [768, 2304], [], []]", args("", "", "", "1", "1"))
    assert got.flops == 2 * 1024 * 2304 * 768 == 3_623_878_656 and (got.m, got.n, got.k) == (1024, 2304, 768)


def test_lm_head_of_gpt2():
    got = op_flops.op_flops("aten::mm", "[[1024, 768], [768, 50257]]")
    assert got.flops == 2 * 1024 * 50257 * 768 and got.n == 50257


def test_bmm_and_batched_matmul():
    # llama's rotary-embedding bmm [[1, 32, 1], [1, 1, 512]] (fp32, runs on CUDA cores)
    got = op_flops.op_flops("aten::bmm", "[[1, 32, 1], [1, 1, 512]]")
    assert (got.flops, got.m, got.n, got.k, got.batch) == (2 * 32 * 512 * 1, 32, 512, 1, 1)
    # attention scores as a plain matmul: [B, H, S, D] x [B, H, D, S] -> batch B*H
    got = op_flops.op_flops("aten::matmul", "[[4, 12, 256, 64], [4, 12, 64, 256]]")
    assert (got.batch, got.m, got.n, got.k) == (48, 256, 256, 64) and got.flops == 48 * 2 * 256 * 256 * 64
    # baddbmm: [bias, A, B]
    got = op_flops.op_flops("aten::baddbmm", "[[48, 256, 256], [48, 256, 64], [48, 64, 256], [], []]")
    assert got.flops == 48 * 2 * 256 * 256 * 64


def test_linear_folds_leading_dims_into_m():
    # GPT-2's c_attn as emit_nvtx records aten::linear: x [4, 256, 768], W [2304, 768], bias
    got = op_flops.op_flops("aten::linear", "[[4, 256, 768], [2304, 768], [2304]]")
    assert (got.m, got.n, got.k, got.batch) == (1024, 2304, 768, 1) and got.flops == 3_623_878_656
    # a matmul whose right operand is 2-D folds the same way
    assert op_flops.op_flops("aten::matmul", "[[4, 256, 768], [768, 2304]]").m == 1024


def test_scaled_and_grouped_mm():
    got = op_flops.op_flops("aten::_scaled_mm", "[[4096, 4096], [4096, 4096], [], [], [], [], [], []]")
    assert got.flops == 2 * 4096 ** 3
    same = op_flops.op_flops("aten::_grouped_mm", "[[8, 128, 512], [8, 512, 256], []]")
    assert (same.flops, same.batch) == (8 * 2 * 128 * 256 * 512, 8)
    ragged = op_flops.op_flops("aten::_grouped_mm", "[[1024, 512], [8, 512, 256], [8]]")
    assert ragged.flops is None and "offsets" in ragged.note


def test_disagreeing_operands_give_no_flops():
    assert op_flops.op_flops("aten::mm", "[[4, 8], [9, 2]]").flops is None


# -- convolutions --------------------------------------------------------------------------------------

RESNET_CONV1 = ("[[32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]",
                args("", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"))
RESNET_DOWNSAMPLE = ("[[32, 64, 56, 56], [128, 64, 1, 1], [], [], [], [], [], [], []]",
                     args("", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"))


def test_conv_uses_the_recorded_stride_and_padding():
    # ResNet-18's stem: 7x7, stride 2, padding 3 -> 112 x 112 outputs: 2·N·K·C·R·S·P·Q
    got = op_flops.op_flops("aten::cudnn_convolution", *RESNET_CONV1)
    assert got.flops == 2 * 32 * 64 * 3 * 7 * 7 * 112 * 112 == 7_552_892_928 and got.note is None
    got = op_flops.op_flops("aten::cudnn_convolution", *RESNET_DOWNSAMPLE)   # 1x1, stride 2 -> 28 x 28
    assert got.flops == 2 * 32 * 128 * 64 * 28 * 28 == 411_041_792


def test_conv_without_arguments_assumes_the_output_size_and_says_so():
    # emit_nvtx records shapes only: the same-size assumption reads a stride-2 conv 4x high
    got = op_flops.op_flops("aten::cudnn_convolution", RESNET_CONV1[0])
    assert got.flops == 2 * 32 * 64 * 3 * 7 * 7 * 224 * 224 and got.note == op_flops.SAME_SIZE


def test_grouped_and_backward_conv():
    # depthwise 3x3, stride 1, padding 1 (aten::convolution arguments): weight [C, 1, 3, 3]
    got = op_flops.op_flops("aten::convolution", "[[8, 32, 56, 56], [32, 1, 3, 3], [], [], [], [], [], [], []]",
                            args("", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32"))
    assert got.flops == 2 * 8 * 32 * 1 * 9 * 56 * 56
    # backward of the stem: grad_output [32, 64, 112, 112] gives the output size; both grads = 2 forwards
    shapes = "[[32, 64, 112, 112], [32, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], [], []]"
    both = op_flops.op_flops("aten::convolution_backward", shapes, args(
        "", "", "", "[64]", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"))
    assert both.flops == 2 * 7_552_892_928
    weight_only = op_flops.op_flops("aten::convolution_backward", shapes, args(
        "", "", "", "[64]", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"))
    assert weight_only.flops == 7_552_892_928
    assumed = op_flops.op_flops("aten::convolution_backward", shapes)
    assert assumed.flops == 2 * 7_552_892_928 and "assumed" in assumed.note


# -- attention -----------------------------------------------------------------------------------------

GPT2_SDPA = ("[[4, 12, 256, 64], [4, 12, 256, 64], [4, 12, 256, 64], [], [], [], [], [], [], [], [], [], []]",
             args("", "", "", "", "", "", "256", "256", "False", "0.", "True", "False", "0.125"))


def test_attention_forward_is_halved_when_causal():
    got = op_flops.op_flops("aten::_cudnn_attention_forward", *GPT2_SDPA)
    assert got.flops == 4 * 4 * 12 * 256 * 256 * 64 // 2 == 402_653_184 and got.op_class == "attention"
    # llama's GQA: 16 query heads, 4 K/V heads; the work follows the queries
    got = op_flops.op_flops(
        "aten::_cudnn_attention_forward",
        "[[4, 16, 512, 64], [4, 4, 512, 64], [4, 4, 512, 64], [], [], [], [], [], [], [], [], [], []]",
        args("", "", "", "", "", "", "512", "512", "False", "0.", "True", "False", "0.125"))
    assert got.flops == 4 * 4 * 16 * 512 * 512 * 64 // 2
    # without the arguments (NVTX), the full work is counted and the note says why
    full = op_flops.op_flops("aten::_cudnn_attention_forward", GPT2_SDPA[0])
    assert full.flops == 4 * 4 * 12 * 256 * 256 * 64 and "is_causal" in full.note
    public = op_flops.op_flops("aten::scaled_dot_product_attention",
                               "[[4, 12, 256, 64], [4, 12, 256, 64], [4, 12, 256, 64], [], [], [], [], []]",
                               args("", "", "", "", "0.", "False", "", "False"))
    assert public.flops == 4 * 4 * 12 * 256 * 256 * 64


def test_attention_backward_is_two_and_a_half_forwards():
    # gpt2_train's _cudnn_attention_backward: grad_out, q, k, v, out, logsumexp, ... is_causal at 14
    shapes = ("[[4, 12, 256, 64], [4, 12, 256, 64], [4, 12, 256, 64], [4, 12, 256, 64], [4, 12, 256, 64], "
              "[4, 12, 256, 1], [], [], [], [], [], [], [], [], [], []]")
    got = op_flops.op_flops("aten::_cudnn_attention_backward", shapes, args(
        "", "", "", "", "", "", "", "", "", "", "", "256", "256", "0.10000000000000001", "True", "0.125"))
    assert got.flops == 2.5 * 402_653_184


def test_ops_without_a_formula_and_unreadable_shapes():
    assert op_flops.op_flops("aten::add", "[[4, 4], [4, 4]]") is None
    assert op_flops.op_flops("aten::mm", None) is None
    assert op_flops.op_flops("aten::mm", "[[4, 8], oops]") is None


@pytest.mark.parametrize("types, op, dtype", [
    ('["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]', "aten::addmm", "bf16"),
    ('["c10::Half", "c10::Half", "ScalarList", "ScalarList"]', "aten::cudnn_convolution", "fp16"),
    ('["float", "float"]', "aten::bmm", "fp32"),          # fp32, never tf32 from the inputs alone
    ('["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"]', "aten::_scaled_mm", "fp8_e4m3"),
    ('["Scalar"]', "aten::mm", None),
    (None, "aten::mm", None),
])
def test_op_dtype_from_input_types(types, op, dtype):
    assert op_flops.op_dtype(types, op) == dtype


# -- the timeline columns, on the trimmed real traces ----------------------------------------------------

@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Warehouse:
    warehouse = Warehouse(tmp_path_factory.mktemp("traces") / "wh")
    report = ingest_job.ingest([DATA / "torch-trace-compiled_mlp", DATA / "torch-trace-gpt2_train",
                              DATA / "ncu-rep-compiled-mlp"], warehouse)
    assert report.failed == []
    return warehouse


def test_trace_ops_give_their_main_kernel_the_flops(traces):
    got = rows(traces, "SELECT framework_op, framework_op_id, op_dtypes, math_dtype, flops, flops_source, gemm_m, "
                       "gemm_n, gemm_k, gemm_batch FROM kernel_launches WHERE model = 'compiled_mlp' AND flops > 0 "
                       "ORDER BY launch_index LIMIT 1")
    assert got == [("aten::mm", 7, '["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]', "bf16",
                    137_438_953_472.0, "op shapes", 4096, 8192, 2048, 1)]
    # 12 aten::mm, 12 kernels with FLOPs, none on the Triton kernels; 70-90 % of the BF16 datasheet peak
    (count, low, high), = rows(traces, "SELECT count(*), min(pct_of_peak), max(pct_of_peak) FROM kernel_launches "
                                       "WHERE model = 'compiled_mlp' AND flops IS NOT NULL")
    assert count == 12 and 70 < low <= high < 90
    assert rows(traces, "SELECT count(*) FROM kernel_launches WHERE model = 'compiled_mlp' AND flops IS NOT NULL "
                        "AND kernel_name LIKE 'triton%'") == [(0,)]


def test_an_ops_other_kernels_get_none(traces):
    # gpt2_train's causal SDPA (dropout 0.1) launches cuDNN's philox unpack and a memset first: the
    # attention kernel gets the op's FLOPs, the others none; the args say is_causal, so they are halved
    got = rows(traces, "SELECT op_class, flops, op_args FROM kernel_launches WHERE model = 'gpt2_train' AND "
                       "framework_op = 'aten::_cudnn_attention_forward' ORDER BY launch_index")
    assert [(c, f) for c, f, _ in got] == [("rng", None), ("memset/memcpy", None), ("attention", 402_653_184.0)]
    assert json.loads(got[2][2])[10] == "True"
    # every GEMM op instance gives its FLOPs to exactly one kernel
    assert rows(traces, "SELECT max(n) FROM (SELECT count(flops) AS n FROM kernel_launches "
                        "WHERE flops IS NOT NULL GROUP BY run_id, framework_op_id)") == [(1,)]


def test_ncu_launches_without_nvtx_borrow_the_timelines_shapes(traces):
    # compiled_mlp's ncu run has no NVTX: its nvjet GEMM keeps its CUDA-core counters in kernels, and
    # timeline_shape_flops gives the trace's FLOPs for the same kernel and launch shape (both mm shapes
    # have the same FLOPs, their K and N differ: those stay NULL)
    (source, flops), = rows(traces, "SELECT DISTINCT flops_source, NULL FROM kernels WHERE kernel_name LIKE 'nvjet%'")
    assert source == "ncu CUDA-core counters"
    got = rows(traces, "SELECT s.flops, s.flops_source, s.framework_op, s.gemm_m, s.gemm_n, s.gemm_k, s.math_dtype, "
                       "s.timeline_launches, s.timeline_runs FROM kernels k JOIN timeline_shape_flops s USING "
                       "(model, gpu, kernel_id, grid_size, block_size) WHERE k.kernel_name LIKE 'nvjet%' LIMIT 1")
    assert got == [(137_438_953_472.0, "op shapes (timeline)", "aten::mm", 4096, None, None, "bf16", 12, 1)]


def test_renormalize_fills_the_flops_of_an_older_timeline(traces, tmp_path):
    import shutil

    import pyarrow.parquet as pq
    from test_normalize import table_folder_path

    from kwarehouse.store import catalog, files
    copy = Warehouse(shutil.copytree(traces.root, tmp_path / "wh"))
    copy.refresh_duckdb()
    before = rows(copy, "SELECT * FROM kernel_launches ORDER BY run_id, launch_index")
    assert renormalize_job.renormalize(copy).unchanged == 3
    for link in copy.committed_files("kernel_launches"):   # as a kwh before these columns wrote them
        path = table_folder_path(copy, link)
        table = pq.read_table(link)
        old = path.with_name(path.name.replace(f".{files.current_schema_mark('kernel_launches')}", ""))
        pq.write_table(table.drop_columns(["math_dtype", "flops", "flops_source", "achieved_flops_per_s",
                                           "peak_flops_per_s", "pct_of_peak", "gemm_m", "gemm_n", "gemm_k",
                                           "gemm_batch"]), old)
        path.unlink()
        link.unlink()
        with copy.engine.begin() as con:
            for listing in (catalog.catalog_parquet, catalog.catalog_parquet_runs):
                con.execute(listing.update().where(listing.c.path == path.relative_to(copy.root).as_posix())
                            .values(path=old.relative_to(copy.root).as_posix()))
    copy.refresh_duckdb()
    assert rows(copy, "SELECT count(flops) FROM kernel_launches") == [(0,)]
    assert renormalize_job.renormalize(copy).changed
    assert rows(copy, "SELECT * FROM kernel_launches ORDER BY run_id, launch_index") == before
