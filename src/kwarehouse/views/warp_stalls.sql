-- Warp stall breakdown per kernel identity and per op class: every stall reason ncu reported (warp cycles per issued instruction, time-weighted), its share of all stalls, and the top reason.
-- Reads the canonical smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio metrics, so older
-- ncu names (smsp__warp_cycles_per_issue_stall_<reason>) count too. "selected" is the issuing warp, not
-- a stall: it is listed but left out of the shares and of top_reason.
WITH stalls AS (
    SELECT k.kernel_id, k.library, k.op_class, k.kernel_base, k.duration_ns,
           regexp_extract(m.metric, '^smsp__average_warps_issue_stalled_(.+)_per_issue_active[.]ratio$', 1) AS reason,
           m.value
    FROM metrics m
    JOIN kernels k ON k.run_id = m.run_id AND k.launch_id = m.launch_id AND k.model = m.model AND k.gpu = m.gpu
    -- The range repeats the LIKE's prefix in a form Parquet row-group statistics can use: metrics files
    -- are sorted by metric name, so this reads the stall rows and skips the rest ('`' follows '_').
    WHERE m.metric >= 'smsp__average_warps_issue_stalled_' AND m.metric < 'smsp__average_warps_issue_stalled`'
      AND m.metric LIKE 'smsp__average_warps_issue_stalled_%_per_issue_active.ratio' AND m.value IS NOT NULL
), per_kernel AS (
    SELECT 'kernel' AS level, kernel_id, library, op_class, min(kernel_base) AS kernel_base, reason,
           count(*) AS launches,
           sum(value * duration_ns) / NULLIF(sum(duration_ns), 0) AS stall_cycles_per_issue
    FROM stalls
    GROUP BY kernel_id, library, op_class, reason
), per_class AS (
    SELECT 'op_class' AS level, CAST(NULL AS VARCHAR) AS kernel_id, CAST(NULL AS VARCHAR) AS library, op_class,
           CAST(NULL AS VARCHAR) AS kernel_base, reason, count(*) AS launches,
           sum(value * duration_ns) / NULLIF(sum(duration_ns), 0) AS stall_cycles_per_issue
    FROM stalls
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
