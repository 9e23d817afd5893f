-- Per model and GPU: what its GPU time rests on (timeline or ncu replay), its launches and time, and the share of that time with ncu counters (own or borrowed from another model).
SELECT model, gpu, min(time_basis) AS time_basis, sum(launches) AS launches, round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
             / nullif(sum(gpu_time_ns), 0), 1) AS counter_coverage_pct,
       round(100 * sum(CASE WHEN counter_source = 'other model' THEN gpu_time_ns ELSE 0 END)
             / nullif(sum(gpu_time_ns), 0), 1) AS borrowed_pct
FROM kernel_time
WHERE {selected_models}
GROUP BY model, gpu
ORDER BY model, gpu
