-- kwh mcp explain_kernel: kwh's bottleneck verdict of one kernel identity per model, GPU and verdict (bottleneck_class), with the metrics that decided it (of the longest launch), ncu's own verdict and whether they agree.
SELECT model, gpu, bottleneck, limiting_unit, count(*) AS launches, sum(duration_ns) AS duration_ns,
       arg_max(decided_by, coalesce(duration_ns, 0)) AS decided_by,
       arg_max(ncu_verdict, coalesce(duration_ns, 0)) AS ncu_verdict,
       arg_max(agrees_with_ncu, coalesce(duration_ns, 0)) AS agrees_with_ncu,
       arg_max(disagreement, coalesce(duration_ns, 0)) AS disagreement,
       arg_max(missing_data, coalesce(duration_ns, 0)) AS missing_data,
       arg_max(duration_basis, coalesce(duration_ns, 0)) AS duration_basis
FROM bottleneck_class
WHERE kernel_id = $kernel_id AND ($model IS NULL OR model = $model)
GROUP BY model, gpu, bottleneck, limiting_unit
ORDER BY duration_ns DESC NULLS LAST, model, gpu, bottleneck
