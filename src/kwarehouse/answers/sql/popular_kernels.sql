-- The fifteen kernels taking the most real GPU time in the selection: readable name, library, time, models, launches, time basis and the share of the time with ncu counters.
SELECT coalesce((SELECT min(kernel_display) FROM kernel_launches l WHERE l.kernel_id = t.kernel_id),
                (SELECT min(kernel_display) FROM kernels k WHERE k.kernel_id = t.kernel_id), min(kernel_base)) AS kernel,
       library, sum(gpu_time_ns) AS gpu_time_ns, count(DISTINCT model) AS models, sum(launches) AS launches, kernel_id,
       min(kernel_signature) AS kernel_signature,
       CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis,
       100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) / nullif(sum(gpu_time_ns), 0)
           AS counter_coverage_pct
FROM kernel_time t
WHERE {selected_models}
GROUP BY kernel_id, library
ORDER BY gpu_time_ns DESC
LIMIT 15
