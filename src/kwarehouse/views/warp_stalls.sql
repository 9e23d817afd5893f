-- Warp stall breakdown per kernel identity and per op class: every stall reason ncu reported (warp cycles per issued instruction, weighted by instructions issued), its share of all stalls, the top reason, and each reason's usual cause and fix (stall_reasons).
-- Adds up kernel_stalls (each partition's sums of the kernels table's stall_<reason> columns: the canonical
-- smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio metrics, so older ncu names
-- (smsp__warp_cycles_per_issue_stall_<reason>) count too). "selected" is the issuing warp, not
-- a stall: it is listed but left out of the shares and of top_reason.
-- A ratio per issued instruction aggregates over launches weighted by the instructions each issued
-- (smsp__inst_executed.sum): sum(ratio x instructions) / sum(instructions) is stall cycles per instruction
-- over all of them. A launch without an instruction count is weighted by its duration (weighting says so).
-- In warp-specialised kernels (occupancy.warp_specialized) barrier, gmma, long/short scoreboard and
-- math-pipe waits are producer-consumer handshakes: cause then says so (stall_reasons.in_warp_specialized).
WITH per_kernel_sums AS (
    -- kernel_stalls holds each partition's sums; a kernel's over the fleet add them up
    SELECT kernel_id, library, op_class, min(kernel_base) AS kernel_base, reason, sum(launches) AS launches,
           sum(stall_cycles_per_issue * weight) AS weighted, sum(weight) AS duration,
           bool_or(weighted_by_time) AS any_by_time, bool_or(warp_specialized) AS warp_specialized
    FROM kernel_stalls
    GROUP BY kernel_id, library, op_class, reason
), per_kernel AS (
    SELECT 'kernel' AS level, kernel_id, library, op_class, kernel_base, reason, launches,
           weighted / NULLIF(duration, 0) AS stall_cycles_per_issue, duration AS weight, any_by_time, warp_specialized
    FROM per_kernel_sums
), per_class AS (
    -- from the per-kernel sums: the same instruction weighting, without a second pass over every launch
    SELECT 'op_class' AS level, CAST(NULL AS VARCHAR) AS kernel_id, CAST(NULL AS VARCHAR) AS library, op_class,
           CAST(NULL AS VARCHAR) AS kernel_base, reason, sum(launches) AS launches,
           sum(weighted) / NULLIF(sum(duration), 0) AS stall_cycles_per_issue, sum(duration) AS weight,
           bool_or(any_by_time) AS any_by_time, false AS warp_specialized
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
SELECT b.level, b.kernel_id, b.library, b.op_class, b.kernel_base, b.reason, b.launches, b.stall_cycles_per_issue,
       CASE WHEN b.is_stall THEN 100 * b.stall_cycles_per_issue / NULLIF(b.total_stall_cycles_per_issue, 0) END AS stall_share_pct,
       b.total_stall_cycles_per_issue, b.top_reason,
       CASE WHEN b.warp_specialized AND s.in_warp_specialized <> '' THEN s.in_warp_specialized ELSE s.cause END AS cause,
       CASE WHEN b.warp_specialized AND s.in_warp_specialized <> '' THEN concat('usually nothing (', s.fix, ')') ELSE s.fix END AS fix,
       b.warp_specialized,
       CASE WHEN b.any_by_time THEN 'duration (no instruction count for some launches)' ELSE 'instructions issued' END AS weighting,
       b.weight
FROM ranked b LEFT JOIN stall_reasons s ON s.reason = b.reason
ORDER BY b.level, b.op_class, b.kernel_id, b.stall_cycles_per_issue DESC, b.reason
