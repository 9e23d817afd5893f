-- Any metric for any launch, long form: here every warp-stall reason of the ten longest launches.
WITH longest AS (SELECT run_id, launch_id, kernel_name FROM kernels
                 WHERE metric_count > 100   -- launches with the full raw page
                 ORDER BY duration_ns DESC LIMIT 10)
SELECT l.kernel_name, m.metric, m.value, m.unit
FROM metrics m JOIN longest l USING (run_id, launch_id)
WHERE m.metric LIKE 'smsp__average_warps_issue_stalled_%_per_issue_active.ratio'
  -- the same prefix as a range, which Parquet row-group statistics can use to skip other metrics
  AND m.metric >= 'smsp__average_warps_issue_stalled_' AND m.metric < 'smsp__average_warps_issue_stalled`'
ORDER BY l.kernel_name, m.value DESC;
