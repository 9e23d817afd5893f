-- What share of fleet GPU time is memory-bound (or compute-bound, latency-bound, ...)? ncu's bottleneck classes weighted by real timeline GPU time; 'not profiled' is time ncu never saw.
SELECT bottleneck, round(sum(weight_ns) / 1e6, 3) AS gpu_time_ms,
       round(100 * sum(weight_ns) / sum(sum(weight_ns)) OVER (), 1) AS fleet_time_pct,
       count(DISTINCT kernel_id) AS kernel_ids
FROM time_weighted_kernels
GROUP BY bottleneck
ORDER BY gpu_time_ms DESC
