-- Speed of Light per kernel identity and model: time-weighted SM, DRAM and memory throughput, L1/L2 hit rates, and compute-vs-memory balance.
-- Each average weights a launch by its duration (a 2 ms GEMM outweighs a 3 us add) over the launches
-- that have the metric. balance_pct = sm_pct - mem_pct: positive leans compute, negative leans memory.
WITH weighted AS (
    SELECT model, gpu, kernel_id, library, op_class,
           min(kernel_base) AS kernel_base,
           count(*) AS launches,
           CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           sum(sm_pct * duration_ns) / NULLIF(sum(CASE WHEN sm_pct IS NOT NULL THEN duration_ns END), 0) AS sm_pct,
           sum(dram_pct * duration_ns) / NULLIF(sum(CASE WHEN dram_pct IS NOT NULL THEN duration_ns END), 0) AS dram_pct,
           sum(mem_pct * duration_ns) / NULLIF(sum(CASE WHEN mem_pct IS NOT NULL THEN duration_ns END), 0) AS mem_pct,
           sum(l1_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l1_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l1_hit_pct,
           sum(l2_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l2_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l2_hit_pct,
           sum(tensor_pipe_pct * duration_ns)
               / NULLIF(sum(CASE WHEN tensor_pipe_pct IS NOT NULL THEN duration_ns END), 0) AS tensor_pipe_pct
    FROM kernels
    GROUP BY model, gpu, kernel_id, library, op_class
)
SELECT model, gpu, kernel_id, library, op_class, kernel_base, launches, gpu_time_ns,
       sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, tensor_pipe_pct,
       sm_pct - mem_pct AS balance_pct,
       CASE WHEN sm_pct IS NULL OR mem_pct IS NULL THEN NULL
            WHEN sm_pct >= mem_pct THEN 'compute' ELSE 'memory' END AS leans
FROM weighted
ORDER BY model, gpu, gpu_time_ns DESC, kernel_id
