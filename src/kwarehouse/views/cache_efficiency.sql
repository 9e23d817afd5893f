-- Cache efficiency per kernel identity and model: time-weighted L1 and L2 hit rates with DRAM bytes moved, flagging memory-bound kernels with a low L2 hit rate.
-- memory_bound: time-weighted max(DRAM %, memory %) >= threshold memory_pct; low_l2_hit: L2 hit < threshold
-- l2_hit_pct (the thresholds view).
WITH t AS (
    SELECT memory_pct AS memory_cut, l2_hit_pct AS l2_hit_cut FROM thresholds
), weighted AS (
    SELECT model, gpu, kernel_id, library, op_class, min(kernel_base) AS kernel_base, count(*) AS launches,
           CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           time_weighted(l1_hit_pct, duration_ns) AS l1_hit_pct,
           time_weighted(l2_hit_pct, duration_ns) AS l2_hit_pct,
           time_weighted(greatest(coalesce(dram_pct, mem_pct), coalesce(mem_pct, dram_pct)), duration_ns) AS memory_pct,
           time_weighted(dram_pct, duration_ns) AS dram_pct,
           CAST(sum(dram_bytes) AS DOUBLE) AS dram_bytes
    FROM kernels
    GROUP BY model, gpu, kernel_id, library, op_class
)
SELECT model, gpu, kernel_id, library, op_class, kernel_base, launches, gpu_time_ns,
       l1_hit_pct, l2_hit_pct, dram_pct, memory_pct, dram_bytes,
       dram_bytes / NULLIF(launches, 0) AS dram_bytes_per_launch,
       memory_pct >= t.memory_cut AS memory_bound,
       l2_hit_pct < t.l2_hit_cut AS low_l2_hit,
       coalesce(memory_pct >= t.memory_cut AND l2_hit_pct < t.l2_hit_cut, false) AS memory_bound_low_l2_hit
FROM weighted CROSS JOIN t
ORDER BY model, gpu, gpu_time_ns DESC, kernel_id
