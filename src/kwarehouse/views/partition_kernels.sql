-- Kernel identities per model and GPU: how many ncu launches ran each, their ncu replay time and their time-weighted DRAM %, how many timeline kernel launches, and the implementation its launches name (the lowest where they differ); fleet-wide views take per-partition counts and totals here instead of reading every launch.
-- ncu_launches is 0 and ncu_ns NULL for a kernel that only a timeline of the partition ran; timeline_launches
-- counts its kernel launches on a timeline (activity 'kernel'). dram_pct: the time-weighted DRAM % of its ncu
-- launches with one, dram_weight_ns: their ncu duration.
SELECT model, gpu, kernel_id,
       count(*) FILTER (WHERE source = 'ncu') AS ncu_launches,
       CAST(sum(CASE WHEN source = 'ncu' THEN duration_ns END) AS DOUBLE) AS ncu_ns,
       count(*) FILTER (WHERE source = 'timeline' AND activity = 'kernel') AS timeline_launches,
       sum(CASE WHEN source = 'ncu' THEN dram_pct * duration_ns END)
           / NULLIF(sum(CASE WHEN source = 'ncu' AND dram_pct IS NOT NULL THEN duration_ns END), 0) AS dram_pct,
       sum(CASE WHEN source = 'ncu' AND dram_pct IS NOT NULL THEN duration_ns END) AS dram_weight_ns,
       min(implementation) AS implementation
FROM (SELECT model, gpu, kernel_id, implementation, duration_ns, dram_pct, 'ncu' AS activity, 'ncu' AS source
      FROM kernels
      UNION ALL
      SELECT model, gpu, kernel_id, implementation, CAST(NULL AS DOUBLE) AS duration_ns, CAST(NULL AS DOUBLE) AS dram_pct,
             activity, 'timeline' AS source
      FROM kernel_launches) launches
GROUP BY model, gpu, kernel_id
ORDER BY model, gpu, kernel_id
