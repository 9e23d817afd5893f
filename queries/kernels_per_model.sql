-- Kernels profiled per model and GPU, with total GPU time: the first thing to check after an ingest.
SELECT model, gpu, count(DISTINCT run_id) AS runs, count(*) AS kernels,
       sum(duration_ns) / 1e3 AS gpu_time_us
FROM kernels
GROUP BY ALL
ORDER BY model, gpu;
