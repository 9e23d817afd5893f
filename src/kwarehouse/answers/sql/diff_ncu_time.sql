-- kwh diff, a side of ncu runs (list ?): each kernel identity's ncu GPU time per run; NULL where the export had no durations (an ncu --metrics list).
SELECT kernel_id, run_id, CAST(sum(duration_ns) AS DOUBLE) FROM kernels
WHERE list_contains(?, run_id) GROUP BY ALL
