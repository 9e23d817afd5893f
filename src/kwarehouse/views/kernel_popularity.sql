-- Kernel popularity across the fleet: per kernel identity and per library, launches, runs, distinct models and GPUs, total and share of real GPU time (timeline time where the model has one, else ncu replay time: time_basis), and the share of that time with ncu counters.
-- level = 'kernel' rows are one kernel identity each; level = 'library' rows add up each library.
-- Ranked by how many models use a kernel, then by GPU time. Time and launches come from kernel_time:
-- a model's timelines (nsys, PyTorch traces) when it has any on that GPU, else its ncu launches, whose
-- replayed durations read small kernels 1.6-2.5x long; time_basis says which ('timeline + ncu replay' when
-- the models of a row differ). runs counts the runs that gave the time. counter_coverage_pct: share of the
-- row's GPU time whose kernels have ncu counters (exact shape or identity, this model's or borrowed).
WITH timed AS (
    -- kernel_time read once (a CTE referenced twice is computed once; a view named twice is not)
    SELECT kernel_id, library, op_class, kernel_base, kernel_signature, model, gpu, time_basis, launches,
           gpu_time_ns, CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END AS counted_ns
    FROM kernel_time
), kernel_runs AS (
    -- kernel_run_counts: each partition's runs of a kernel or library (a run belongs to one partition)
    SELECT kernel_id, library, op_class, CAST(sum(runs) AS BIGINT) AS runs FROM kernel_run_counts
    WHERE level = 'kernel' GROUP BY kernel_id, library, op_class
), library_runs AS (
    SELECT library, CAST(sum(runs) AS BIGINT) AS runs FROM kernel_run_counts WHERE level = 'library' GROUP BY library
), fleet AS (
    SELECT sum(gpu_time_ns) AS total_ns FROM timed
), per_kernel AS (
    SELECT 'kernel' AS level, t.kernel_id, t.library, t.op_class,
           min(t.kernel_base) AS kernel_base, min(t.kernel_signature) AS kernel_signature,
           sum(t.launches) AS launches, count(DISTINCT t.model) AS models,
           count(DISTINCT t.gpu) AS gpus, sum(t.gpu_time_ns) AS gpu_time_ns, sum(t.counted_ns) AS counted_ns,
           count(DISTINCT t.time_basis) AS bases, min(t.time_basis) AS any_basis
    FROM timed t
    GROUP BY t.kernel_id, t.library, t.op_class
), per_library AS (
    SELECT 'library' AS level, CAST(NULL AS VARCHAR) AS kernel_id, library, CAST(NULL AS VARCHAR) AS op_class,
           CAST(NULL AS VARCHAR) AS kernel_base, CAST(NULL AS VARCHAR) AS kernel_signature,
           sum(launches) AS launches, count(DISTINCT model) AS models,
           count(DISTINCT gpu) AS gpus, sum(gpu_time_ns) AS gpu_time_ns, sum(counted_ns) AS counted_ns,
           count(DISTINCT time_basis) AS bases, min(time_basis) AS any_basis
    FROM timed
    GROUP BY library
), both_levels AS (
    SELECT k.level, k.kernel_id, k.library, k.op_class, k.kernel_base, k.kernel_signature, k.launches,
           coalesce(r.runs, 0) AS runs, k.models, k.gpus, k.gpu_time_ns, k.counted_ns, k.bases, k.any_basis
    FROM per_kernel k
    LEFT JOIN kernel_runs r ON r.kernel_id = k.kernel_id AND r.library = k.library AND r.op_class = k.op_class
    UNION ALL
    SELECT l.level, l.kernel_id, l.library, l.op_class, l.kernel_base, l.kernel_signature, l.launches,
           coalesce(r.runs, 0) AS runs, l.models, l.gpus, l.gpu_time_ns, l.counted_ns, l.bases, l.any_basis
    FROM per_library l
    LEFT JOIN library_runs r ON r.library = l.library
)
SELECT level, kernel_id, library, op_class, kernel_base, kernel_signature, launches, runs, models, gpus,
       gpu_time_ns, 100 * gpu_time_ns / NULLIF(fleet.total_ns, 0) AS gpu_time_pct,
       rank() OVER (PARTITION BY level ORDER BY models DESC, gpu_time_ns DESC) AS popularity_rank,
       CASE WHEN bases > 1 THEN 'timeline + ncu replay' ELSE any_basis END AS time_basis,
       100 * counted_ns / NULLIF(gpu_time_ns, 0) AS counter_coverage_pct
FROM both_levels CROSS JOIN fleet
ORDER BY level DESC, popularity_rank, kernel_id
