-- Each model's most recent ncu counters per GPU and kernel, at two grains (grain): per launch shape (grid, block, op shapes) and per kernel identity (all its shapes together, shape columns NULL), duration-weighted over the launches of that ncu run; the candidates kernel_time picks a timeline row's counters from.
-- Partition-local (views.PARTITION_LOCAL): the most recent run of this model; kernel_time takes the fleet's
-- most recent across models from these rows.
WITH run_days AS (
    SELECT run_id, coalesce(run_date, CAST(ingested_at AS DATE)) AS run_day FROM runs
), ncu_launches AS (
    SELECT k.run_id, k.model, k.gpu, k.kernel_id, k.kernel_base, k.kernel_signature, k.library, k.op_class,
           k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.op_shapes, k.duration_ns,
           k.sm_pct, k.dram_pct, k.mem_pct, k.l1_hit_pct, k.l2_hit_pct, k.achieved_occupancy_pct, k.tensor_pipe_pct,
           k.dram_bytes, k.peak_dram_bytes_per_s, d.run_day
    FROM kernels k
    LEFT JOIN run_days d ON d.run_id = k.run_id
), ncu_grains AS (
    -- one counter set per ncu run and kernel, at two grains in one pass (GROUPING SETS): per launch shape,
    -- and per kernel identity with all its shapes together (by_identity = 1); duration-weighted over its launches
    SELECT run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes,
           GROUPING(grid_x) AS by_identity,
           max(run_day) AS run_day, count(*) AS launches, sum(duration_ns) AS ncu_time_ns,
           time_weighted(sm_pct, duration_ns) AS sm_pct,
           time_weighted(dram_pct, duration_ns) AS dram_pct,
           time_weighted(mem_pct, duration_ns) AS mem_pct,
           time_weighted(l1_hit_pct, duration_ns) AS l1_hit_pct,
           time_weighted(l2_hit_pct, duration_ns) AS l2_hit_pct,
           time_weighted(achieved_occupancy_pct, duration_ns) AS achieved_occupancy_pct,
           time_weighted(tensor_pipe_pct, duration_ns) AS tensor_pipe_pct,
           avg(dram_bytes) AS dram_bytes_per_launch, avg(duration_ns) AS ncu_ns_per_launch,
           max(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s
    FROM ncu_launches
    GROUP BY GROUPING SETS ((run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes),
                            (run_id, model, gpu, kernel_id))
), ncu_shapes AS (
    SELECT run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, run_day, launches,
           ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_grains WHERE by_identity = 0
), latest_shapes AS (
    -- per model, the most recent ncu run that profiled each shape (columns listed: Spark's QUALIFY
    -- rewrite adds a column to SELECT *)
    SELECT run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, run_day, launches,
           ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_shapes
    QUALIFY row_number() OVER (PARTITION BY model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y,
                                            block_z, op_shapes ORDER BY run_day DESC, run_id) = 1
), ncu_identity_runs AS (
    SELECT run_id, model, gpu, kernel_id, run_day, launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct,
           achieved_occupancy_pct, tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_grains WHERE by_identity = 1
), ncu_identities AS (
    -- per model, the most recent ncu run of each kernel identity
    SELECT run_id, model, gpu, kernel_id, run_day, launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_identity_runs
    QUALIFY row_number() OVER (PARTITION BY model, gpu, kernel_id ORDER BY run_day DESC, run_id) = 1
)
SELECT 'shape' AS grain, run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, run_day,
       launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct,
       dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
FROM latest_shapes
UNION ALL
SELECT 'identity' AS grain, run_id, model, gpu, kernel_id, CAST(NULL AS BIGINT) AS grid_x, CAST(NULL AS BIGINT) AS grid_y,
       CAST(NULL AS BIGINT) AS grid_z, CAST(NULL AS BIGINT) AS block_x, CAST(NULL AS BIGINT) AS block_y,
       CAST(NULL AS BIGINT) AS block_z, CAST(NULL AS VARCHAR) AS op_shapes, run_day,
       launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct,
       dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
FROM ncu_identities
