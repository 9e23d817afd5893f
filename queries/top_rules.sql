-- Which ncu rules fire most, on how much GPU time, and what ncu estimates they would save. ncu gives two kinds
-- of estimated speedup that do not add or average together: 'global' (% of the whole kernel's duration) and
-- 'local' (% of the time of the part the rule looks at, e.g. one pipeline or stall reason). They stay apart
-- here; est_saved_us applies only the global estimates to the launches they were made for (several rows of one
-- rule on one launch, such as two CPIStall reasons, overlap: read it as an upper bound).
SELECT r.rule_name, r.rule_type, count(*) AS launches, count(DISTINCT r.model) AS models,
       round(sum(k.duration_ns) / 1e3, 1) AS gpu_time_us,
       count(*) FILTER (WHERE r.speedup_type = 'global') AS global_estimates,
       round(sum(k.duration_ns * r.speedup_pct / 100) FILTER (WHERE r.speedup_type = 'global') / 1e3, 1) AS est_saved_us,
       round(sum(k.duration_ns * r.speedup_pct) FILTER (WHERE r.speedup_type = 'global')
             / NULLIF(sum(k.duration_ns) FILTER (WHERE r.speedup_type = 'global'), 0), 1) AS global_speedup_pct_time_weighted,
       count(*) FILTER (WHERE r.speedup_type = 'local') AS local_estimates,
       round(sum(k.duration_ns * r.speedup_pct) FILTER (WHERE r.speedup_type = 'local')
             / NULLIF(sum(k.duration_ns) FILTER (WHERE r.speedup_type = 'local'), 0), 1) AS local_speedup_pct_time_weighted
FROM rules r JOIN kernels k USING (run_id, launch_id)
GROUP BY r.rule_name, r.rule_type
ORDER BY est_saved_us DESC NULLS LAST, gpu_time_us DESC, r.rule_name;
