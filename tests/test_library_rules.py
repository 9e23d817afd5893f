"""Library (who dispatched a kernel), implementation (whose kernel it is) and op class on real kernel
names, and one op class per kernel identity in a run (issue 21, item 5).

The names below are copied as the tools printed them: from the corpus (tests/data/kernel-names) or,
for kernels the corpus lacks, from public profiler output found with the code search tool (where a
tool truncated the name, the complete part before the cut is used)."""

from __future__ import annotations

import polars as pl
import pytest

from kwarehouse import normalize
from kwarehouse.normalize import classify, identity


def labels(name: str, framework_op: str | None = None) -> tuple[str, str, str]:
    ident = identity.identify(name)
    values = {"kernel_name": ident.kernel_name, "kernel_base": ident.kernel_base,
              "kernel_signature": ident.kernel_signature, "framework_op": framework_op}
    library = classify.classify(classify.builtin_rules("library"), values)
    implementation = classify.classify(classify.builtin_rules("implementation"), values)
    return (library, library if implementation == classify.UNKNOWN else implementation,
            classify.classify(classify.builtin_rules("op_class"), values))


@pytest.mark.parametrize("name, library, implementation, op_class", [
    # corpus: cuBLAS's own CUTLASS-built kernels (GPT-2's lm_head under aten::mm, aten::bmm)
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>(T1::Params)",
     "cuBLAS", "CUTLASS", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)",
     "cuBLAS", "CUTLASS", "gemm"),
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", "cuBLAS", "nvjet", "gemm"),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1"
     "_execute_segment_k_off_kernel__5x_cudnn", "cuDNN", "xmma", "conv"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "cuDNN", "cuDNN generated", "attention"),
    ("void cub::DeviceReduceKernel<cub::policy_hub<float, unsigned int, cuda::plus<void>>::Policy1000, float *, "
     "unsigned int, cuda::plus<void>, float, cuda::identity>(T2, T5 *, T3, cub::GridEvenShare<T3>, T4, T6)",
     "CUB/Thrust", "CUB", "reduction"),
    ("triton_poi_fused__unsafe_view_mul_silu_1", "Triton", "Inductor", "elementwise"),
    ("naive_sgemm", "custom", "custom", "gemm"),
    # public: PyTorch's CUTLASS grouped GEMM for MoE experts (nsys cuda_gpu_kern_sum of a vLLM run)
    ("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<cutlass::gemm::kernel::"
     "GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int>>", "PyTorch ATen", "CUTLASS", "gemm"),
    # ... and the same CUTLASS grouped GEMM built by another framework (flashinfer / TensorRT-LLM MoE)
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<"
     "cute::tuple<long, long, long>>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
     "MainloopSm90ArrayTmaGmmaWarpSpecialized<(int)12", "CUTLASS", "CUTLASS", "gemm"),
    # its setup kernel: <<<1, group_count>>> fills pointer and problem-size arrays; no GEMM work
    ("void at::cuda::detail::prepare_grouped_gemm_data", "PyTorch ATen", "PyTorch ATen", "setup"),
    # FlashAttention 2 (the name test_normalize.py's dtype test carries)
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, "
     "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>>",
     "FlashAttention", "FlashAttention", "attention"),
    # FlashAttention 3 behind cutlass::device_kernel (same nsys summary)
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90", "FlashAttention",
     "FlashAttention", "attention"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, (int)1, (bool)0>(at::cuda::detail::TensorInfo<const T1, "
     "T2>, T2, T2, bool, T2, T2, at::cuda::detail::TensorInfo<T1, T2>, T2, at::cuda::detail::TensorInfo<long, T2>, T2, "
     "T1 *)", "PyTorch ATen", "PyTorch ATen", "sort/topk"),
    # PyTorch's copy of CUB, in full (PyTorch profiler) and as ncu prints it
    ("void at_cuda_detail::cub::DeviceScanKernel<at_cuda_detail::cub::DeviceScanPolicy<long, std::plus<long>>::Policy900, "
     "const long *, long *", "PyTorch ATen", "CUB", "reduction"),
    ("void at_cuda_detail::DeviceScanInitKernel", "PyTorch ATen", "CUB", "reduction"),
    ("void at::cuda::kernelHistogram1D<long, long, long, 1", "PyTorch ATen", "PyTorch ATen", "reduction"),
    ("void <unnamed>::softmax_warp_forward<float, float, float, (int)2, (bool)0, (bool)0>(T2 *, const T1 *",
     "PyTorch ATen", "PyTorch ATen", "softmax"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 7,", "PyTorch ATen",
     "PyTorch ATen", "softmax"),
    # masked_fill selects per element; it is no memset (FillFunctor is)
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_fill_kernel("
     "at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::"
     "{lambda(float, bool)#1}, std::array<char*, 3ul> >", "PyTorch ATen", "PyTorch ATen", "elementwise"),
    ("void native::vectorized_elementwise_kernel<2, native::FillFunctor<long>, std::array<char *, 1>>(int, T2, T3)",
     "PyTorch ATen", "PyTorch ATen", "memset/memcpy"),

    # issue 33 (held-out H100 captures; tests/test_kernel_owners.py has the rest): cuDNN's bundled CUTLASS, as a
    # public ResNet-18 profile printed it, torch.compile max-autotune's GEMM templates, XLA's Triton GEMM fusion
    # (tests/data/profile-h100/jax_step)
    ("cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4>", "cuDNN",
     "CUTLASS", "conv"),
    ("triton_tem_fused_addmm_native_layer_norm_t_1", "Triton", "Inductor template", "gemm"),
    ("gemm_fusion_dot_1", "XLA", "XLA Triton GEMM", "gemm"),
])
def test_library_implementation_and_op_class_of_real_names(name, library, implementation, op_class):
    assert labels(name) == (library, implementation, op_class)


