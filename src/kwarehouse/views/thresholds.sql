-- The cut-offs of bottleneck_thresholds as one row, one column per threshold name: the defaults of bottleneck_thresholds.csv with this warehouse's overrides (<warehouse>/views/bottleneck_thresholds.csv); the views read their cut-offs here, by name (CROSS JOIN thresholds).
-- A threshold added to bottleneck_thresholds.csv needs its column here too (tests/test_views.py checks that
-- every name has one).
SELECT max(CASE WHEN name = 'compute_pct' THEN value END) AS compute_pct,
       max(CASE WHEN name = 'memory_pct' THEN value END) AS memory_pct,
       max(CASE WHEN name = 'balanced_pct' THEN value END) AS balanced_pct,
       max(CASE WHEN name = 'tensor_roof_pct' THEN value END) AS tensor_roof_pct,
       max(CASE WHEN name = 'stall_pct' THEN value END) AS stall_pct,
       max(CASE WHEN name = 'seed_compute_pct' THEN value END) AS seed_compute_pct,
       max(CASE WHEN name = 'seed_dram_pct' THEN value END) AS seed_dram_pct,
       max(CASE WHEN name = 'l2_hit_pct' THEN value END) AS l2_hit_pct,
       max(CASE WHEN name = 'reuse_factor' THEN value END) AS reuse_factor,
       max(CASE WHEN name = 'dram_roof_pct' THEN value END) AS dram_roof_pct,
       max(CASE WHEN name = 'tiny_kernel_ns' THEN value END) AS tiny_kernel_ns,
       max(CASE WHEN name = 'tensor_pipe_low_pct' THEN value END) AS tensor_pipe_low_pct,
       max(CASE WHEN name = 'tensor_efficiency_low_pct' THEN value END) AS tensor_efficiency_low_pct,
       max(CASE WHEN name = 'tensor_efficiency_target_pct' THEN value END) AS tensor_efficiency_target_pct,
       max(CASE WHEN name = 'trivial_gemm_flops' THEN value END) AS trivial_gemm_flops,
       max(CASE WHEN name = 'low_occupancy_pct' THEN value END) AS low_occupancy_pct,
       max(CASE WHEN name = 'many_launches' THEN value END) AS many_launches,
       max(CASE WHEN name = 'achievable_tensor_pct' THEN value END) AS achievable_tensor_pct,
       max(CASE WHEN name = 'achievable_cuda_core_pct' THEN value END) AS achievable_cuda_core_pct,
       max(CASE WHEN name = 'achievable_dram_pct' THEN value END) AS achievable_dram_pct,
       max(CASE WHEN name = 'gemv_max_dim' THEN value END) AS gemv_max_dim,
       max(CASE WHEN name = 'full_wave_pct' THEN value END) AS full_wave_pct,
       max(CASE WHEN name = 'short_k_iterations' THEN value END) AS short_k_iterations,
       max(CASE WHEN name = 'neighbour_kernels_between' THEN value END) AS neighbour_kernels_between
FROM bottleneck_thresholds
