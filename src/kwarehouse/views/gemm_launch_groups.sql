-- GEMM launches per model and GPU grouped by kernel, grid, block, op shape, math dtype and roof: the timeline launches with op shapes and every ncu launch (a launch without its own shapes may borrow them from a timeline on that GPU), with their count, time, executed tensor FLOPs and waves; the fleet-wide GEMM efficiency adds these rows up instead of reading every launch.
-- time_basis 'timeline': a timeline launch with op shapes (op, m, n, k, batch from the trace; peak_flops_per_s
-- and datasheet_peak_flops_per_s its dtype's published dense peak). 'ncu replay': an ncu launch, its op
-- shapes where NVTX gave them (else NULL: the fleet view borrows them where every timeline on the GPU that
-- ran the same kernel, grid and block agrees), model_has_timeline where the model has a timeline on that GPU
-- (its ncu launches then count for executed FLOPs and waves only); peak_flops_per_s (ncu's dense peak at the
-- clock it measured) and datasheet_peak_flops_per_s only where its FLOPs are tensor work (tensor counters or
-- op shapes). executed_flops: the tensor counters' FLOPs summed over executed_launches (the launches that
-- have them); waves_per_sm: the mean over waves_launches. Rows differ by roof where ncu measured different
-- clocks, so that the fleet view's median roofs see every launch's.
WITH timeline_models AS (
    SELECT DISTINCT model, gpu FROM kernel_launches WHERE activity = 'kernel'
), timeline_gemms AS (
    SELECT model, gpu, 'timeline' AS time_basis, false AS model_has_timeline, kernel_id, grid_size, block_size,
           framework_op AS op, gemm_m AS m, gemm_n AS n, gemm_k AS k, gemm_batch AS batch, math_dtype,
           peak_flops_per_s, peak_flops_per_s AS datasheet_peak_flops_per_s,
           CAST(duration_ns AS DOUBLE) AS duration_ns, kernel_base, kernel_display, kernel_name,
           CAST(NULL AS DOUBLE) AS executed_flops, CAST(NULL AS DOUBLE) AS waves_per_sm
    FROM kernel_launches
    WHERE activity = 'kernel' AND gemm_m IS NOT NULL
), ncu_launches AS (
    SELECT k.model, k.gpu, 'ncu replay' AS time_basis, t.model IS NOT NULL AS model_has_timeline, k.kernel_id,
           k.grid_size, k.block_size,
           CASE WHEN k.gemm_m IS NOT NULL THEN k.framework_op END AS op, k.gemm_m AS m, k.gemm_n AS n, k.gemm_k AS k,
           k.gemm_batch AS batch, k.math_dtype,
           -- the kernel's own roof where its FLOPs are tensor work (counters or shapes), else none here
           CASE WHEN k.flops_source = 'ncu tensor counters' OR k.flops_source LIKE 'op shapes%'
                THEN k.peak_flops_per_s END AS peak_flops_per_s,
           CASE WHEN k.flops_source = 'ncu tensor counters' OR k.flops_source LIKE 'op shapes%'
                THEN k.datasheet_peak_flops_per_s END AS datasheet_peak_flops_per_s,
           k.duration_ns, k.kernel_base, k.kernel_display, k.kernel_name,
           CASE WHEN k.flops_source = 'ncu tensor counters' THEN k.tensor_flops END AS executed_flops, k.waves_per_sm
    FROM kernels k
    LEFT JOIN timeline_models t ON t.model = k.model AND t.gpu = k.gpu
), launches AS (
    SELECT * FROM timeline_gemms
    UNION ALL
    SELECT * FROM ncu_launches
)
SELECT model, gpu, time_basis, model_has_timeline, kernel_id, grid_size, block_size, op, m, n, k, batch, math_dtype,
       peak_flops_per_s, datasheet_peak_flops_per_s, count(*) AS launches, sum(duration_ns) AS duration_ns,
       min(kernel_base) AS kernel_base, min(kernel_display) AS kernel_display, min(kernel_name) AS kernel_name,
       sum(executed_flops) AS executed_flops, count(executed_flops) AS executed_launches,
       avg(waves_per_sm) AS waves_per_sm, count(waves_per_sm) AS waves_launches
FROM launches
GROUP BY model, gpu, time_basis, model_has_timeline, kernel_id, grid_size, block_size, op, m, n, k, batch, math_dtype,
         peak_flops_per_s, datasheet_peak_flops_per_s
ORDER BY model, gpu, time_basis, kernel_id, grid_size, block_size, m, n, k, batch
