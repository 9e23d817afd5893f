-- kwh mcp explain_kernel: where one kernel identity's ncu counters come from per model and GPU (kernel_time): its own profile, borrowed from another run or model (and how old), or none.
SELECT model, gpu, counter_match, counter_source, borrowed_from_run, borrowed_from_model,
       max(counter_age_days) AS counter_age_days, max(counter_coverage_pct) AS counter_coverage_pct,
       sum(gpu_time_ns) AS gpu_time_ns
FROM kernel_time
WHERE kernel_id = $kernel_id AND ($model IS NULL OR model = $model)
GROUP BY ALL
ORDER BY gpu_time_ns DESC NULLS LAST, model, gpu
