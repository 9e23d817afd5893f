-- One GPU's CUDA-core FP32/FP64 roofs and its DRAM and L2 bandwidth, averaged over the selected ncu launches.
SELECT avg(peak_fp32_flops_per_s), avg(peak_fp64_flops_per_s), avg(peak_dram_bytes_per_s), avg(peak_l2_bytes_per_s)
FROM kernels
WHERE gpu = $gpu_name AND {selected_runs}
