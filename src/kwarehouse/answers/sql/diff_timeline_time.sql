-- kwh diff, a side of timeline runs (list ?, given twice): each kernel identity's real GPU time per run, from its launches, or for an nsys run exported as `nsys stats` only, from its kernel summary.
SELECT kernel_id, run_id, CAST(sum(duration_ns) AS DOUBLE) FROM kernel_launches
WHERE list_contains(?, run_id) AND activity = 'kernel' GROUP BY ALL
UNION ALL
SELECT kernel_id, run_id, sum(total_ns) FROM kernel_summaries
WHERE list_contains(?, run_id) AND report = 'cuda_gpu_kern_sum'
  AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches) GROUP BY ALL
