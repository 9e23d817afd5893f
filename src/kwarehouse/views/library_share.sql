-- Share of GPU time by library and op class, per model and GPU (library_pct adds up the library over its op classes).
WITH per_class AS (
    SELECT model, gpu, library, op_class, count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns
    FROM kernels
    GROUP BY model, gpu, library, op_class
)
SELECT model, gpu, library, op_class, launches, gpu_time_ns,
       100 * gpu_time_ns / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu), 0) AS op_class_pct,
       100 * sum(gpu_time_ns) OVER (PARTITION BY model, gpu, library)
           / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu), 0) AS library_pct
FROM per_class
ORDER BY model, gpu, gpu_time_ns DESC, library, op_class
