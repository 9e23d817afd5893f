-- Kernel popularity across the fleet: per kernel identity and per library, launches, runs, distinct models and GPUs, total and share of GPU time.
-- level = 'kernel' rows are one kernel identity each; level = 'library' rows add up each library.
-- Ranked by how many models use a kernel, then by GPU time.
WITH fleet AS (
    SELECT CAST(sum(duration_ns) AS DOUBLE) AS total_ns FROM kernels
), per_kernel AS (
    SELECT 'kernel' AS level, kernel_id, library, op_class,
           min(kernel_base) AS kernel_base, min(kernel_signature) AS kernel_signature,
           count(*) AS launches, count(DISTINCT run_id) AS runs, count(DISTINCT model) AS models,
           count(DISTINCT gpu) AS gpus, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns
    FROM kernels
    GROUP BY kernel_id, library, op_class
), per_library AS (
    SELECT 'library' AS level, CAST(NULL AS VARCHAR) AS kernel_id, library, CAST(NULL AS VARCHAR) AS op_class,
           CAST(NULL AS VARCHAR) AS kernel_base, CAST(NULL AS VARCHAR) AS kernel_signature,
           count(*) AS launches, count(DISTINCT run_id) AS runs, count(DISTINCT model) AS models,
           count(DISTINCT gpu) AS gpus, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns
    FROM kernels
    GROUP BY library
), both_levels AS (
    SELECT * FROM per_kernel
    UNION ALL
    SELECT * FROM per_library
)
SELECT level, kernel_id, library, op_class, kernel_base, kernel_signature, launches, runs, models, gpus,
       gpu_time_ns, 100 * gpu_time_ns / NULLIF(fleet.total_ns, 0) AS gpu_time_pct,
       rank() OVER (PARTITION BY level ORDER BY models DESC, gpu_time_ns DESC) AS popularity_rank
FROM both_levels CROSS JOIN fleet
ORDER BY level DESC, popularity_rank, kernel_id
