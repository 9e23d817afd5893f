-- Which ncu rules fire most, and the GPU time of the launches they fire on.
SELECT r.rule_name, r.rule_type, count(*) AS launches, count(DISTINCT r.model) AS models,
       round(sum(k.duration_ns) / 1e3, 1) AS gpu_time_us, round(avg(r.speedup_pct), 1) AS mean_speedup_pct
FROM rules r JOIN kernels k USING (run_id, launch_id)
GROUP BY ALL
ORDER BY gpu_time_us DESC;