def test_every_implementation_rule_matches_a_real_name():
    from test_normalize import distinct_names
    names = distinct_names() + [p[0] for p in
                                test_library_implementation_and_op_class_of_real_names.pytestmark[0].args[1]]
    for rule in classify.builtin_rules("implementation"):
        if rule.label in ("Thrust", "xFormers"):
            continue   # no real Thrust or xFormers name at hand; the rules follow the libraries' namespaces
        assert any(rule.pattern.search(getattr(identity.identify(n), f"kernel_{rule.field}", n))
                   for n in names), rule.origin


ELEMENTWISE_ADD = "void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, std::array<char *, 3>>(int, T2, T3)"
GENERIC = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, " \
          "at::native::binary_internal::MulFunctor<float>>, std::array<char *, 3>>(int, T2, T3)"


def test_one_op_class_per_identity_in_a_run():
    """A generic kernel launched under several framework ops gets the class of its most common op on
    every launch; the framework op itself stays per launch."""
    ops = ["aten::native_batch_norm", "aten::mul", "aten::mul", None]
    frame = pl.DataFrame({"launch_id": list(range(len(ops))), "kernel_name": [GENERIC] * len(ops),
                          "framework_op": ops, "nvtx_path": [None] * len(ops)},
                         schema={"launch_id": pl.Int64, "kernel_name": pl.String, "framework_op": pl.String,
                                 "nvtx_path": pl.String})
    rules = normalize.KernelRules.load()
    for step in (normalize.name_unnamed_kernels, normalize.demangle_names, normalize.kernel_identity,
                 normalize.classify_library, normalize.classify_implementation, normalize.classify_op_class):
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("kernel_mangled")) \
            if "kernel_mangled" not in frame.columns else frame
        frame = step(frame, rules)
    assert frame.sort("launch_id")["framework_op"].to_list() == ops
    assert frame["op_class"].unique().to_list() == ["elementwise"]
    # the batch-norm launch alone would say normalization: the class is the identity's, not the launch's
    alone = frame.filter(pl.col("launch_id") == 0).drop("op_class")
    assert normalize.classify_op_class(alone, rules)["op_class"].to_list() == ["normalization"]
    assert frame["implementation"].unique().to_list() == ["PyTorch ATen"]
