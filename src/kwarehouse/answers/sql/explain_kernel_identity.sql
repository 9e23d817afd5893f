-- kwh mcp explain_kernel: one kernel identity per model and GPU: its display name, library and op class, GPU time and its share of the model's and the fleet's time (time_weighted_kernels), and which clock the time is.
SELECT t.model, t.gpu, min(t.kernel_base) AS kernel_base, min(t.library) AS library, min(t.op_class) AS op_class,
       sum(t.launches) AS launches, sum(t.gpu_time_ns) AS gpu_time_ns,
       max(w.model_time_pct) AS model_time_pct, max(w.fleet_time_pct) AS fleet_time_pct,
       string_agg(DISTINCT t.time_basis, ', ') AS time_basis
FROM kernel_time t
LEFT JOIN time_weighted_kernels w ON w.model = t.model AND w.gpu = t.gpu AND w.kernel_id = t.kernel_id
WHERE t.kernel_id = $kernel_id AND ($model IS NULL OR t.model = $model)
GROUP BY t.model, t.gpu
ORDER BY gpu_time_ns DESC NULLS LAST, t.model, t.gpu
