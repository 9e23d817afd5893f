-- Per model and GPU, from its own runs: how many timeline launches and how much timeline GPU time belong to kernel identities this model's ncu profiled, and the biggest kernel it missed; coverage adds whether the time has counters at all (kernel_time, borrowing across models).
-- Partition-local (views.PARTITION_LOCAL): coverage's columns but the counters, kept per partition at commit.
WITH timeline AS (
    SELECT model, gpu, run_id, kernel_id, min(kernel_base) AS kernel_base, count(*) AS launches,
           CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns
    FROM kernel_launches
    WHERE activity = 'kernel'
    GROUP BY model, gpu, run_id, kernel_id
    UNION ALL
    SELECT model, gpu, run_id, kernel_id, min(kernel_base) AS kernel_base, CAST(sum(instances) AS BIGINT) AS launches,
           sum(total_ns) AS gpu_time_ns
    FROM kernel_summaries
    WHERE report = 'cuda_gpu_kern_sum' AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)
    GROUP BY model, gpu, run_id, kernel_id
), profiled AS (
    SELECT model, gpu, kernel_id, count(*) AS launches, count(DISTINCT run_id) AS runs
    FROM kernels
    GROUP BY model, gpu, kernel_id
), marked AS (
    SELECT t.*, p.kernel_id IS NOT NULL AS covered
    FROM timeline t
    LEFT JOIN profiled p ON p.model = t.model AND p.gpu = t.gpu AND p.kernel_id = t.kernel_id
), missed AS (
    SELECT model, gpu, kernel_base, sum(gpu_time_ns) AS gpu_time_ns,
           row_number() OVER (PARTITION BY model, gpu ORDER BY sum(gpu_time_ns) DESC, kernel_base) AS place
    FROM marked
    WHERE NOT covered
    GROUP BY model, gpu, kernel_base
), per_model AS (
    SELECT model, gpu, count(DISTINCT run_id) AS timeline_runs, sum(launches) AS timeline_launches,
           sum(gpu_time_ns) AS timeline_gpu_time_ns,
           sum(CASE WHEN covered THEN launches ELSE 0 END) AS covered_launches,
           sum(CASE WHEN covered THEN gpu_time_ns ELSE 0 END) AS covered_gpu_time_ns
    FROM marked
    GROUP BY model, gpu
), ncu AS (
    SELECT model, gpu, count(DISTINCT run_id) AS ncu_runs, count(*) AS ncu_launches,
           count(DISTINCT kernel_id) AS ncu_kernel_ids
    FROM kernels
    GROUP BY model, gpu
), models AS (
    SELECT model, gpu FROM per_model UNION SELECT model, gpu FROM ncu

)
SELECT m.model, m.gpu, coalesce(n.ncu_runs, 0) AS ncu_runs, coalesce(n.ncu_launches, 0) AS ncu_launches,
       coalesce(n.ncu_kernel_ids, 0) AS ncu_kernel_ids, coalesce(t.timeline_runs, 0) AS timeline_runs,
       t.timeline_launches, t.timeline_gpu_time_ns,
       100.0 * coalesce(n.ncu_launches, 0) / NULLIF(t.timeline_launches * 1.0 / t.timeline_runs, 0)
           AS ncu_launches_per_timeline_run_pct,
       100.0 * t.covered_launches / NULLIF(t.timeline_launches, 0) AS covered_launches_pct,
       100.0 * t.covered_gpu_time_ns / NULLIF(t.timeline_gpu_time_ns, 0) AS covered_gpu_time_pct,
       x.kernel_base AS top_missed_kernel,
       100.0 * x.gpu_time_ns / NULLIF(t.timeline_gpu_time_ns, 0) AS top_missed_gpu_time_pct
FROM models m
LEFT JOIN per_model t ON t.model = m.model AND t.gpu = m.gpu
LEFT JOIN ncu n ON n.model = m.model AND n.gpu = m.gpu
LEFT JOIN missed x ON x.model = m.model AND x.gpu = m.gpu AND x.place = 1
ORDER BY m.model, m.gpu
