-- kernel_time's rows from ncu alone, per model, GPU, kernel identity and launch shape: a model without a timeline on that GPU (time_basis 'ncu replay': its ncu launches are the time and the counters), and the kernels a model's timelines never ran (kept at zero weight, 'not in timeline').
-- Partition-local (views.PARTITION_LOCAL): one model and GPU's ncu launches and its own timeline.
WITH timeline_models AS (
    SELECT DISTINCT model, gpu FROM timeline_kernel_shapes
), timeline_ids AS (
    SELECT DISTINCT model, gpu, kernel_id FROM timeline_kernel_shapes
)
-- models without a timeline on that GPU: ncu's own launches are the time and the counters;
-- with one: the identities its timelines never ran, kept at zero weight
SELECT n.model, n.gpu, n.kernel_id, min(n.kernel_base) AS kernel_base,
       min(n.kernel_signature) AS kernel_signature, min(n.library) AS library,
       min(n.op_class) AS op_class, n.grid_x, n.grid_y, n.grid_z, n.block_x, n.block_y, n.block_z, n.op_shapes,
       CASE WHEN tm.model IS NULL THEN 'ncu replay' ELSE 'timeline' END AS time_basis,
       count(DISTINCT n.run_id) AS runs, CASE WHEN tm.model IS NULL THEN count(*) ELSE 0 END AS launches,
       CASE WHEN tm.model IS NULL THEN CAST(sum(n.duration_ns) AS DOUBLE) ELSE 0.0 END AS gpu_time_ns,
       CASE WHEN tm.model IS NULL THEN 'replayed launches' ELSE 'not in timeline' END AS counter_match,
       'this model' AS counter_source,
       CASE WHEN count(DISTINCT n.run_id) = 1 THEN min(n.run_id) END AS borrowed_from_run,
       n.model AS borrowed_from_model, 0 AS counter_age_days,
       time_weighted(n.sm_pct, n.duration_ns) AS sm_pct,
       time_weighted(n.dram_pct, n.duration_ns) AS dram_pct,
       time_weighted(n.mem_pct, n.duration_ns) AS mem_pct,
       time_weighted(n.l1_hit_pct, n.duration_ns) AS l1_hit_pct,
       time_weighted(n.l2_hit_pct, n.duration_ns) AS l2_hit_pct,
       time_weighted(n.achieved_occupancy_pct, n.duration_ns) AS achieved_occupancy_pct,
       time_weighted(n.tensor_pipe_pct, n.duration_ns) AS tensor_pipe_pct,
       avg(n.dram_bytes) AS dram_bytes_per_launch, avg(n.duration_ns) AS ncu_ns_per_launch,
       max(n.peak_dram_bytes_per_s) AS peak_dram_bytes_per_s
FROM kernels n
LEFT JOIN timeline_models tm ON tm.model = n.model AND tm.gpu = n.gpu
LEFT JOIN timeline_ids ti ON ti.model = n.model AND ti.gpu = n.gpu AND ti.kernel_id = n.kernel_id
WHERE ti.kernel_id IS NULL
GROUP BY n.model, n.gpu, n.kernel_id, n.grid_x, n.grid_y, n.grid_z, n.block_x, n.block_y, n.block_z, n.op_shapes,
         tm.model
