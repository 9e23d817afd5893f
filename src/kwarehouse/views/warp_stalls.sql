-- Warp stall breakdown per kernel identity and per op class: every stall reason ncu reported (warp cycles per issued instruction, time-weighted), its share of all stalls, and the top reason.
-- Reads the kernels table's stall_<reason> columns: the canonical
-- smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio metrics, so older ncu names
-- (smsp__warp_cycles_per_issue_stall_<reason>) count too. "selected" is the issuing warp, not
-- a stall: it is listed but left out of the shares and of top_reason.
WITH stalls AS (
    -- one row per launch and reason, from the kernels table's stall_<reason> columns
    SELECT k.kernel_id, k.library, k.op_class, k.kernel_base, k.duration_ns, r.reason,
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
    FROM kernels k CROSS JOIN (VALUES
        ('barrier'), ('branch_resolving'), ('dispatch_stall'), ('drain'), ('gmma'), ('imc_miss'),
        ('lg_throttle'), ('long_scoreboard'), ('math_pipe_throttle'), ('membar'), ('mio_throttle'), ('misc'),
        ('no_instruction'), ('not_selected'), ('selected'), ('short_scoreboard'), ('sleeping'), ('tex_throttle'),
        ('wait')
    ) AS r (reason)
), per_kernel_sums AS (
    SELECT kernel_id, library, op_class, min(kernel_base) AS kernel_base, reason, count(*) AS launches,
           sum(value * duration_ns) AS weighted, sum(duration_ns) AS duration
    FROM stalls
    WHERE value IS NOT NULL
    GROUP BY kernel_id, library, op_class, reason
), per_kernel AS (
    SELECT 'kernel' AS level, kernel_id, library, op_class, kernel_base, reason, launches,
           weighted / NULLIF(duration, 0) AS stall_cycles_per_issue
    FROM per_kernel_sums
), per_class AS (
    -- from the per-kernel sums: the same time weighting, without a second pass over every launch
    SELECT 'op_class' AS level, CAST(NULL AS VARCHAR) AS kernel_id, CAST(NULL AS VARCHAR) AS library, op_class,
           CAST(NULL AS VARCHAR) AS kernel_base, reason, sum(launches) AS launches,
           sum(weighted) / NULLIF(sum(duration), 0) AS stall_cycles_per_issue
    FROM per_kernel_sums
    GROUP BY op_class, reason
), both_levels AS (
    SELECT * FROM per_kernel
    UNION ALL
    SELECT * FROM per_class
), ranked AS (
    SELECT *, reason <> 'selected' AS is_stall,
           first_value(reason) OVER (
               PARTITION BY level, kernel_id, library, op_class
               ORDER BY CASE WHEN reason <> 'selected' THEN 0 ELSE 1 END, stall_cycles_per_issue DESC, reason
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS top_reason,
           sum(CASE WHEN reason <> 'selected' THEN stall_cycles_per_issue END) OVER (
               PARTITION BY level, kernel_id, library, op_class) AS total_stall_cycles_per_issue
    FROM both_levels
)
SELECT level, kernel_id, library, op_class, kernel_base, reason, launches, stall_cycles_per_issue,
       CASE WHEN is_stall THEN 100 * stall_cycles_per_issue / NULLIF(total_stall_cycles_per_issue, 0) END AS stall_share_pct,
       total_stall_cycles_per_issue, top_reason
FROM ranked
ORDER BY level, op_class, kernel_id, stall_cycles_per_issue DESC, reason
