-- kwh summary: the top kernels (LIMIT ?) by real GPU time across the fleet, each identity with its readable name, launches, models, its share of the fleet's GPU time, SM % and DRAM % weighted by real time over the time that has counters, the verdict of its longest ncu launch, time basis and counter coverage; XLA's compile-time autotuning left out.
WITH {kernel_names_and_verdicts}

SELECT left(coalesce(any_value(d.kernel_display), any_value(t.kernel_base)), 60) AS kernel, library, op_class,
       sum(launches) AS launches,
       count(DISTINCT model) AS models, round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(gpu_time_ns) / sum(sum(gpu_time_ns)) OVER (), 1) AS share_pct,
       round(time_weighted(sm_pct, gpu_time_ns), 1) AS sm_pct,
       round(time_weighted(dram_pct, gpu_time_ns), 1) AS dram_pct,
       any_value(v.bottleneck) AS bottleneck,
       CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis,
       round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) / nullif(sum(gpu_time_ns), 0), 1)
           AS counter_coverage_pct
FROM kernel_time t LEFT JOIN displays d USING (kernel_id) LEFT JOIN verdicts v USING (kernel_id)
WHERE op_class IS DISTINCT FROM 'autotune'   -- XLA's compile-time autotuning (op_class_rules.csv): not the model's work
GROUP BY t.kernel_id, library, op_class ORDER BY gpu_time_us DESC NULLS LAST LIMIT ?
