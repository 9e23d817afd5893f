-- Each model's real GPU time (kernel_time) split by library and by op class, as shares of that model's time: dimension, model, key, pct.
SELECT 'library' AS dimension, model, library AS key,
       100 * sum(gpu_time_ns) / sum(sum(gpu_time_ns)) OVER (PARTITION BY model) AS pct
FROM kernel_time WHERE {selected_models} GROUP BY model, library
UNION ALL
SELECT 'op_class' AS dimension, model, op_class AS key,
       100 * sum(gpu_time_ns) / sum(sum(gpu_time_ns)) OVER (PARTITION BY model) AS pct
FROM kernel_time WHERE {selected_models} GROUP BY model, op_class
ORDER BY dimension, model, pct DESC
