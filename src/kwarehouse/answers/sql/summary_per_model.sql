-- kwh summary: per model and GPU, its runs and tools, and its kernels on its real GPU time (kernel_time: timelines where it has any on that GPU, else ncu launches, time_basis 'ncu replay'), with the share of that time that has ncu counters (its own or borrowed from another model's run of the same kernel on the same GPU).
WITH all_runs AS (SELECT model, gpu, count(*) AS runs,
                         string_agg(DISTINCT tool, ', ' ORDER BY tool) AS tools FROM runs GROUP BY ALL)
SELECT r.model, r.gpu, r.runs, r.tools, coalesce(k.kernels, 0) AS kernels,
       coalesce(k.distinct_kernels, 0) AS distinct_kernels, k.gpu_time_us, k.time_basis, k.counter_coverage_pct
FROM all_runs r LEFT JOIN (
    SELECT model, gpu, sum(launches) AS kernels, count(DISTINCT kernel_id) AS distinct_kernels,
           round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us, min(time_basis) AS time_basis,
           round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
                 / nullif(sum(gpu_time_ns), 0), 1) AS counter_coverage_pct
    FROM kernel_time GROUP BY ALL) k USING (model, gpu)
ORDER BY r.model, r.gpu
