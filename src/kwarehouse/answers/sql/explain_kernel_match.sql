-- kwh mcp explain_kernel: the kernel identities a kernel_id (or a unique prefix of one) or a name fragment names, most GPU time first (optionally of one model).
SELECT kernel_id, min(kernel_base) AS kernel_base, sum(gpu_time_ns) AS gpu_time_ns,
       string_agg(DISTINCT model, ', ' ORDER BY model) AS models
FROM kernel_time
WHERE (starts_with(kernel_id, lower($kernel)) OR contains(lower(kernel_base), lower($kernel)))
  AND ($model IS NULL OR model = $model)
GROUP BY kernel_id
ORDER BY starts_with(kernel_id, lower($kernel)) DESC, gpu_time_ns DESC NULLS LAST, kernel_id
LIMIT 11
