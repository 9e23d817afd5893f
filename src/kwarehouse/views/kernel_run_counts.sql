-- Runs per model, GPU and kernel identity (level 'kernel') and per model, GPU and library (level 'library'): how many of the partition's runs gave the time of that kernel or library (its timeline runs, or its ncu runs where the model has no timeline on that GPU). A run belongs to one partition, so a kernel's runs over the fleet are the sum of these rows.
-- The same runs as the fleet-wide kernel ranking counts: timeline kernel launches; nsys cuda_gpu_kern_sum
-- rows of runs without per-launch rows; ncu launches of a model and GPU without either.
WITH timeline_runs AS (
    SELECT DISTINCT run_id, model, gpu, kernel_id, library, op_class FROM kernel_launches WHERE activity = 'kernel'
    UNION
    SELECT DISTINCT run_id, model, gpu, kernel_id, library, op_class FROM kernel_summaries
    WHERE report = 'cuda_gpu_kern_sum' AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)
), timeline_models AS (
    -- a model has a timeline on the GPU where either gave it time (as the real-GPU-time view's time_basis)
    SELECT DISTINCT model, gpu FROM timeline_runs
), basis_runs AS (
    SELECT run_id, model, gpu, kernel_id, library, op_class FROM timeline_runs
    UNION
    SELECT DISTINCT k.run_id, k.model, k.gpu, k.kernel_id, k.library, k.op_class
    FROM kernels k LEFT JOIN timeline_models tm ON tm.model = k.model AND tm.gpu = k.gpu
    WHERE tm.model IS NULL
)
SELECT 'kernel' AS level, model, gpu, kernel_id, library, op_class, count(DISTINCT run_id) AS runs
FROM basis_runs
GROUP BY model, gpu, kernel_id, library, op_class
UNION ALL
SELECT 'library' AS level, model, gpu, CAST(NULL AS VARCHAR) AS kernel_id, library, CAST(NULL AS VARCHAR) AS op_class,
       count(DISTINCT run_id) AS runs
FROM basis_runs
GROUP BY model, gpu, library
ORDER BY model, gpu, level, kernel_id, library
