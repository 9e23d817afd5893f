-- Why do warps wait? The top three stall reasons of each op class, time-weighted, with their share of all stalls.
SELECT op_class, reason, round(stall_cycles_per_issue, 2) AS cycles_per_issue, round(stall_share_pct, 1) AS share_pct
FROM (SELECT *, row_number() OVER (PARTITION BY op_class ORDER BY stall_cycles_per_issue DESC) AS place
      FROM warp_stalls WHERE level = 'op_class' AND reason <> 'selected') ranked
WHERE place <= 3
ORDER BY op_class, place
