-- Coverage of ncu data per model and GPU: how many timeline launches and how much timeline GPU time (nsys, PyTorch traces) belong to kernel identities that ncu profiled, and the biggest kernel it missed.
-- ncu usually profiles a subset (launch limits, filters). covered_* count the timeline launches whose
-- kernel_id appears among the model's ncu kernels; ncu_launches_per_timeline_run compares raw counts.
-- Timelines are kernel_launches (activity 'kernel'); runs with only an nsys kernel summary count through
-- kernel_summaries (cuda_gpu_kern_sum). A model without any timeline has NULL coverage.
-- covered_* ask "did this model's ncu profile it"; counter_coverage_pct asks "does its real time have
-- counters at all", counting those borrowed from other models' ncu runs on the same GPU (kernel_time):
-- borrowed_gpu_time_pct of them, exact_shape_gpu_time_pct matched by grid, block and op shapes.
-- time_basis: 'timeline', or 'ncu replay' for a model whose only time is ncu's replayed durations.
-- The per-model counts come from profiled_coverage (kept per partition); the counters from kernel_time.
WITH counters AS (
    SELECT model, gpu, min(time_basis) AS time_basis,
           100.0 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
               / NULLIF(sum(gpu_time_ns), 0) AS counter_coverage_pct,
           100.0 * sum(CASE WHEN counter_source = 'other model' THEN gpu_time_ns ELSE 0 END)
               / NULLIF(sum(gpu_time_ns), 0) AS borrowed_gpu_time_pct,
           100.0 * sum(CASE WHEN counter_match IN ('exact shape', 'replayed launches') THEN gpu_time_ns ELSE 0 END)
               / NULLIF(sum(gpu_time_ns), 0) AS exact_shape_gpu_time_pct
    FROM kernel_time
    GROUP BY model, gpu
)
SELECT p.model, p.gpu, p.ncu_runs, p.ncu_launches, p.ncu_kernel_ids, p.timeline_runs, p.timeline_launches,
       p.timeline_gpu_time_ns, p.ncu_launches_per_timeline_run_pct, p.covered_launches_pct, p.covered_gpu_time_pct,
       p.top_missed_kernel, p.top_missed_gpu_time_pct,
       c.time_basis, c.counter_coverage_pct, c.borrowed_gpu_time_pct, c.exact_shape_gpu_time_pct
FROM profiled_coverage p
LEFT JOIN counters c ON c.model = p.model AND c.gpu = p.gpu
ORDER BY p.model, p.gpu
