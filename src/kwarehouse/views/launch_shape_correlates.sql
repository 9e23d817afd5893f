-- Launch shape correlates per kernel identity: how duration and Speed of Light vary with grid and block size, registers and the framework op's input shapes.
-- Correlations are Pearson's r over launches; NULL where the launch parameter never varies. ns_per_block is
-- the least-squares slope of duration over grid size; slowest_* describe the longest launch.
SELECT kernel_id, library, op_class, min(kernel_base) AS kernel_base, count(*) AS launches,
       count(DISTINCT grid_size) AS grid_sizes, count(DISTINCT block_size) AS block_sizes,
       count(DISTINCT registers_per_thread) AS register_counts, count(DISTINCT op_shapes) AS op_shapes_seen,
       min(duration_ns) AS min_duration_ns, median(duration_ns) AS median_duration_ns, max(duration_ns) AS max_duration_ns,
       CASE WHEN count(DISTINCT grid_size) > 1 THEN corr(duration_ns, grid_size) END AS corr_duration_grid,
       CASE WHEN count(DISTINCT block_size) > 1 THEN corr(duration_ns, block_size) END AS corr_duration_block,
       CASE WHEN count(DISTINCT registers_per_thread) > 1 THEN corr(duration_ns, registers_per_thread) END AS corr_duration_registers,
       CASE WHEN count(DISTINCT grid_size) > 1 THEN corr(sm_pct, grid_size) END AS corr_sm_pct_grid,
       CASE WHEN count(DISTINCT grid_size) > 1 THEN corr(dram_pct, grid_size) END AS corr_dram_pct_grid,
       CASE WHEN count(DISTINCT grid_size) > 1 THEN regr_slope(duration_ns, grid_size) END AS ns_per_block,
       arg_max(grid_size, duration_ns) AS slowest_grid_size,
       arg_max(block_size, duration_ns) AS slowest_block_size,
       arg_max(op_shapes, duration_ns) AS slowest_op_shapes
FROM kernels
GROUP BY kernel_id, library, op_class
ORDER BY launches DESC, kernel_id
