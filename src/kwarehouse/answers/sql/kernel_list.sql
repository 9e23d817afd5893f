-- kwh kernels: one row per kernel identity and classification (model ? or all; only unclassified ones when ? is true; LIMIT ?), with its share of the GPU time of the selection, readable name, the verdict and fix of its longest ncu launch, time basis and counter coverage.
WITH selected AS (SELECT * FROM kernel_time WHERE (? IS NULL OR model = ?)),
{kernel_names_and_verdicts}

SELECT s.kernel_id, library, op_class, sum(launches) AS launches, count(DISTINCT model) AS models,
       round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       round(100 * sum(gpu_time_ns) / nullif((SELECT sum(gpu_time_ns) FROM selected), 0), 2) AS share_pct,
       coalesce(any_value(d.kernel_display), any_value(s.kernel_base)) AS kernel_display,
       any_value(v.bottleneck) AS bottleneck, any_value(v.fix) AS fix,
       any_value(s.kernel_base) AS kernel_base, any_value(kernel_signature) AS kernel_signature,
       CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis,
       round(100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) / nullif(sum(gpu_time_ns), 0), 1)
           AS counter_coverage_pct
FROM selected s LEFT JOIN displays d USING (kernel_id) LEFT JOIN verdicts v USING (kernel_id)
WHERE NOT ? OR library = 'unknown' OR op_class = 'unknown'
GROUP BY s.kernel_id, library, op_class
ORDER BY gpu_time_us DESC NULLS LAST, s.kernel_id
LIMIT ?
