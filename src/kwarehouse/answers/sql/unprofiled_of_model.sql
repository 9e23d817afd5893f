-- kwh mcp hot_unprofiled_kernels: one model's kernels by real GPU time that no ncu launch describes (kernel_time counter_match 'not profiled'), with their share of the model's GPU time.
SELECT kernel_id, min(kernel_base) AS kernel_base, min(library) AS library,
       min(op_class) AS op_class, sum(launches) AS launches, sum(gpu_time_ns) AS gpu_time_ns,
       100.0 * sum(gpu_time_ns) / (SELECT sum(gpu_time_ns) FROM kernel_time WHERE model = $model) AS model_time_pct,
       string_agg(DISTINCT gpu, ', ' ORDER BY gpu) AS gpus, string_agg(DISTINCT time_basis, ', ') AS time_basis
FROM kernel_time
WHERE model = $model AND counter_match = 'not profiled' AND gpu_time_ns > 0
GROUP BY kernel_id
ORDER BY gpu_time_ns DESC, kernel_id
