-- Warp stalls per model, GPU, kernel identity and stall reason: the ncu launches with that reason, their stall cycles per issued instruction (weighted by instructions issued, else duration) and that weight: the warp stall breakdown of each partition, which the fleet-wide one adds up.
-- Reads the kernels table's stall_<reason> columns (the canonical
-- smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio metrics), each launch weighted by
-- smsp__inst_executed.sum, or by its duration where ncu gave no instruction count (weighted_by_time).
-- warp_specialized: some launch of the kernel is warp-specialised (occupancy.warp_specialized).
-- Its rows for one model and GPU depend on that partition's launches alone, so a commit recomputes
-- only the partitions it changed, and the fleet-wide breakdown sums these rows instead of every launch.
WITH instructions AS (
    SELECT run_id, launch_id, max(value) AS inst_executed
    FROM metrics WHERE metric = 'smsp__inst_executed.sum'
    GROUP BY run_id, launch_id
), launches AS (
    SELECT k.*, o.warp_specialized,
           coalesce(i.inst_executed, CAST(k.duration_ns AS DOUBLE)) AS weight,
           i.inst_executed IS NULL AS weighted_by_time
    FROM kernels k
    LEFT JOIN instructions i ON i.run_id = k.run_id AND i.launch_id = k.launch_id
    LEFT JOIN occupancy o ON o.run_id = k.run_id AND o.launch_id = k.launch_id
), stalls AS (
    -- one row per launch and reason, from the kernels table's stall_<reason> columns
    SELECT k.model, k.gpu, k.kernel_id, k.library, k.op_class, k.kernel_base, k.weight, k.weighted_by_time,
           k.warp_specialized, r.reason,
           CASE r.reason
                WHEN 'barrier' THEN k.stall_barrier
                WHEN 'branch_resolving' THEN k.stall_branch_resolving
                WHEN 'dispatch_stall' THEN k.stall_dispatch_stall
                WHEN 'drain' THEN k.stall_drain
                WHEN 'gmma' THEN k.stall_gmma
                WHEN 'imc_miss' THEN k.stall_imc_miss
                WHEN 'lg_throttle' THEN k.stall_lg_throttle
                WHEN 'long_scoreboard' THEN k.stall_long_scoreboard
                WHEN 'math_pipe_throttle' THEN k.stall_math_pipe_throttle
                WHEN 'membar' THEN k.stall_membar
                WHEN 'mio_throttle' THEN k.stall_mio_throttle
                WHEN 'misc' THEN k.stall_misc
                WHEN 'no_instruction' THEN k.stall_no_instruction
                WHEN 'not_selected' THEN k.stall_not_selected
                WHEN 'selected' THEN k.stall_selected
                WHEN 'short_scoreboard' THEN k.stall_short_scoreboard
                WHEN 'sleeping' THEN k.stall_sleeping
                WHEN 'tex_throttle' THEN k.stall_tex_throttle
                WHEN 'wait' THEN k.stall_wait
           END AS value
    FROM launches k CROSS JOIN (VALUES
        ('barrier'), ('branch_resolving'), ('dispatch_stall'), ('drain'), ('gmma'), ('imc_miss'),
        ('lg_throttle'), ('long_scoreboard'), ('math_pipe_throttle'), ('membar'), ('mio_throttle'), ('misc'),
        ('no_instruction'), ('not_selected'), ('selected'), ('short_scoreboard'), ('sleeping'), ('tex_throttle'),
        ('wait')
    ) AS r (reason)
)
SELECT model, gpu, kernel_id, library, op_class, min(kernel_base) AS kernel_base, reason, count(*) AS launches,
       sum(value * weight) / NULLIF(sum(weight), 0) AS stall_cycles_per_issue, sum(weight) AS weight,
       bool_or(weighted_by_time) AS weighted_by_time, bool_or(coalesce(warp_specialized, false)) AS warp_specialized
FROM stalls
WHERE value IS NOT NULL
GROUP BY model, gpu, kernel_id, library, op_class, reason
ORDER BY model, gpu, kernel_id, reason
