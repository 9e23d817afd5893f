-- Per model and GPU, its ten kernels with the most real GPU time (time_weighted_kernels), each with the class holding most of that time, its share of the model's GPU time (not the fleet's), the counters' source, and from that class's longest ncu launch of the kernel on that GPU (this model's first, else the model the counters were borrowed from) the limiting unit, ncu's verdict, whether kwh agrees, what decided it and the fix.
WITH verdicts AS (
    SELECT model, gpu, kernel_id, bottleneck,
           arg_max(limiting_unit, coalesce(duration_ns, -1)) AS limiting_unit,
           arg_max(ncu_verdict, coalesce(duration_ns, -1)) AS ncu_verdict,
           bool_and(agrees_with_ncu) AS agrees_with_ncu,
           arg_max(decided_by, coalesce(duration_ns, -1)) AS decided_by,
           arg_max(fix, coalesce(duration_ns, -1)) AS fix,
           count(*) AS ncu_launches
    FROM bottleneck_class
    GROUP BY model, gpu, kernel_id, bottleneck
), ranked AS (
    SELECT w.*, row_number() OVER (PARTITION BY w.model, w.gpu ORDER BY w.weight_ns DESC, w.kernel_base, w.kernel_id) AS place
    FROM time_weighted_kernels w
    WHERE {selected_models} AND w.weight_ns > 0
)
SELECT w.model, w.gpu, w.kernel_base AS kernel, w.library, w.bottleneck, v.limiting_unit,
       round(w.weight_ns / 1e3, 1) AS gpu_time_us, round(w.model_time_pct, 2) AS model_time_pct, w.time_basis,
       coalesce(w.borrowed_from_model, CASE WHEN w.counter_match <> 'not profiled' THEN w.model END) AS counters_from,
       round(w.sm_pct, 1) AS sm_pct, round(w.mem_pct, 1) AS memory_pct, v.ncu_verdict, v.agrees_with_ncu,
       v.decided_by, v.fix
FROM ranked w
LEFT JOIN verdicts v ON v.gpu = w.gpu AND v.kernel_id = w.kernel_id AND v.bottleneck = w.bottleneck
     AND v.model = coalesce(w.borrowed_from_model, w.model)
WHERE w.place <= 10
ORDER BY w.model, w.gpu, w.place
