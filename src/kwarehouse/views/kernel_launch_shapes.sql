-- ncu launches per model, GPU and kernel identity grouped by grid size, block size, registers per thread, op shapes and duration: how many, and the count, mean and sum of squared deviations of their SM % and DRAM %; the fleet-wide launch shape correlates are computed from these rows, not from every launch.
-- sm_pct_m2 and dram_pct_m2: sum((x - mean)^2) over the group's launches with that counter (sm_pct_launches,
-- dram_pct_launches), so that variances and correlations over several groups combine without cancellation;
-- min_/max_ show whether the counter varies at all.
SELECT model, gpu, kernel_id, library, op_class, grid_size, block_size, registers_per_thread, op_shapes, duration_ns,
       count(*) AS launches, min(kernel_base) AS kernel_base,
       count(sm_pct) AS sm_pct_launches, avg(sm_pct) AS sm_pct_mean, var_pop(sm_pct) * count(sm_pct) AS sm_pct_m2,
       min(sm_pct) AS min_sm_pct, max(sm_pct) AS max_sm_pct,
       count(dram_pct) AS dram_pct_launches, avg(dram_pct) AS dram_pct_mean,
       var_pop(dram_pct) * count(dram_pct) AS dram_pct_m2, min(dram_pct) AS min_dram_pct, max(dram_pct) AS max_dram_pct
FROM kernels
GROUP BY model, gpu, kernel_id, library, op_class, grid_size, block_size, registers_per_thread, op_shapes, duration_ns
ORDER BY model, gpu, kernel_id, grid_size, block_size, duration_ns
