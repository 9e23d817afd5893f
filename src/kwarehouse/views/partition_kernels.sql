-- Kernel identities per model and GPU: how many ncu launches ran each and their ncu replay time, and the implementation its ncu or timeline launches name (the lowest where they differ); fleet-wide views take per-partition counts and totals here instead of reading every launch.
-- ncu_launches is 0 and ncu_ns NULL for a kernel that only a timeline of the partition ran.
SELECT model, gpu, kernel_id,
       count(*) FILTER (WHERE source = 'ncu') AS ncu_launches,
       CAST(sum(CASE WHEN source = 'ncu' THEN duration_ns END) AS DOUBLE) AS ncu_ns,
       min(implementation) AS implementation
FROM (SELECT model, gpu, kernel_id, implementation, duration_ns, 'ncu' AS source FROM kernels
      UNION ALL
      SELECT model, gpu, kernel_id, implementation, CAST(NULL AS DOUBLE) AS duration_ns, 'timeline' AS source
      FROM kernel_launches) launches
GROUP BY model, gpu, kernel_id
ORDER BY model, gpu, kernel_id
