-- Shape FLOPs for ncu launches that have no NVTX op shapes, taken from the model's timeline: per (model, gpu, kernel_id, grid_size, block_size), the FLOPs per launch, op, M/N/K/batch and math dtype of the timeline's launches, each where they all agree (min = max), with provenance (timeline_runs, run_id, timeline_launches, flops_source 'op shapes (timeline)').
-- Why: an ncu run without --nvtx (compiled_mlp, torch.compile) knows its GEMM only by kernel name and
-- launch shape; the PyTorch trace of the same model records the op's input shapes for the same kernel.
-- A value is kept only where every timeline launch of that kernel and shape agrees on it: flops NULL
-- when any launch of the key lacks them or two differ (a kernel of one grid can run several K), a dim
-- NULL where the shapes differ while the FLOPs agree (compiled_mlp's up and down projections:
-- 4096x8192x2048 and 4096x2048x8192 run the same nvjet kernel with the same grid). Same model only:
-- another model's timeline may run the same kernel and grid on shapes this one never had.
-- Join: kernels k LEFT JOIN timeline_shape_flops s USING (model, gpu, kernel_id, grid_size, block_size),
-- then coalesce(k.flops of 'ncu tensor counters' / 'op shapes', s.flops).
SELECT
    model,
    gpu,
    kernel_id,
    grid_size,
    block_size,
    CASE WHEN count(flops) = count(*) AND min(flops) = max(flops) THEN min(flops) END AS flops,
    CASE WHEN count(flops) = count(*) AND min(flops) = max(flops) THEN 'op shapes (timeline)' END AS flops_source,
    CASE WHEN count(framework_op) = count(*) AND min(framework_op) = max(framework_op) THEN min(framework_op) END AS framework_op,
    CASE WHEN count(gemm_m) = count(*) AND min(gemm_m) = max(gemm_m) THEN min(gemm_m) END AS gemm_m,
    CASE WHEN count(gemm_n) = count(*) AND min(gemm_n) = max(gemm_n) THEN min(gemm_n) END AS gemm_n,
    CASE WHEN count(gemm_k) = count(*) AND min(gemm_k) = max(gemm_k) THEN min(gemm_k) END AS gemm_k,
    CASE WHEN count(gemm_batch) = count(*) AND min(gemm_batch) = max(gemm_batch) THEN min(gemm_batch) END AS gemm_batch,
    CASE WHEN min(math_dtype) = max(math_dtype) THEN min(math_dtype) END AS math_dtype,
    count(*) AS timeline_launches,
    count(DISTINCT run_id) AS timeline_runs,
    min(run_id) AS run_id,   -- a source run (the smallest id of timeline_runs)
    min(flops) AS min_flops,
    max(flops) AS max_flops
FROM kernel_launches
WHERE activity = 'kernel'
GROUP BY model, gpu, kernel_id, grid_size, block_size
HAVING count(flops) > 0
