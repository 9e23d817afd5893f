-- Bottleneck class of each launch: compute-bound, memory-bound, cache-inefficient, latency-bound, launch-overhead or mixed, with the metric values that decided it.
-- Rules, first match wins, cut-offs from the bottleneck_thresholds table:
--   duration < tiny_kernel_ns                                  -> launch-overhead
--   sm >= compute_pct and memory >= memory_pct                  -> mixed (both units near their peak)
--   sm >= compute_pct                                           -> compute-bound
--   memory >= memory_pct and L2 hit < l2_hit_pct                -> cache-inefficient
--   memory >= memory_pct                                        -> memory-bound
--   issue slots idle (100 - issue active %) >= stall_pct        -> latency-bound (latency/occupancy: neither unit busy, warps stalled)
--   otherwise                                                   -> mixed
-- memory = the larger of DRAM % and memory % (L1/L2/DRAM SOL).
WITH t AS (
    SELECT max(CASE WHEN name = 'compute_pct' THEN value END) AS compute_pct,
           max(CASE WHEN name = 'memory_pct' THEN value END) AS memory_pct,
           max(CASE WHEN name = 'stall_pct' THEN value END) AS stall_pct,
           max(CASE WHEN name = 'l2_hit_pct' THEN value END) AS l2_hit_pct,
           max(CASE WHEN name = 'tiny_kernel_ns' THEN value END) AS tiny_kernel_ns
    FROM bottleneck_thresholds
), measured AS (
    SELECT run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base, duration_ns,
           sm_pct, dram_pct, mem_pct, l2_hit_pct, achieved_occupancy_pct, issue_active_pct,
           greatest(coalesce(dram_pct, mem_pct), coalesce(mem_pct, dram_pct)) AS memory_pct,
           100 - issue_active_pct AS issue_idle_pct
    FROM kernels
), classified AS (
    SELECT m.*,
           CASE WHEN m.duration_ns < t.tiny_kernel_ns THEN 'launch-overhead'
                WHEN m.sm_pct >= t.compute_pct AND m.memory_pct >= t.memory_pct THEN 'mixed'
                WHEN m.sm_pct >= t.compute_pct THEN 'compute-bound'
                WHEN m.memory_pct >= t.memory_pct AND m.l2_hit_pct < t.l2_hit_pct THEN 'cache-inefficient'
                WHEN m.memory_pct >= t.memory_pct THEN 'memory-bound'
                WHEN m.issue_idle_pct >= t.stall_pct THEN 'latency-bound'
                ELSE 'mixed' END AS bottleneck,
           CASE WHEN m.duration_ns < t.tiny_kernel_ns
                    THEN concat('duration_ns ', CAST(m.duration_ns AS VARCHAR), ' < ', CAST(t.tiny_kernel_ns AS VARCHAR))
                WHEN m.sm_pct >= t.compute_pct AND m.memory_pct >= t.memory_pct
                    THEN concat('sm_pct ', CAST(round(m.sm_pct, 1) AS VARCHAR), ' and memory_pct ',
                                CAST(round(m.memory_pct, 1) AS VARCHAR), ' both >= thresholds')
                WHEN m.sm_pct >= t.compute_pct
                    THEN concat('sm_pct ', CAST(round(m.sm_pct, 1) AS VARCHAR), ' >= ', CAST(t.compute_pct AS VARCHAR))
                WHEN m.memory_pct >= t.memory_pct AND m.l2_hit_pct < t.l2_hit_pct
                    THEN concat('memory_pct ', CAST(round(m.memory_pct, 1) AS VARCHAR), ' >= ', CAST(t.memory_pct AS VARCHAR),
                                ', l2_hit_pct ', CAST(round(m.l2_hit_pct, 1) AS VARCHAR), ' < ', CAST(t.l2_hit_pct AS VARCHAR))
                WHEN m.memory_pct >= t.memory_pct
                    THEN concat('memory_pct ', CAST(round(m.memory_pct, 1) AS VARCHAR), ' >= ', CAST(t.memory_pct AS VARCHAR))
                WHEN m.issue_idle_pct >= t.stall_pct
                    THEN concat('sm_pct ', CAST(round(m.sm_pct, 1) AS VARCHAR), ', memory_pct ',
                                CAST(round(m.memory_pct, 1) AS VARCHAR), ' low; issue_idle_pct ',
                                CAST(round(m.issue_idle_pct, 1) AS VARCHAR), ' >= ', CAST(t.stall_pct AS VARCHAR))
                ELSE 'no rule matched (metrics missing or all moderate)' END AS decided_by
    FROM measured m CROSS JOIN t
)
SELECT run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base, bottleneck, decided_by,
       duration_ns, sm_pct, dram_pct, mem_pct, memory_pct, l2_hit_pct, issue_idle_pct, achieved_occupancy_pct
FROM classified
ORDER BY model, gpu, run_id, launch_id
