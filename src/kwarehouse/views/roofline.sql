-- Roofline per launch and per kernel identity on each GPU: arithmetic intensity, achieved FLOP/s, the GPU's peaks and ridge point, and the fraction of the roof reached.
-- FLOPs are kernels.flops: CUDA-core FLOPs from ncu's roofline counters plus tensor-core FLOPs where the
-- export has the tensor roofline counters (kernels.flops_source says which). The compute roof is
-- kernels.peak_flops_per_s: the dense tensor peak of the launch's math dtype when it has tensor FLOPs,
-- else the FP64 peak where FP64 FLOPs dominate, else FP32. roof = min(peak FLOP/s,
-- intensity x peak DRAM bandwidth); ridge point = peak FLOP/s / peak bandwidth (FLOP per byte).
WITH launches AS (
    SELECT 'launch' AS level, run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base,
           CAST(1 AS BIGINT) AS launches, duration_ns, flops, dram_bytes, arithmetic_intensity, achieved_flops_per_s,
           -- runs an older kwh wrote have no peak_flops_per_s until `kwh renormalize`: the CUDA-core roof
           coalesce(peak_flops_per_s,
                    CASE WHEN coalesce(flops_fp64, 0) > coalesce(flops_fp32, 0) + coalesce(flops_fp16, 0)
                         THEN peak_fp64_flops_per_s ELSE peak_fp32_flops_per_s END) AS peak_flops_per_s,
           peak_dram_bytes_per_s
    FROM kernels
), identities AS (
    SELECT 'kernel' AS level, CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS BIGINT) AS launch_id,
           CAST(NULL AS VARCHAR) AS model, gpu, kernel_id, library, op_class, min(kernel_base) AS kernel_base,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS duration_ns,
           sum(flops) AS flops, sum(dram_bytes) AS dram_bytes,
           sum(flops) / NULLIF(sum(CASE WHEN flops IS NOT NULL THEN dram_bytes END), 0) AS arithmetic_intensity,
           sum(flops) / NULLIF(sum(CASE WHEN flops IS NOT NULL THEN duration_ns END) * 1e-9, 0) AS achieved_flops_per_s,
           avg(peak_flops_per_s) AS peak_flops_per_s, avg(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s
    FROM launches
    GROUP BY gpu, kernel_id, library, op_class
), both_levels AS (
    SELECT * FROM launches
    UNION ALL
    SELECT * FROM identities
), roofs AS (
    SELECT *,
           peak_flops_per_s / NULLIF(peak_dram_bytes_per_s, 0) AS ridge_point,
           least(peak_flops_per_s, arithmetic_intensity * peak_dram_bytes_per_s) AS roof_flops_per_s
    FROM both_levels
)
SELECT level, run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base, launches, duration_ns,
       flops, dram_bytes, arithmetic_intensity, achieved_flops_per_s, peak_flops_per_s, peak_dram_bytes_per_s,
       ridge_point, roof_flops_per_s,
       achieved_flops_per_s / NULLIF(roof_flops_per_s, 0) AS fraction_of_roof,
       CASE WHEN arithmetic_intensity IS NULL OR ridge_point IS NULL THEN NULL
            WHEN arithmetic_intensity < ridge_point THEN 'memory' ELSE 'compute' END AS roof_side
FROM roofs
ORDER BY level DESC, gpu, kernel_id, model, run_id, launch_id
