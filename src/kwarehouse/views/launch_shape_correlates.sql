-- Launch shape correlates per kernel identity: how duration and Speed of Light vary with grid and block size, registers and the framework op's input shapes.
-- Correlations are Pearson's r over launches; NULL where the launch parameter never varies (NaN where it varies
-- but the other value does not). ns_per_block is the least-squares slope of duration over grid size;
-- slowest_* describe the longest launch (of launches equally long, the lowest value). Computed from
-- kernel_launch_shapes (each partition's launches grouped by shape and duration): means first, then the sums of deviations around them, each group's own spread of SM % and
-- DRAM % added (sum of squares within plus launches x squared distance of its mean), as one pass over the
-- launches would.
WITH shapes AS (
    SELECT kernel_id, library, op_class, kernel_base, grid_size, block_size, registers_per_thread, op_shapes,
           duration_ns, launches, sm_pct_launches, sm_pct_mean, sm_pct_m2, min_sm_pct, max_sm_pct,
           dram_pct_launches, dram_pct_mean, dram_pct_m2, min_dram_pct, max_dram_pct,
           CAST(grid_size AS DOUBLE) AS grid, CAST(block_size AS DOUBLE) AS block,
           CAST(registers_per_thread AS DOUBLE) AS registers
    FROM kernel_launch_shapes
), means AS (
    -- per kernel, the means over the launches that have both values of each pair
    SELECT kernel_id, library, op_class,
           sum(CASE WHEN grid IS NOT NULL THEN duration_ns * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND grid IS NOT NULL THEN launches END) AS dg_duration,
           sum(CASE WHEN duration_ns IS NOT NULL THEN grid * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND grid IS NOT NULL THEN launches END) AS dg_grid,
           sum(CASE WHEN block IS NOT NULL THEN duration_ns * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND block IS NOT NULL THEN launches END) AS db_duration,
           sum(CASE WHEN duration_ns IS NOT NULL THEN block * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND block IS NOT NULL THEN launches END) AS db_block,
           sum(CASE WHEN registers IS NOT NULL THEN duration_ns * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND registers IS NOT NULL THEN launches END) AS dr_duration,
           sum(CASE WHEN duration_ns IS NOT NULL THEN registers * launches END)
               / sum(CASE WHEN duration_ns IS NOT NULL AND registers IS NOT NULL THEN launches END) AS dr_registers,
           sum(CASE WHEN grid IS NOT NULL THEN sm_pct_mean * sm_pct_launches END)
               / sum(CASE WHEN grid IS NOT NULL THEN sm_pct_launches END) AS sg_sm_pct,
           sum(grid * sm_pct_launches) / sum(CASE WHEN grid IS NOT NULL THEN sm_pct_launches END) AS sg_grid,
           sum(CASE WHEN grid IS NOT NULL THEN dram_pct_mean * dram_pct_launches END)
               / sum(CASE WHEN grid IS NOT NULL THEN dram_pct_launches END) AS rg_dram_pct,
           sum(grid * dram_pct_launches) / sum(CASE WHEN grid IS NOT NULL THEN dram_pct_launches END) AS rg_grid
    FROM shapes
    GROUP BY kernel_id, library, op_class
), moments AS (
    -- sums of products of deviations from those means (within a group duration, grid, block and registers are
    -- one value; SM % and DRAM % spread, their within-group squares added)
    SELECT s.kernel_id, s.library, s.op_class,
           sum((s.duration_ns - m.dg_duration) * (s.grid - m.dg_grid) * s.launches) AS dg_c,
           sum(CASE WHEN s.grid IS NOT NULL THEN (s.duration_ns - m.dg_duration) * (s.duration_ns - m.dg_duration) * s.launches END) AS dg_x,
           sum(CASE WHEN s.duration_ns IS NOT NULL THEN (s.grid - m.dg_grid) * (s.grid - m.dg_grid) * s.launches END) AS dg_y,
           sum((s.duration_ns - m.db_duration) * (s.block - m.db_block) * s.launches) AS db_c,
           sum(CASE WHEN s.block IS NOT NULL THEN (s.duration_ns - m.db_duration) * (s.duration_ns - m.db_duration) * s.launches END) AS db_x,
           sum(CASE WHEN s.duration_ns IS NOT NULL THEN (s.block - m.db_block) * (s.block - m.db_block) * s.launches END) AS db_y,
           sum((s.duration_ns - m.dr_duration) * (s.registers - m.dr_registers) * s.launches) AS dr_c,
           sum(CASE WHEN s.registers IS NOT NULL THEN (s.duration_ns - m.dr_duration) * (s.duration_ns - m.dr_duration) * s.launches END) AS dr_x,
           sum(CASE WHEN s.duration_ns IS NOT NULL THEN (s.registers - m.dr_registers) * (s.registers - m.dr_registers) * s.launches END) AS dr_y,
           sum((s.sm_pct_mean - m.sg_sm_pct) * (s.grid - m.sg_grid) * s.sm_pct_launches) AS sg_c,
           sum(CASE WHEN s.grid IS NOT NULL
                    THEN s.sm_pct_m2 + (s.sm_pct_mean - m.sg_sm_pct) * (s.sm_pct_mean - m.sg_sm_pct) * s.sm_pct_launches END) AS sg_x,
           sum((s.grid - m.sg_grid) * (s.grid - m.sg_grid) * s.sm_pct_launches) AS sg_y,
           sum((s.dram_pct_mean - m.rg_dram_pct) * (s.grid - m.rg_grid) * s.dram_pct_launches) AS rg_c,
           sum(CASE WHEN s.grid IS NOT NULL
                    THEN s.dram_pct_m2 + (s.dram_pct_mean - m.rg_dram_pct) * (s.dram_pct_mean - m.rg_dram_pct) * s.dram_pct_launches END) AS rg_x,
           sum((s.grid - m.rg_grid) * (s.grid - m.rg_grid) * s.dram_pct_launches) AS rg_y
    FROM shapes s
    JOIN means m ON m.kernel_id IS NOT DISTINCT FROM s.kernel_id AND m.library IS NOT DISTINCT FROM s.library
                AND m.op_class IS NOT DISTINCT FROM s.op_class
    GROUP BY s.kernel_id, s.library, s.op_class
), durations AS (
    -- each kernel's durations with their launch counts: the median as median() takes it, the middle value or the
    -- mean of the two middle ones (positions floor and ceil of (n - 1) / 2, from 0, in duration order)
    SELECT kernel_id, library, op_class, duration_ns,
           sum(launches) OVER (PARTITION BY kernel_id, library, op_class ORDER BY duration_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - launches AS first_index,
           sum(launches) OVER (PARTITION BY kernel_id, library, op_class ORDER BY duration_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - 1 AS last_index,
           sum(launches) OVER (PARTITION BY kernel_id, library, op_class) AS n
    FROM (SELECT kernel_id, library, op_class, duration_ns, sum(launches) AS launches FROM shapes
          WHERE duration_ns IS NOT NULL GROUP BY kernel_id, library, op_class, duration_ns) d
), medians AS (
    SELECT d.kernel_id, d.library, d.op_class,
           (max(CASE WHEN p.position = 'low' THEN d.duration_ns END) + max(CASE WHEN p.position = 'high' THEN d.duration_ns END)) / 2
               AS median_duration_ns
    FROM durations d
    JOIN (SELECT 'low' AS position UNION ALL SELECT 'high' AS position) p
      ON CASE WHEN p.position = 'low' THEN floor((d.n - 1) / 2.0) ELSE ceil((d.n - 1) / 2.0) END
         BETWEEN d.first_index AND d.last_index
    GROUP BY d.kernel_id, d.library, d.op_class
), per_kernel_sums AS (
    SELECT kernel_id, library, op_class, min(kernel_base) AS kernel_base, CAST(sum(launches) AS BIGINT) AS launches,
           count(DISTINCT grid_size) AS grid_sizes, count(DISTINCT block_size) AS block_sizes,
           count(DISTINCT registers_per_thread) AS register_counts, count(DISTINCT op_shapes) AS op_shapes_seen,
           min(duration_ns) AS min_duration_ns, max(duration_ns) AS max_duration_ns,
           max(CASE WHEN grid_size IS NOT NULL THEN duration_ns END) AS slowest_with_grid_ns,
           max(CASE WHEN block_size IS NOT NULL THEN duration_ns END) AS slowest_with_block_ns,
           max(CASE WHEN op_shapes IS NOT NULL THEN duration_ns END) AS slowest_with_shapes_ns,
           -- whether each value of a pair varies over the launches with both (a constant one gives NaN, as corr does)
           count(DISTINCT CASE WHEN grid IS NOT NULL THEN duration_ns END) > 1 AS dg_x_varies,
           count(DISTINCT CASE WHEN duration_ns IS NOT NULL THEN grid_size END) > 1 AS dg_y_varies,
           count(DISTINCT CASE WHEN block IS NOT NULL THEN duration_ns END) > 1 AS db_x_varies,
           count(DISTINCT CASE WHEN duration_ns IS NOT NULL THEN block_size END) > 1 AS db_y_varies,
           count(DISTINCT CASE WHEN registers IS NOT NULL THEN duration_ns END) > 1 AS dr_x_varies,
           count(DISTINCT CASE WHEN duration_ns IS NOT NULL THEN registers_per_thread END) > 1 AS dr_y_varies,
           min(CASE WHEN grid IS NOT NULL THEN min_sm_pct END) < max(CASE WHEN grid IS NOT NULL THEN max_sm_pct END) AS sg_x_varies,
           count(DISTINCT CASE WHEN sm_pct_launches > 0 THEN grid_size END) > 1 AS sg_y_varies,
           min(CASE WHEN grid IS NOT NULL THEN min_dram_pct END) < max(CASE WHEN grid IS NOT NULL THEN max_dram_pct END) AS rg_x_varies,
           count(DISTINCT CASE WHEN dram_pct_launches > 0 THEN grid_size END) > 1 AS rg_y_varies
    FROM shapes
    GROUP BY kernel_id, library, op_class
), per_kernel AS (
    -- the grid, block and op shapes of the longest launch that has one (the lowest of launches equally long)
    SELECT k.*, min(CASE WHEN s.duration_ns = k.slowest_with_grid_ns THEN s.grid_size END) AS slowest_grid_size,
           min(CASE WHEN s.duration_ns = k.slowest_with_block_ns THEN s.block_size END) AS slowest_block_size,
           min(CASE WHEN s.duration_ns = k.slowest_with_shapes_ns THEN s.op_shapes END) AS slowest_op_shapes
    FROM per_kernel_sums k
    JOIN shapes s ON s.kernel_id IS NOT DISTINCT FROM k.kernel_id AND s.library IS NOT DISTINCT FROM k.library
                 AND s.op_class IS NOT DISTINCT FROM k.op_class
    GROUP BY ALL
)
SELECT k.kernel_id, k.library, k.op_class, k.kernel_base, k.launches, k.grid_sizes, k.block_sizes, k.register_counts,
       k.op_shapes_seen, k.min_duration_ns, md.median_duration_ns, k.max_duration_ns,
       CASE WHEN k.grid_sizes > 1 THEN CASE WHEN k.dg_x_varies AND k.dg_y_varies THEN c.dg_c / sqrt(c.dg_x * c.dg_y)
                                        WHEN c.dg_x IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS corr_duration_grid,
       CASE WHEN k.block_sizes > 1 THEN CASE WHEN k.db_x_varies AND k.db_y_varies THEN c.db_c / sqrt(c.db_x * c.db_y)
                                        WHEN c.db_x IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS corr_duration_block,
       CASE WHEN k.register_counts > 1 THEN CASE WHEN k.dr_x_varies AND k.dr_y_varies THEN c.dr_c / sqrt(c.dr_x * c.dr_y)
                                        WHEN c.dr_x IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS corr_duration_registers,
       CASE WHEN k.grid_sizes > 1 THEN CASE WHEN k.sg_x_varies AND k.sg_y_varies THEN c.sg_c / sqrt(c.sg_x * c.sg_y)
                                        WHEN c.sg_x IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS corr_sm_pct_grid,
       CASE WHEN k.grid_sizes > 1 THEN CASE WHEN k.rg_x_varies AND k.rg_y_varies THEN c.rg_c / sqrt(c.rg_x * c.rg_y)
                                        WHEN c.rg_x IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS corr_dram_pct_grid,
       -- regr_slope: 0 for a constant duration, NaN where the grid sizes with a duration are one
       CASE WHEN k.grid_sizes > 1 THEN CASE WHEN k.dg_y_varies AND k.dg_x_varies THEN c.dg_c / c.dg_y
                                            WHEN k.dg_y_varies THEN 0.0
                                            WHEN c.dg_y IS NOT NULL THEN CAST('NaN' AS DOUBLE) END END AS ns_per_block,
       k.slowest_grid_size, k.slowest_block_size, k.slowest_op_shapes
FROM per_kernel k
LEFT JOIN moments c ON c.kernel_id IS NOT DISTINCT FROM k.kernel_id AND c.library IS NOT DISTINCT FROM k.library
     AND c.op_class IS NOT DISTINCT FROM k.op_class
LEFT JOIN medians md ON md.kernel_id IS NOT DISTINCT FROM k.kernel_id AND md.library IS NOT DISTINCT FROM k.library
     AND md.op_class IS NOT DISTINCT FROM k.op_class
ORDER BY launches DESC, kernel_id
