-- Launches that keep DRAM busy (>= 60 % of peak) while hitting L2 less than 60 % of the time.
SELECT model, kernel_name, launch_id, round(duration_ns / 1e3, 2) AS duration_us,
       round(dram_pct, 1) AS dram_pct, round(l2_hit_pct, 1) AS l2_hit_pct,
       round(dram_bytes / 1e6, 2) AS dram_mb
FROM kernels
WHERE dram_pct >= 60 AND l2_hit_pct < 60
ORDER BY duration_ns DESC;
