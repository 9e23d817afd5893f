-- One GPU's roofline dots: per kernel identity, its FLOPs per DRAM (and L2) byte, executed FLOP/s, the roof that limits its longest launch and the share of it reached, its real GPU time (kernel_time: timeline time, ncu replay time for models without a timeline; NULL where no kernel_time row has it) and its padding factor (executed / useful tensor FLOPs over the launches that have both, as the roofline view defines it).
WITH real_time AS (
    SELECT kernel_id, sum(gpu_time_ns) AS gpu_time_ns,
           CASE WHEN count(DISTINCT time_basis) > 1 THEN 'timeline + ncu replay' ELSE min(time_basis) END AS time_basis
    FROM kernel_time
    WHERE gpu = $gpu_name AND {selected_models}
    GROUP BY kernel_id
)
SELECT r.kernel_id, min(r.kernel_base) AS kernel_base, min(r.library) AS library,
       sum(r.flops) / nullif(sum(r.dram_bytes), 0) AS flops_per_dram_byte,
       sum(r.flops) / nullif(sum(r.duration_ns) * 1e-9, 0) AS executed_flops_per_s,
       sum(r.duration_ns) AS ncu_time_ns, arg_max(r.roof, r.duration_ns) AS roof, arg_max(r.limiter, r.duration_ns) AS limiter,
       sum(r.pct_of_roof * r.duration_ns) / nullif(sum(r.duration_ns), 0) AS pct_of_roof,
       sum(r.flops) / nullif(sum(r.l2_bytes), 0) AS flops_per_l2_byte,
       min(t.gpu_time_ns) AS real_time_ns, min(t.time_basis) AS time_basis,
       sum(r.tensor_flops) FILTER (WHERE r.useful_flops > 0)
           / nullif(sum(r.useful_flops) FILTER (WHERE r.tensor_flops IS NOT NULL), 0) AS padding_factor
FROM roofline r
LEFT JOIN real_time t ON t.kernel_id = r.kernel_id
WHERE r.level = 'launch' AND r.gpu = $gpu_name AND r.limiter IS NOT NULL AND {selected_runs}
GROUP BY r.kernel_id
