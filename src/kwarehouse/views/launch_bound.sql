-- Launch-bound stretches of timeline runs: per run, GPU and the NVTX range or framework op around the kernels, where the GPU sat idle longer between them than it ran them (CUDA Graph / torch.compile candidates), with the idle time at stake.
-- From kernel_launches (nsys, PyTorch traces), each device's activities in start order (all streams):
-- a launch's idle gap is the time since the device last had anything running (0 when it was still busy).
-- subject: the innermost user NVTX range (nvtx_range: a module, a torch.compile region, a user
-- annotation), else the outermost framework op of the launch's CPU stack (aten::layer_norm), else the
-- kernel itself; one row per run, device and subject, over all its stretches (consecutive launches under
-- it), kept when idle_ns > gpu_time_ns. subject '(whole run)' adds up the device's run.
-- est_time_saved_ns: the idle time above the device's smallest gap in that run (the spacing the GPU keeps
-- when launches are queued ahead of it), which replaying the stretch as one CUDA Graph or fusing it could
-- remove. An estimate and an upper bound: the profiler's own overhead widens every gap.
-- The evidence gives the median GPU launch-to-launch interval and, where the run's manifest records it (tag
-- cpu_launch_interval_ns: kwh profile reads it from its discovery trace's cudaLaunchKernel/cuLaunchKernel calls;
-- kernel_launches keeps no CPU call times), the median interval between the CPU's launch calls.
-- Microseconds in the evidence are whole nanoseconds rounded half up (round(ns / 100) / 10): round(ns / 1000, 1)
-- of 205,950 ns gave 206.0 or 205.9 depending on the engine (DuckDB 2 rounds the binary double 205.9499...).
WITH unprofiled AS (
    -- the un-profiled timing of the same command where the run's manifest records one (tags
    -- unprofiled_seconds: wall time of unprofiled_iterations iterations without a profiler), scaled to the
    -- traced iterations (profiled_iterations, else the same count). kwh profile writes them from its timing run
    -- (the command's cudaProfilerStart/Stop region, run once more with no profiler; tag unprofiled_timed says
    -- what was timed); any manifest may carry them.
    SELECT run_id,
           TRY_CAST(tags['unprofiled_seconds'] AS DOUBLE) * 1e9
               * coalesce(TRY_CAST(tags['profiled_iterations'] AS DOUBLE) / NULLIF(TRY_CAST(tags['unprofiled_iterations'] AS DOUBLE), 0), 1.0)
               AS unprofiled_span_ns
    FROM runs
    WHERE TRY_CAST(tags['unprofiled_seconds'] AS DOUBLE) > 0
), cpu_launches AS (
    SELECT run_id, TRY_CAST(tags['cpu_launch_interval_ns'] AS DOUBLE) AS cpu_launch_interval_ns
    FROM runs
    WHERE TRY_CAST(tags['cpu_launch_interval_ns'] AS DOUBLE) > 0
), activity AS (
    SELECT run_id, model, gpu, device_id, stream_id, start_ns, duration_ns, start_ns + duration_ns AS end_ns,
           coalesce(nvtx_range, split_part(nvtx_path, ' > ', 1), framework_op, kernel_base) AS subject,
           CASE WHEN nvtx_range IS NOT NULL THEN 'NVTX range'
                WHEN nvtx_path IS NOT NULL OR framework_op IS NOT NULL THEN 'framework op'
                ELSE 'kernel' END AS subject_kind
    FROM kernel_launches
), spaced AS (
    SELECT a.*,
           max(end_ns) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until,
           lag(subject) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns) AS previous_subject,
           start_ns - lag(start_ns) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns) AS launch_interval_ns
    FROM activity a
), gapped AS (
    SELECT s.*, CASE WHEN s.start_ns > s.busy_until THEN s.start_ns - s.busy_until ELSE 0 END AS gap_ns,
           CASE WHEN s.previous_subject IS NULL OR s.previous_subject <> s.subject THEN 1 ELSE 0 END AS starts_stretch
    FROM spaced s
), floors AS (
    SELECT g.run_id, g.device_id, min(CASE WHEN g.gap_ns > 0 THEN g.gap_ns END) AS floor_gap_ns,
           max(g.end_ns) - min(g.start_ns) AS span_ns, median(g.launch_interval_ns) AS launch_interval_ns,
           min(c.cpu_launch_interval_ns) AS cpu_launch_interval_ns
    FROM gapped g
    LEFT JOIN cpu_launches c ON c.run_id = g.run_id
    GROUP BY g.run_id, g.device_id
), per_subject AS (
    SELECT g.run_id, g.model, g.gpu, g.device_id, g.subject, min(g.subject_kind) AS subject_kind,
           count(*) AS launches, sum(g.starts_stretch) AS stretches,
           CAST(sum(g.duration_ns) AS DOUBLE) AS gpu_time_ns, CAST(sum(g.gap_ns) AS DOUBLE) AS idle_ns,
           CAST(sum(CASE WHEN g.gap_ns > f.floor_gap_ns THEN g.gap_ns - f.floor_gap_ns ELSE 0 END) AS DOUBLE)
               AS est_time_saved_ns,
           median(CASE WHEN g.gap_ns > 0 THEN g.gap_ns END) AS gap_median_ns, min(f.floor_gap_ns) AS floor_gap_ns,
           min(f.span_ns) AS span_ns, min(f.launch_interval_ns) AS launch_interval_ns,
           min(f.cpu_launch_interval_ns) AS cpu_launch_interval_ns, CAST(NULL AS DOUBLE) AS unprofiled_span_ns
    FROM gapped g
    JOIN floors f ON f.run_id = g.run_id AND coalesce(f.device_id, -1) = coalesce(g.device_id, -1)
    GROUP BY g.run_id, g.model, g.gpu, g.device_id, g.subject
), per_run AS (
    SELECT g.run_id, g.model, g.gpu, g.device_id, '(whole run)' AS subject, 'run' AS subject_kind,
           count(*) AS launches, sum(g.starts_stretch) AS stretches,
           CAST(sum(g.duration_ns) AS DOUBLE) AS gpu_time_ns, CAST(sum(g.gap_ns) AS DOUBLE) AS idle_ns,
           CAST(sum(CASE WHEN g.gap_ns > f.floor_gap_ns THEN g.gap_ns - f.floor_gap_ns ELSE 0 END) AS DOUBLE)
               AS est_time_saved_ns,
           median(CASE WHEN g.gap_ns > 0 THEN g.gap_ns END) AS gap_median_ns, min(f.floor_gap_ns) AS floor_gap_ns,
           min(f.span_ns) AS span_ns, min(f.launch_interval_ns) AS launch_interval_ns,
           min(f.cpu_launch_interval_ns) AS cpu_launch_interval_ns, min(u.unprofiled_span_ns) AS unprofiled_span_ns
    FROM gapped g
    JOIN floors f ON f.run_id = g.run_id AND coalesce(f.device_id, -1) = coalesce(g.device_id, -1)
    LEFT JOIN unprofiled u ON u.run_id = g.run_id
    GROUP BY g.run_id, g.model, g.gpu, g.device_id
), both_levels AS (
    SELECT * FROM per_subject
    UNION ALL
    SELECT * FROM per_run
), judged AS (
    -- with an un-profiled timing of the traced iterations, the idle time is that run's (wall time less the GPU
    -- busy time), never more than the profiled estimate; without one, the profiled idle time is an upper bound
    SELECT b.*,
           CASE WHEN b.unprofiled_span_ns IS NOT NULL
                THEN least(b.est_time_saved_ns, greatest(0.0, b.unprofiled_span_ns - b.gpu_time_ns))
                ELSE b.est_time_saved_ns END AS est_ns,
           CASE WHEN b.unprofiled_span_ns IS NOT NULL THEN 'idle time without the profiler'
                ELSE 'idle time measured under the profiler, an upper bound' END AS basis
    FROM both_levels b
)
SELECT run_id, model, gpu, device_id, subject, subject_kind, launches, stretches, gpu_time_ns, idle_ns,
       est_ns AS est_time_saved_ns, idle_ns / NULLIF(gpu_time_ns, 0) AS idle_per_busy,
       100.0 * est_ns / NULLIF(span_ns, 0) AS est_saved_pct_of_span,
       gap_median_ns,
       concat(CAST(launches AS VARCHAR), ' launches in ', CAST(stretches AS VARCHAR), ' stretch(es): GPU ran ',
              CAST(round(gpu_time_ns / 100) / 10 AS VARCHAR), ' us and sat idle ', CAST(round(idle_ns / 100) / 10 AS VARCHAR),
              ' us between them (median gap ', CAST(round(gap_median_ns / 100) / 10 AS VARCHAR),
              ' us; smallest gap of the run ', CAST(round(floor_gap_ns / 100) / 10 AS VARCHAR),
              ' us; median launch-to-launch interval ', CAST(round(launch_interval_ns / 100) / 10 AS VARCHAR),
              CASE WHEN cpu_launch_interval_ns IS NOT NULL
                   THEN concat(' us on the GPU, and the CPU''s launch calls came every ',
                               CAST(round(cpu_launch_interval_ns / 100) / 10 AS VARCHAR),
                               ' us (median, the trace''s cudaLaunchKernel/cuLaunchKernel calls)')
                   ELSE ' us, the CPU''s launch rate while the GPU waits on it' END,
              '): launch-bound, a CUDA Graph or kernel-fusion candidate. ',
              CASE WHEN unprofiled_span_ns IS NOT NULL
                   THEN concat('Un-profiled, the same iterations took ', CAST(round(unprofiled_span_ns / 100) / 10 AS VARCHAR),
                               ' us of wall time')
                   ELSE 'Gaps include profiler overhead (one launch every 35-65 us with record_shapes on, ~5-10 us without), so the saving is an upper bound' END) AS evidence,
       basis, launch_interval_ns, unprofiled_span_ns
FROM judged
WHERE idle_ns > gpu_time_ns
ORDER BY model, gpu, run_id, device_id, est_time_saved_ns DESC, subject
