-- Per op class, each warp stall reason's share of all stall cycles, weighted by ncu duration over the selected launches (the kernels table's stall_<reason> columns, unpivoted; a launch without a reason's counter does not weigh on it).
WITH stalls AS (
    UNPIVOT (SELECT op_class, duration_ns, COLUMNS('^stall_') FROM kernels WHERE {selected_runs})
    ON COLUMNS('^stall_') INTO NAME reason VALUE stall
), per_reason AS (
    SELECT op_class, substr(reason, 7) AS reason, sum(stall * duration_ns) / nullif(sum(duration_ns), 0) AS cycles
    FROM stalls
    WHERE reason <> 'stall_selected'
    GROUP BY op_class, reason
)
SELECT op_class, reason, 100 * cycles / sum(cycles) OVER (PARTITION BY op_class) AS pct
FROM per_reason
WHERE cycles > 0
ORDER BY op_class, pct DESC
