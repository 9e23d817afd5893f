-- Per model and GPU in the selection: which sources it has (ncu, nsys, PyTorch trace runs), its runs that hold no kernel, its ncu launches without a duration, and its timeline kernel time without ncu counters: what the report's answers for it lack.
WITH selected AS (
    SELECT * FROM runs WHERE {selected_runs}
), kernel_runs AS (
    SELECT run_id, count(*) AS launches, count(duration_ns) AS timed FROM kernels GROUP BY run_id
), timeline_runs AS (
    SELECT run_id, count(*) AS launches FROM kernel_launches WHERE activity = 'kernel' GROUP BY run_id
), per_run AS (
    SELECT s.model, s.gpu, s.tool, s.run_id, coalesce(k.launches, 0) AS ncu_launches,
           coalesce(k.launches, 0) - coalesce(k.timed, 0) AS untimed_launches,
           coalesce(t.launches, 0) AS timeline_launches, s.kernel_count
    FROM selected s LEFT JOIN kernel_runs k USING (run_id) LEFT JOIN timeline_runs t USING (run_id)
), coverage AS (
    SELECT model, gpu, sum(gpu_time_ns) FILTER (WHERE counter_match = 'not profiled') AS unprofiled_ns,
           sum(gpu_time_ns) AS gpu_time_ns
    FROM kernel_time GROUP BY model, gpu
)
SELECT p.model, p.gpu,
       string_agg(DISTINCT p.tool, ', ' ORDER BY p.tool) AS tools,
       count(*) FILTER (WHERE p.tool = 'ncu') AS ncu_runs,
       count(*) FILTER (WHERE p.tool <> 'ncu') AS timeline_runs,
       count(*) FILTER (WHERE coalesce(p.kernel_count, 0) = 0 AND p.ncu_launches = 0 AND p.timeline_launches = 0) AS empty_runs,
       sum(p.untimed_launches) AS untimed_launches,
       round(100 * coalesce(any_value(c.unprofiled_ns), 0) / nullif(any_value(c.gpu_time_ns), 0), 1) AS unprofiled_pct
FROM per_run p LEFT JOIN coverage c ON c.model = p.model AND c.gpu IS NOT DISTINCT FROM p.gpu
GROUP BY p.model, p.gpu
ORDER BY p.model, p.gpu
