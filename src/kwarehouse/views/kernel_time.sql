-- Real GPU time per model, GPU, kernel identity and launch shape (grid, block, op shapes): timeline time (nsys, PyTorch traces) where the model has a timeline on that GPU, else ncu replay time (time_basis), with the ncu counters that describe it, borrowed from other runs and models where this model's ncu did not profile it (provenance in borrowed_from_run, borrowed_from_model, counter_match, counter_age_days).
-- Why: ncu profiles the first N launches, serialised and cache-flushed (small kernels read 1.6-2.5x
-- longer than in the real run), so weighting by its durations misranks kernels and misses big ones.
-- time_basis 'timeline': gpu_time_ns is the sum of the timeline launches of all the model's timeline runs
-- on that GPU (kernel_launches, else an nsys cuda_gpu_kern_sum of a run without launches). 'ncu replay':
-- the model has no timeline on that GPU; its ncu launches are the time and the counters.
-- Counters of a timeline row come from ncu launches of the same kernel_id on the same GPU, first match wins:
--   1. 'exact shape': same grid and block (and op shapes where both sides know them), same model first,
--      then another model; the most recent ncu run of that model;
--   2. 'identity only': the kernel_id alone (another shape: counters describe it less well), same model first;
--   3. 'not profiled': no ncu launch of that kernel on that GPU anywhere (counters NULL).
-- An ncu kernel that the model's timelines never ran is kept with gpu_time_ns 0 ('not in timeline').
-- counter_coverage_pct is the share of the row's real time that has counters (0 or 100 per row; views that
-- add rows up weight it by time); model_counter_coverage_pct the same for the model and GPU.
-- Stored per partition: each model's timeline (timeline_kernel_shapes), its most recent ncu counters
-- (ncu_kernel_counters) and its rows from ncu alone (ncu_kernel_rows); this view picks each timeline row's
-- counters among them, across models, so a commit recomputes only what it changed beneath it.
WITH timeline AS (
    SELECT model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, kernel_base, kernel_signature,
           library, op_class, launches, gpu_time_ns, runs, latest_day
    FROM timeline_kernel_shapes
), latest_shapes AS (
    SELECT run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, run_day, launches,
           ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_kernel_counters WHERE grain = 'shape'
), fleet_shapes AS (
    -- across models, the most recent ncu run that profiled each shape (ties by model name, not by run id,
    -- which hashes the export's path): with this model's own row, the
    -- only candidates a timeline shape needs, so the join stays small however many models share a kernel
    SELECT run_id, model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes, run_day, launches,
           ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM latest_shapes
    QUALIFY row_number() OVER (PARTITION BY gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                            op_shapes ORDER BY run_day DESC, model, run_id) = 1
), ncu_identities AS (
    SELECT run_id, model, gpu, kernel_id, run_day, launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_kernel_counters WHERE grain = 'identity'
), fleet_identities AS (
    -- across models, the most recent ncu run of each kernel identity
    SELECT run_id, model, gpu, kernel_id, run_day, launches, ncu_time_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct,
           tensor_pipe_pct, dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_identities
    QUALIFY row_number() OVER (PARTITION BY gpu, kernel_id ORDER BY run_day DESC, model, run_id) = 1
), candidates AS (
    -- this model's own ncu rows, and the fleet's latest: at most a few candidates per timeline shape
    SELECT t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
           'exact shape' AS counter_match, 1 AS tier, n.model = t.model AS same_model, n.run_id, n.model AS from_model,
           n.run_day, n.sm_pct, n.dram_pct, n.mem_pct, n.l1_hit_pct, n.l2_hit_pct, n.achieved_occupancy_pct,
           n.tensor_pipe_pct, n.dram_bytes_per_launch, n.ncu_ns_per_launch, n.peak_dram_bytes_per_s
    FROM timeline t
    JOIN latest_shapes n ON n.model = t.model AND n.gpu = t.gpu AND n.kernel_id = t.kernel_id
     AND n.grid_x = t.grid_x AND n.grid_y = t.grid_y AND n.grid_z = t.grid_z
     AND n.block_x = t.block_x AND n.block_y = t.block_y AND n.block_z = t.block_z
     AND (n.op_shapes IS NULL OR t.op_shapes IS NULL OR n.op_shapes = t.op_shapes)
    UNION ALL
    SELECT t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
           'exact shape' AS counter_match, 1 AS tier, n.model = t.model AS same_model, n.run_id, n.model AS from_model,
           n.run_day, n.sm_pct, n.dram_pct, n.mem_pct, n.l1_hit_pct, n.l2_hit_pct, n.achieved_occupancy_pct,
           n.tensor_pipe_pct, n.dram_bytes_per_launch, n.ncu_ns_per_launch, n.peak_dram_bytes_per_s
    FROM timeline t
    JOIN fleet_shapes n ON n.gpu = t.gpu AND n.kernel_id = t.kernel_id
     AND n.grid_x = t.grid_x AND n.grid_y = t.grid_y AND n.grid_z = t.grid_z
     AND n.block_x = t.block_x AND n.block_y = t.block_y AND n.block_z = t.block_z
     AND (n.op_shapes IS NULL OR t.op_shapes IS NULL OR n.op_shapes = t.op_shapes)
    UNION ALL
    SELECT t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
           'identity only' AS counter_match, 2 AS tier, n.model = t.model AS same_model, n.run_id, n.model AS from_model,
           n.run_day, n.sm_pct, n.dram_pct, n.mem_pct, n.l1_hit_pct, n.l2_hit_pct, n.achieved_occupancy_pct,
           n.tensor_pipe_pct, n.dram_bytes_per_launch, n.ncu_ns_per_launch, n.peak_dram_bytes_per_s
    FROM timeline t
    JOIN ncu_identities n ON n.model = t.model AND n.gpu = t.gpu AND n.kernel_id = t.kernel_id
    UNION ALL
    SELECT t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
           'identity only' AS counter_match, 2 AS tier, n.model = t.model AS same_model, n.run_id, n.model AS from_model,
           n.run_day, n.sm_pct, n.dram_pct, n.mem_pct, n.l1_hit_pct, n.l2_hit_pct, n.achieved_occupancy_pct,
           n.tensor_pipe_pct, n.dram_bytes_per_launch, n.ncu_ns_per_launch, n.peak_dram_bytes_per_s
    FROM timeline t
    JOIN fleet_identities n ON n.gpu = t.gpu AND n.kernel_id = t.kernel_id
), best AS (
    SELECT *
    FROM candidates
    QUALIFY row_number() OVER (PARTITION BY model, gpu, kernel_id, grid_x, grid_y, grid_z, block_x, block_y,
                                            block_z, op_shapes
                               ORDER BY tier, CASE WHEN same_model THEN 0 ELSE 1 END, run_day DESC, from_model, run_id) = 1
), timeline_rows AS (
    SELECT t.model, t.gpu, t.kernel_id, t.kernel_base, t.kernel_signature, t.library, t.op_class,
           t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
           'timeline' AS time_basis, t.runs, t.launches, t.gpu_time_ns,
           coalesce(b.counter_match, 'not profiled') AS counter_match,
           CASE WHEN b.run_id IS NULL THEN NULL WHEN b.same_model THEN 'this model' ELSE 'other model' END AS counter_source,
           b.run_id AS borrowed_from_run, b.from_model AS borrowed_from_model,
           date_diff('day', b.run_day, t.latest_day) AS counter_age_days,
           b.sm_pct, b.dram_pct, b.mem_pct, b.l1_hit_pct, b.l2_hit_pct, b.achieved_occupancy_pct, b.tensor_pipe_pct,
           b.dram_bytes_per_launch, b.ncu_ns_per_launch, b.peak_dram_bytes_per_s
    FROM timeline t
    LEFT JOIN best b
      ON b.model = t.model AND b.gpu = t.gpu AND b.kernel_id = t.kernel_id
     AND coalesce(b.grid_x, -1) = coalesce(t.grid_x, -1) AND coalesce(b.grid_y, -1) = coalesce(t.grid_y, -1)
     AND coalesce(b.grid_z, -1) = coalesce(t.grid_z, -1) AND coalesce(b.block_x, -1) = coalesce(t.block_x, -1)
     AND coalesce(b.block_y, -1) = coalesce(t.block_y, -1) AND coalesce(b.block_z, -1) = coalesce(t.block_z, -1)
     AND coalesce(b.op_shapes, '') = coalesce(t.op_shapes, '')
), ncu_rows AS (
    SELECT model, gpu, kernel_id, kernel_base, kernel_signature, library, op_class, grid_x, grid_y, grid_z, block_x, block_y, block_z,
           op_shapes, time_basis, runs, launches, gpu_time_ns, counter_match, counter_source, borrowed_from_run, borrowed_from_model,
           counter_age_days, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct,
           dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
    FROM ncu_kernel_rows
), all_rows AS (
    SELECT * FROM timeline_rows
    UNION ALL
    SELECT * FROM ncu_rows
)
SELECT model, gpu, kernel_id, kernel_base, kernel_signature, library, op_class, grid_x, grid_y, grid_z, block_x, block_y, block_z,
       op_shapes, time_basis, runs, launches, gpu_time_ns,
       CASE WHEN counter_match IN ('not profiled', 'not in timeline') AND gpu_time_ns = 0 THEN NULL
            WHEN counter_match = 'not profiled' THEN 0.0 ELSE 100.0 END AS counter_coverage_pct,
       100.0 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) OVER (PARTITION BY model, gpu)
           / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu), 0) AS model_counter_coverage_pct,
       counter_match, counter_source, borrowed_from_run, borrowed_from_model, counter_age_days,
       sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct,
       dram_bytes_per_launch, ncu_ns_per_launch, peak_dram_bytes_per_s
FROM all_rows
ORDER BY model, gpu, gpu_time_ns DESC, kernel_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, op_shapes
