"""The normalizer, step by step, on real names and exports from the corpus."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from conftest import DATA, rows

from kwarehouse import normalize
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import renormalize as renormalize_job
from kwarehouse.errors import InputError
from kwarehouse.normalize import classify, identity, nvtx
from kwarehouse.store.warehouse import Warehouse

PAIRS = DATA / "kernel-names" / "pairs.csv"
MATH_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "unknown")




def pairs() -> list[dict]:
    with open(PAIRS, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def distinct_names() -> list[str]:
    names = set()
    for row in pairs():
        names |= {row["ncu_name"], row["trace_name"]} | ({row["ncu_mangled"]} if row["ncu_mangled"] else set())
    return sorted(names)


# -- demangle ------------------------------------------------------------------------------------

def test_demangle_gives_the_full_cxx_name():
    assert identity.demangle("_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb") == (
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)")


def test_demangle_leaves_plain_and_broken_names_alone():
    assert identity.demangle("saxpy") == "saxpy"
    assert identity.demangle("_Zgarbage") == "_Zgarbage"


# -- identity ------------------------------------------------------------------------------------

def test_the_name_pairs_fixture_is_aligned_and_large_enough():
    table = pairs()
    assert all(row["ncu_grid"] == row["trace_grid"] for row in table)
    assert len(table) == 455 and len(distinct_names()) >= 150


@pytest.mark.parametrize("row", pairs(), ids=lambda r: f"{r['model']}-{r['position']}")
def test_every_tool_gives_a_launch_the_same_identity(row):
    ncu, trace = identity.identify(row["ncu_name"]), identity.identify(row["trace_name"])
    assert (ncu.kernel_id, ncu.kernel_base, ncu.kernel_signature) == (
        trace.kernel_id, trace.kernel_base, trace.kernel_signature)
    if row["ncu_mangled"]:
        mangled = identity.identify(row["ncu_mangled"])
        assert (mangled.kernel_id, mangled.kernel_base) == (ncu.kernel_id, ncu.kernel_base)


def test_issue_example_ncu_and_cupti_spellings_are_one_kernel():
    ncu = "void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<c10::BFloat16>, std::array<char *, 3>>(int, T2, T3)"
    cupti = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
             "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
    a, b = identity.identify(ncu), identity.identify(cupti)
    assert a == identity.Identity(ncu, "at::native::vectorized_elementwise_kernel",
                                  "vectorized_elementwise_kernel<8,CUDAFunctor_add<BFloat16>,array<char*,3>>",
                                  a.kernel_id)
    assert (b.kernel_base, b.kernel_signature, b.kernel_id) == (a.kernel_base, a.kernel_signature, a.kernel_id)
    assert len(a.kernel_id) == 16 and int(a.kernel_id, 16) >= 0


@pytest.mark.parametrize("ncu, cupti", [
    # <unnamed> vs (anonymous namespace), 0 vs false
    ("void at::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, 0>(int, T2, const T1 *)",
     "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, c10::BFloat16 const*)"),
    # [lambda() (instance 2)] vs {lambda()#2}, operator ()() vs operator()()
    ("void at::vectorized_elementwise_kernel<4, at::cos_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 2)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, 2>>(int, T2, T3)",
     "void at::native::vectorized_elementwise_kernel<4, at::native::cos_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::cos_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)"),
    # C casts in template arguments, versioned inline namespaces
    ("void engines_precompiled::nchwToNhwcKernel<__half, __half, float, 0, 1, 0>(engines_precompiled::nchw2nhwc_params_t<T3>, const T1 *, T2 *)",
     "void cudnn::engines_precompiled::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __half const*, __half*)"),
    ("void cub::DeviceReduceSingleTileKernel<cub::policy_hub<float, unsigned int, cuda::plus<void>>::Policy1000, float *, float *, int, cuda::plus<void>, float, float, cuda::identity>(T2, T3, T4, T5, T6, T8)",
     "void cub::CUB_300102_SM_750_800_860_890_900_1000_1200::detail::reduce::DeviceReduceSingleTileKernel<cub::CUB_300102_SM_750_800_860_890_900_1000_1200::detail::reduce::policy_hub<float, unsigned int, cuda::std::__4::plus<void> >::Policy1000, float*, float*, int, cuda::std::__4::plus<void>, float, float, cuda::std::__4::identity>(float*, float*, int, cuda::std::__4::plus<void>, float, cuda::std::__4::identity)"),
])
def test_spelling_differences_do_not_change_identity(ncu, cupti):
    a, b = identity.identify(ncu), identity.identify(cupti)
    assert (a.kernel_base, a.kernel_signature) == (b.kernel_base, b.kernel_signature)


def test_what_tells_kernels_apart_is_kept():
    def sig(name):
        return identity.identify(name).kernel_signature
    add = "void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<{}>, std::array<char *, 3>>(int, T2, T3)"
    assert sig(add.format("c10::BFloat16")) != sig(add.format("c10::Half"))   # dtype
    assert sig("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT") != sig("nvjet_sm90_tst_64x64_64x13_2x1_v_bz_TNT")  # tile
    assert sig("void at::vectorized_elementwise_kernel<4, at::sin_kernel_cuda(at::TensorIteratorBase &)::"
               "[lambda() (instance 2)]>(int, T2, T3)") != sig(
           "void at::vectorized_elementwise_kernel<4, at::cos_kernel_cuda(at::TensorIteratorBase &)::"
           "[lambda() (instance 2)]>(int, T2, T3)")                              # functor
    assert sig("triton_poi_fused__unsafe_view_add_3") == sig("triton_poi_fused__unsafe_view_add_0")  # counter


def test_kernel_base_is_completed_from_known_scopes():
    assert identity.kernel_base("void philox::unpack_cudnn(at::PhiloxCudaState, long *, long *)") == (
        "at::cuda::philox::unpack_cudnn")
    assert identity.kernel_base("void cnn::kern_precompute_indices<0>(int *, int)") == "cudnn::cnn::kern_precompute_indices"
    # an ATen kernel the known list lacks: the at:: prefix rule completes it
    assert identity.kernel_base("void at::brand_new_kernel<float>(T1 *)") == "at::native::brand_new_kernel"
    # a deeper name is no abbreviation
    assert identity.kernel_base("void at::cuda::other_kernel(int)") == "at::cuda::other_kernel"
    assert identity.kernel_base("saxpy") == "saxpy"


def test_identity_of_every_distinct_corpus_name(golden):
    lib, ops = classify.builtin_rules("library"), classify.builtin_rules("op_class")
    impl = classify.builtin_rules("implementation")
    out = []
    for name in distinct_names():
        ident = identity.identify(name)
        values = {"kernel_name": ident.kernel_name, "kernel_base": ident.kernel_base,
                  "kernel_signature": ident.kernel_signature}
        library = classify.classify(lib, values)
        implementation = classify.classify(impl, values)
        out.append((name, ident.kernel_base, ident.kernel_signature, ident.kernel_id, library,
                    classify.classify(ops, values),
                    library if implementation == classify.UNKNOWN else implementation, ident.kernel_display))
    golden("kernel_identity", ["name", "kernel_base", "kernel_signature", "kernel_id", "library", "op_class",
                               "implementation", "kernel_display"], out)


# -- classification ------------------------------------------------------------------------------

def test_every_corpus_kernel_gets_a_named_library_and_op_class():
    lib, ops = classify.builtin_rules("library"), classify.builtin_rules("op_class")
    for name in distinct_names():
        ident = identity.identify(name)
        values = {"kernel_name": ident.kernel_name, "kernel_base": ident.kernel_base,
                  "kernel_signature": ident.kernel_signature}
        assert classify.classify(lib, values) != classify.UNKNOWN, name
        assert classify.classify(ops, values) != classify.UNKNOWN, name


@pytest.mark.parametrize("name, library, op_class", [
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "cuBLAS", "gemm"),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "cuDNN", "conv"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", "cuDNN", "attention"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(T1::Params)", "cuBLAS", "gemm"),
    ("triton_red_fused__fused_rms_norm_0", "Triton", "normalization"),
    ("triton_poi_fused__unsafe_view_mul_silu_1", "Triton", "elementwise"),
    ("void native::<unnamed>::cunn_SoftMaxForward<4, float, float, float, native::<unnamed>::LogSoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "PyTorch ATen", "softmax"),
    ("void cub::DeviceReduceKernel<cub::policy_hub<float, unsigned int, cuda::plus<void>>::Policy1000, float *, unsigned int, cuda::plus<void>, float, cuda::identity>(T2, T5 *, T3, cub::GridEvenShare<T3>, T4, T6)", "CUB/Thrust", "reduction"),
    ("saxpy", "custom", "elementwise"),
    ("naive_sgemm", "custom", "gemm"),
    ("void philox::unpack_cudnn(at::PhiloxCudaState, long *, long *)", "PyTorch ATen", "rng"),
])
def test_library_and_op_class_of_real_names(name, library, op_class):
    ident = identity.identify(name)
    values = {"kernel_name": ident.kernel_name, "kernel_base": ident.kernel_base,
              "kernel_signature": ident.kernel_signature}
    assert classify.classify(classify.builtin_rules("library"), values) == library
    assert classify.classify(classify.builtin_rules("op_class"), values) == op_class


# Real names (corpus and tests/data) with the precision they compute in. The nvjet and xmma ones are
# confirmed by ncu's tensor counters in ../shared/corpus/h100-2026-11b (sm__ops_path_tensor_src_bf16_dst_fp32
# for gpt2/llama's tst GEMMs, src_fp16 for resnet18's f16f16 convolutions and hsh addmm); cuDNN's generated
# SDPA kernel says f16 but runs bf16 in gpt2 (its counters), so its name alone gives unknown.
REAL_DTYPE_NAMES = [
    ("nvjet_sm90_tst_176x128_64x5_1x2_h_bz_TNN", "bf16"),
    ("nvjet_sm90_tst_192x96_64x5_2x1_v_bz_coopB_bias_NNT", "bf16"),
    ("nvjet_sm90_hsh_64x8_64x16_2x4_h_bz_bias_TNT", "fp16"),
    # the cuBLAS candidates XLA timed for the bf16 x @ w of tests/data/profile-h100/jax_step
    ("nvjet_sm90_tss_64x128_64x8_2x1_v_bz_TNN", "bf16"),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "fp16"),
    ("sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_tensor1688_execute_kernel_kernel__5x_cudnn", "fp16"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", "unknown"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(T1::Params)", "bf16"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn_align8>(T1::Params)", "bf16"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(T1::Params)", "fp32"),
    ("void precomputed_convolve_sgemm<__half, 128, 6, 7, 3, 3, 5, 1, 0>(int, int, int, const T1 *, int, T1 *, "
     "const T1 *, kernel_conv_params, unsigned long long, int, float, float, int, bool, bool, const T1 *)", "fp32"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, "
     "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>>", "bf16"),
    ("triton_poi_fused__unsafe_view_mul_silu_1", "unknown"),
    ("void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<c10::BFloat16>, std::array<char *, 3>>(int, T2, T3)", "bf16"),
    ("void at::vectorized_elementwise_kernel<8, at::CUDAFunctor_add<c10::Half>, std::array<char *, 3>>(int, T2, T3)", "fp16"),
    ("void at::reduce_kernel<512, 1, at::ReduceOp<float, at::MeanOps<float, float, float, float>, unsigned int, float, 4, 4>>(T3)", "fp32"),
    ("saxpy(double *, double *, double *, double, int)", "fp64"),
    ("naive_sgemm", "fp32"),
    ("cupy_multiply__float_float32_float32", "fp32"),
    # a scalar `double` parameter (the learning rate) is not the data's type
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
     "(at::native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool, float const*, "
     "float const*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>)", "fp32"),
    ("void native::vectorized_elementwise_kernel<2, native::FillFunctor<long>, std::array<char *, 1>>(int, T2, T3)", "unknown"),
]


@pytest.mark.parametrize("name, dtype", REAL_DTYPE_NAMES)
def test_math_dtype_of_real_names(name, dtype):
    assert classify.classify(classify.builtin_rules("math_dtype"), {"kernel_name": name}) == dtype


def test_every_math_dtype_rule_names_a_known_dtype_and_matches_a_real_name():
    names = distinct_names() + [n for n, _ in REAL_DTYPE_NAMES]
    for rule in classify.builtin_rules("math_dtype"):
        assert rule.label in MATH_DTYPES, rule.origin
        # no FP8, TF32, INT8 or FP64/FP16 CuPy kernel in the corpus: those rules follow the libraries' naming
        untested = rule.label.startswith("fp8") or rule.label in ("tf32", "int8") or "cupy" in rule.pattern.pattern
        assert untested or any(rule.pattern.search(n) for n in names), f"{rule.origin}: no real name matches it"


def test_the_framework_op_decides_for_generic_kernels():
    rules = classify.builtin_rules("op_class")
    generic = {"kernel_base": "some_kernel", "kernel_signature": "some_kernel", "kernel_name": "some_kernel"}
    assert classify.classify(rules, generic) == classify.UNKNOWN
    assert classify.classify(rules, {**generic, "framework_op": "aten::addmm"}) == "gemm"
    gather = identity.identify("void at::vectorized_gather_kernel<16, long>(char *, char *, T2 *, int, long, long, long, long, bool)")
    values = {"kernel_base": gather.kernel_base, "kernel_signature": gather.kernel_signature}
    assert classify.classify(rules, values) == "gather/scatter/index"
    assert classify.classify(rules, {**values, "nvtx_path": "gpt2.iteration > aten::embedding > aten::gather"}) == "embedding"


@pytest.mark.parametrize("text, message", [
    ("kind,pattern,library\n", "header must be field,pattern,library"),
    ("field,pattern,library\nbase,^foo,Foo\nkernel,^bar,Bar\n", ":3: unknown field 'kernel'"),
    ("field,pattern,library\nbase,([,Foo\n", ":2: bad regular expression"),
    ("field,pattern,library\nbase,a|b,c,d\n", ":2: a rule has three fields"),
])
def test_bad_rule_files_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "library_rules.csv"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        classify.load_rules("library", tmp_path)
    assert str(path) in str(caught.value) and message in str(caught.value)


# -- NVTX ----------------------------------------------------------------------------------------

def nvtx_cells(path) -> list[str]:
    frame = pl.read_csv(path, skip_rows_after_header=1, infer_schema=False)
    return frame[[c for c in frame.columns if "Push/Pop" in c][0]].to_list()


def test_framework_op_context_from_a_real_stack():
    context = nvtx.op_context(nvtx_cells(DATA / "ncu-gpt2-h100/gpt2.raw.csv")[0])
    assert context == nvtx.OpContext(
        framework_op="aten::gather", framework_op_id=11, framework_seq=None,
        op_shapes="[[50257, 768], [], [1024, 768], [], [1024, 768]]",
        nvtx_path="gpt2.iteration > aten::embedding > aten::index_select > aten::gather",
        nvtx_range="gpt2.iteration")


def test_autograd_ranges_registered_strings_and_empty_cells():
    backward = ('472  "<default domain>:autograd::engine::evaluate_function: NllLossBackward0, op_id = 417:none:none:none:none:none:none"'
                '  "<default domain>:NllLossBackward0, seq = 467, op_id = 418, sizes = [[]], input_op_ids = [(413,0)]:none:none:none:none:none:none"'
                '  "<default domain>:aten::nll_loss_backward, op_id = 419, sizes = [[], [1024, 50257], [1024], [], [], [], []], input_op_ids = [(418,0), (412,0), (411,0), (0,-1), (0,-1), (0,-1), (416,0)]:none:none:none:none:none:none" ')
    context = nvtx.op_context(backward)
    assert (context.framework_op, context.framework_op_id, context.framework_seq) == ("aten::nll_loss_backward", 419, 467)
    assert context.nvtx_path == ("autograd::engine::evaluate_function: NllLossBackward0 > NllLossBackward0"
                                 " > aten::nll_loss_backward")
    registered = ('471  "<default domain>:custom_cupy.iteration:none:none:none:none:none:none"'
                  '  "CCCL:cub::DeviceReduce::Sum:none:none:none:none:REGISTERED:cub::DeviceReduce::Sum" ')
    context = nvtx.op_context(registered)
    assert context.framework_op is None
    assert context.nvtx_path == "custom_cupy.iteration > CCCL:cub::DeviceReduce::Sum"
    assert context.nvtx_range == "CCCL:cub::DeviceReduce::Sum"
    assert nvtx.op_context(None) == nvtx.op_context("") == nvtx.OpContext()


def test_kernels_without_nvtx_get_nulls(ingested):
    assert rows(ingested, "SELECT count(*) FROM kernels WHERE nvtx_push_pop IS NULL AND "
                          "(framework_op IS NOT NULL OR nvtx_path IS NOT NULL)") == [(0,)]
    assert rows(ingested, "SELECT DISTINCT framework_op FROM kernels WHERE model = 'gpt2' ORDER BY 1") == [
        ("aten::add",), ("aten::arange",), ("aten::gather",)]


# -- ingest: mangled and demangled, units, metric names ------------------------------------------

IDENTITY_SQL = ("SELECT launch_id, kernel_base, kernel_signature, kernel_id, library, op_class, framework_op, "
                "op_shapes, nvtx_path FROM kernels ORDER BY launch_id")


def test_mangled_and_demangled_exports_give_identical_identities(tmp_path):
    plain, mangled = Warehouse(tmp_path / "plain"), Warehouse(tmp_path / "mangled")
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv"], plain)
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.mangled.csv"], mangled)
    assert rows(plain, IDENTITY_SQL) == rows(mangled, IDENTITY_SQL)
    assert rows(mangled, "SELECT kernel_name, kernel_mangled FROM kernels WHERE launch_id = 0") == [(
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
        "_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb")]


def test_the_printed_name_wins_over_a_demangled_one_whichever_comes_first(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.mangled.csv"], warehouse)
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv"], warehouse)
    assert rows(warehouse, "SELECT kernel_name, kernel_mangled FROM kernels WHERE launch_id = 0") == [(
        "void at::vectorized_gather_kernel<16, long>(char *, char *, T2 *, int, long, long, long, long, bool)",
        "_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb")]


def test_old_metric_names_become_canonical_and_keep_their_source(ingested):
    got = rows(ingested, "SELECT DISTINCT metric, source_metric, unit FROM metrics WHERE model = 'ncu-gtx1080-raw' "
                         "AND source_metric IN ('gpu__time_duration', 'fbpa__sol_pct', 'lts__request_total_sectors_hitrate_pct', "
                         "'smsp__warp_cycles_per_issue_stall_long_scoreboard', 'tex__m_wr_bytes_global_nonatom') ORDER BY 1")
    assert got == [
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "fbpa__sol_pct", "%"),
        ("gpu__time_duration.sum", "gpu__time_duration", "ns"),
        ("lts__t_sector_hit_rate.pct", "lts__request_total_sectors_hitrate_pct", "%"),
        ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
         "smsp__warp_cycles_per_issue_stall_long_scoreboard", "cycle/issue"),
        ("tex__m_wr_bytes_global_nonatom", "tex__m_wr_bytes_global_nonatom", "byte"),   # unknown: kept as is
    ]
    # ... so the headline columns fill in for the Pascal export too
    assert rows(ingested, "SELECT duration_ns, dram_pct, l2_hit_pct FROM kernels WHERE model = 'ncu-gtx1080-raw' "
                          "ORDER BY launch_id LIMIT 1") == [(2720.0, 1.67, 30.77)]


def test_metric_catalog_is_consistent():
    catalog = normalize.metric_catalog()
    canonical = set(catalog["metric"])
    assert len(canonical) == catalog.height
    seen = {}
    for row in catalog.iter_rows(named=True):
        for alias in filter(None, (row["aliases"] or "").split(";")):
            assert alias not in canonical, alias
            assert seen.setdefault(alias, row["metric"]) == row["metric"], alias
        assert row["description"], row["metric"]


def test_base_unit_and_default_unit_exports_give_equal_headline_and_derived_values(tmp_path):
    default, base = Warehouse(tmp_path / "a"), Warehouse(tmp_path / "b")
    ingest_job.ingest([DATA / "ncu-llama-h100-variants/llama.raw.csv"], default)
    ingest_job.ingest([DATA / "ncu-llama-h100-variants/llama.raw.baseunits.csv"], base)
    sql = ("SELECT duration_ns, dram_bytes, sm_pct, l2_hit_pct, flops, peak_fp32_flops_per_s, "
           "peak_dram_bytes_per_s FROM kernels ORDER BY launch_id")
    for x, y in zip(rows(default, sql), rows(base, sql)):
        assert y == pytest.approx(x, rel=2e-3, abs=0.006)   # base units: two decimals


# -- derived metrics -----------------------------------------------------------------------------

def test_flops_of_kernels_whose_work_is_known(warehouse):
    """saxpy over 2**24 floats is 2**24 FMAs; naive_sgemm with N = 1024 is N**3 FMAs
    (corpus tools/workload.py); an FMA is two FLOPs."""
    ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse)
    got = dict(((n, f) for n, f in rows(warehouse, "SELECT kernel_name, flops_fp32 FROM kernels")))
    assert got["saxpy"] == pytest.approx(2 * 2**24, rel=0.01)
    assert got["naive_sgemm"] == pytest.approx(2 * 1024**3, rel=0.01)
    (intensity, achieved, duration, flops, dram), = rows(
        warehouse, "SELECT arithmetic_intensity, achieved_flops_per_s, duration_ns, flops, dram_bytes "
                   "FROM kernels WHERE kernel_name = 'naive_sgemm'")
    assert intensity == pytest.approx(flops / dram) and achieved == pytest.approx(flops / duration * 1e9)


def test_device_peaks_from_ncu_and_from_device_attributes(ingested):
    # H100 SXM: 132 SMs x 128 FP32 lanes x 2 x ~1.95 GHz; HBM3 ~3.35 TB/s (ncu's own roofline peaks)
    (fp32, fp64, dram), = rows(ingested, "SELECT peak_fp32_flops_per_s, peak_fp64_flops_per_s, peak_dram_bytes_per_s "
                                         "FROM kernels WHERE model = 'gpt2' AND launch_id = 0")
    assert 60e12 < fp32 < 70e12 and fp64 == pytest.approx(fp32 / 2) and 3.2e12 < dram < 3.4e12
    # GTX 1080 export has no roofline metrics: 20 SMs x 128 x 2 x 1.759 GHz; 5.005 GHz x 2 x 256 bit / 8
    (fp32, dram), = rows(ingested, "SELECT peak_fp32_flops_per_s, peak_dram_bytes_per_s FROM kernels "
                                   "WHERE model = 'ncu-gtx1080-raw' LIMIT 1")
    assert fp32 == pytest.approx(20 * 128 * 2 * 1.759e9) and dram == pytest.approx(5.005e9 * 2 * 256 / 8)


# -- renormalize and the coverage report ---------------------------------------------------------

def test_renormalize_applies_new_rules_to_old_runs_and_is_idempotent(warehouse):
    ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse)
    assert renormalize_job.renormalize(warehouse).unchanged == 1
    warehouse.rules_dir.mkdir()
    (warehouse.rules_dir / "library_rules.csv").write_text("field,pattern,library\nbase,^saxpy$,in-house BLAS\n")
    report = renormalize_job.renormalize(warehouse)
    assert [r.model for r in report.changed] == ["custom_cupy"]
    assert rows(warehouse, "SELECT library FROM kernels WHERE kernel_name = 'saxpy'") == [("in-house BLAS",)]
    assert rows(warehouse, "SELECT count(*) FROM kernels") == [(4,)]
    assert renormalize_job.renormalize(warehouse).unchanged == 1


def table_folder_path(warehouse: Warehouse, link: Path) -> Path:
    """The table-folder name of a committed file whose _files/ link committed_files gave."""
    from kwarehouse.store import layout
    return warehouse.root / link.relative_to(warehouse.root / layout.FILES)


def test_renormalize_fills_columns_an_older_kwh_did_not_write(ingested):
    before = rows(ingested, "SELECT * FROM kernels ORDER BY run_id, launch_id")
    from kwarehouse.store import catalog, files
    for link in ingested.committed_files("kernels"):   # as an older kwh would have written them
        path = table_folder_path(ingested, link)
        table = pq.read_table(link)
        old = path.with_name(path.name.replace(f".{files.current_schema_mark('kernels')}", ""))
        assert old != path
        pq.write_table(table.drop_columns(["kernel_base", "kernel_id", "library", "op_class", "flops",
                                              "stall_long_scoreboard", "math_dtype", "tensor_flops",
                                              "flops_source", "peak_flops_per_s", "pct_of_peak",
                                              "tensor_util_pct"]), old)
        path.unlink()
        link.unlink()                                  # an older kwh made no _files/ links
        with ingested.engine.begin() as con:   # an older kwh named its files without the schema mark
            for listing in (catalog.catalog_parquet, catalog.catalog_parquet_runs):
                con.execute(listing.update().where(listing.c.path == path.relative_to(ingested.root).as_posix())
                            .values(path=old.relative_to(ingested.root).as_posix()))
    ingested.refresh_duckdb()
    assert rows(ingested, "SELECT count(kernel_id) FROM kernels") == [(0,)]
    assert rows(ingested, "SELECT count(*) FROM kernels") == [(len(before),)]
    report = renormalize_job.renormalize(ingested)
    # every run with kernels changed; timeline runs (renormalized too) are unchanged
    assert len(report.changed) == rows(ingested, "SELECT count(DISTINCT run_id) FROM kernels")[0][0]
    assert rows(ingested, "SELECT * FROM kernels ORDER BY run_id, launch_id") == before


def test_unclassified_kernels_are_listed_with_their_share(warehouse, tmp_path):
    export = tmp_path / "run"
    shutil.copytree(DATA / "ncu-custom-cupy-h100", export)
    ingest_job.ingest([export], warehouse)
    from kwarehouse.answers.summary import kernel_list
    assert kernel_list(warehouse, unclassified=True)[1] == []
    warehouse.rules_dir.mkdir()
    (warehouse.rules_dir / "op_class_rules.csv").write_text(
        "# pretend nobody knows what naive_sgemm does\nfield,pattern,op_class\nbase,^naive_sgemm$,unknown\n")
    renormalize_job.renormalize(warehouse)
    columns, listed = kernel_list(warehouse, unclassified=True)
    assert [dict(zip(columns, r))["kernel_base"] for r in listed] == ["naive_sgemm"]
    assert 70 < dict(zip(columns, listed[0]))["share_pct"] < 90


def test_metric_catalog_is_queryable_with_the_warehouse(ingested):
    con = ingested.connect()
    assert con.execute("SELECT unit FROM metric_catalog WHERE metric = 'gpu__time_duration.sum'").fetchall() == [("ns",)]
    # every headline metric of every H100 launch has a meaning in the catalog
    assert con.execute("SELECT count(*) FROM metrics m WHERE model = 'gpt2' AND metric IN "
                       "('gpu__time_duration.sum', 'lts__t_sector_hit_rate.pct') AND NOT EXISTS "
                       "(SELECT 1 FROM metric_catalog c WHERE c.metric = m.metric)").fetchall() == [(0,)]


def test_files_of_old_and_current_schema_read_together(ingested, tmp_path):
    """A warehouse holding files an older kwh wrote (fewer columns, no schema mark in the name) and
    files of today's schema: the views read both, the old ones' missing columns as NULL."""
    from kwarehouse.store import catalog, files
    mark = files.current_schema_mark("kernels")
    link = ingested.committed_files("kernels")[0]
    oldest = table_folder_path(ingested, link)
    table = pq.read_table(link)
    renamed = oldest.with_name(oldest.name.replace(f".{mark}", ""))
    pq.write_table(table.drop_columns(["flops"]), renamed)
    oldest.unlink()
    link.unlink()                                      # an older kwh made no _files/ links
    with ingested.engine.begin() as con:
        for listing in (catalog.catalog_parquet, catalog.catalog_parquet_runs):
            con.execute(listing.update().where(listing.c.path == oldest.relative_to(ingested.root).as_posix())
                        .values(path=renamed.relative_to(ingested.root).as_posix()))
    ingested.refresh_duckdb()
    names = [p.name for p in ingested.committed_files("kernels")]
    assert sum(mark in n for n in names) == len(names) - 1
    total, with_flops_column = rows(ingested, "SELECT count(*), count(*) FILTER (WHERE run_id != ?) FROM kernels",
                                    [table["run_id"][0].as_py()])[0]
    assert total == with_flops_column + table.num_rows
    assert rows(ingested, "SELECT count(flops) FROM kernels WHERE run_id = ?", [table["run_id"][0].as_py()]) == [(0,)]
