-- Each model's timeline per GPU, kernel identity and launch shape (grid, block, op shapes): launches, real GPU time, runs and latest run day over all its timeline runs on that GPU (nsys and PyTorch launches; an nsys cuda_gpu_kern_sum for a run without launch rows); the rows kernel_time gives ncu counters to.
-- Partition-local (views.PARTITION_LOCAL): a model and GPU's rows come from its own runs, so a commit
-- recomputes only the models it changed; kernel_time, which borrows counters across models, reads it.
WITH run_days AS (
    SELECT run_id, coalesce(run_date, CAST(ingested_at AS DATE)) AS run_day FROM runs
), summary_only AS (
    -- nsys stats runs without launch rows count through their kernel summary
    SELECT run_id, model, gpu, kernel_id, kernel_base, kernel_signature, library, op_class,
           grid_x, grid_y, grid_z, block_x, block_y, block_z,
           CAST(NULL AS VARCHAR) AS op_shapes, CAST(instances AS BIGINT) AS launches, CAST(total_ns AS DOUBLE) AS gpu_time_ns
    FROM kernel_summaries
    WHERE report = 'cuda_gpu_kern_sum' AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)
), timeline_launches AS (
    SELECT run_id, model, gpu, kernel_id, kernel_base, kernel_signature, library, op_class, grid_x, grid_y, grid_z,
           block_x, block_y, block_z, op_shapes, CAST(1 AS BIGINT) AS launches, CAST(duration_ns AS DOUBLE) AS gpu_time_ns
    FROM kernel_launches
    WHERE activity = 'kernel'
    UNION ALL
    SELECT run_id, model, gpu, kernel_id, kernel_base, kernel_signature, library, op_class, grid_x, grid_y, grid_z,
           block_x, block_y, block_z, op_shapes, launches, gpu_time_ns
    FROM summary_only
)
SELECT t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes,
       min(t.kernel_base) AS kernel_base, min(t.kernel_signature) AS kernel_signature, min(t.library) AS library, min(t.op_class) AS op_class,
       sum(t.launches) AS launches, sum(t.gpu_time_ns) AS gpu_time_ns, count(DISTINCT t.run_id) AS runs,
       max(d.run_day) AS latest_day
FROM timeline_launches t
LEFT JOIN run_days d ON d.run_id = t.run_id
GROUP BY t.model, t.gpu, t.kernel_id, t.grid_x, t.grid_y, t.grid_z, t.block_x, t.block_y, t.block_z, t.op_shapes
