-- How do the kernels perform? Per library and op class: GPU time, time-weighted SM and memory throughput, and how the time splits across every bottleneck class (one column each: the shares add up to 100).
SELECT library, op_class,
       round(sum(duration_ns) / 1e3, 1) AS gpu_time_us,
       round(sum(sm_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS sm_pct,
       round(sum(memory_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS memory_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'compute-bound' THEN duration_ns END), 0) / sum(duration_ns), 1) AS compute_bound_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'memory-bound' THEN duration_ns END), 0) / sum(duration_ns), 1) AS memory_bound_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'cache-inefficient' THEN duration_ns END), 0) / sum(duration_ns), 1) AS cache_inefficient_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'latency-bound' THEN duration_ns END), 0) / sum(duration_ns), 1) AS latency_bound_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'launch-overhead' THEN duration_ns END), 0) / sum(duration_ns), 1) AS launch_overhead_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck = 'mixed' THEN duration_ns END), 0) / sum(duration_ns), 1) AS mixed_pct,
       round(100 * coalesce(sum(CASE WHEN bottleneck IS NULL OR bottleneck NOT IN ('compute-bound', 'memory-bound', 'cache-inefficient',
             'latency-bound', 'launch-overhead', 'mixed') THEN duration_ns END), 0) / sum(duration_ns), 1) AS other_pct
FROM bottleneck_class
GROUP BY library, op_class
ORDER BY gpu_time_us DESC
