-- Speed of Light per kernel identity and model: SM, DRAM and memory throughput, L1/L2 hit rates and compute-vs-memory balance, weighted by real GPU time (timeline where the model has one, else ncu replay: time_basis), with counters borrowed from other runs or models where this one's ncu did not profile the kernel.
-- Each average weights a launch shape by its GPU time (a 2 ms GEMM outweighs a 3 us add) over the shapes
-- that have the metric; the counters of each shape come from kernel_time (exact shape first, then the
-- kernel identity; borrowed_from_model names another model's ncu run where one was used).
-- balance_pct = sm_pct - mem_pct: positive leans compute, negative leans memory. counter_coverage_pct:
-- share of the row's GPU time with counters (a kernel ncu never profiled anywhere: 0, counters NULL).
WITH shapes AS (
    -- an identity the model's timelines never ran has no real time: its shapes weigh by ncu's durations
    SELECT kt.*, CASE WHEN counter_match = 'not in timeline' THEN ncu_ns_per_launch ELSE gpu_time_ns END AS weight_ns
    FROM kernel_time kt
), weighted AS (
    SELECT model, gpu, kernel_id, library, op_class,
           min(kernel_base) AS kernel_base,
           sum(launches) AS launches,
           sum(gpu_time_ns) AS gpu_time_ns,
           time_weighted(sm_pct, weight_ns) AS sm_pct,
           time_weighted(dram_pct, weight_ns) AS dram_pct,
           time_weighted(mem_pct, weight_ns) AS mem_pct,
           time_weighted(l1_hit_pct, weight_ns) AS l1_hit_pct,
           time_weighted(l2_hit_pct, weight_ns) AS l2_hit_pct,
           time_weighted(tensor_pipe_pct, weight_ns) AS tensor_pipe_pct,
           min(time_basis) AS time_basis,
           100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
               / NULLIF(sum(gpu_time_ns), 0) AS counter_coverage_pct,
           min(CASE WHEN counter_source = 'other model' THEN borrowed_from_model END) AS borrowed_from_model
    FROM shapes
    GROUP BY model, gpu, kernel_id, library, op_class
)
SELECT model, gpu, kernel_id, library, op_class, kernel_base, launches, gpu_time_ns,
       sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, tensor_pipe_pct,
       sm_pct - mem_pct AS balance_pct,
       CASE WHEN sm_pct IS NULL OR mem_pct IS NULL THEN NULL
            WHEN sm_pct >= mem_pct THEN 'compute' ELSE 'memory' END AS leans,
       time_basis, counter_coverage_pct, borrowed_from_model
FROM weighted
ORDER BY model, gpu, gpu_time_ns DESC, kernel_id
