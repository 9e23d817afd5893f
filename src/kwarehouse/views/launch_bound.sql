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
-- Microseconds in the evidence are whole nanoseconds rounded half up (round(ns / 100) / 10): round(ns / 1000, 1)
-- of 205,950 ns gave 206.0 or 205.9 depending on the engine (DuckDB 2 rounds the binary double 205.9499...).
WITH activity AS (
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
           lag(subject) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns) AS previous_subject
    FROM activity a
), gapped AS (
    SELECT s.*, CASE WHEN s.start_ns > s.busy_until THEN s.start_ns - s.busy_until ELSE 0 END AS gap_ns,
           CASE WHEN s.previous_subject IS NULL OR s.previous_subject <> s.subject THEN 1 ELSE 0 END AS starts_stretch
    FROM spaced s
), floors AS (
    SELECT run_id, device_id, min(CASE WHEN gap_ns > 0 THEN gap_ns END) AS floor_gap_ns,
           max(end_ns) - min(start_ns) AS span_ns
    FROM gapped
    GROUP BY run_id, device_id
), per_subject AS (
    SELECT g.run_id, g.model, g.gpu, g.device_id, g.subject, min(g.subject_kind) AS subject_kind,
           count(*) AS launches, sum(g.starts_stretch) AS stretches,
           CAST(sum(g.duration_ns) AS DOUBLE) AS gpu_time_ns, CAST(sum(g.gap_ns) AS DOUBLE) AS idle_ns,
           CAST(sum(CASE WHEN g.gap_ns > f.floor_gap_ns THEN g.gap_ns - f.floor_gap_ns ELSE 0 END) AS DOUBLE)
               AS est_time_saved_ns,
           median(CASE WHEN g.gap_ns > 0 THEN g.gap_ns END) AS gap_median_ns, min(f.floor_gap_ns) AS floor_gap_ns,
           min(f.span_ns) AS span_ns
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
           min(f.span_ns) AS span_ns
    FROM gapped g
    JOIN floors f ON f.run_id = g.run_id AND coalesce(f.device_id, -1) = coalesce(g.device_id, -1)
    GROUP BY g.run_id, g.model, g.gpu, g.device_id
), both_levels AS (
    SELECT * FROM per_subject
    UNION ALL
    SELECT * FROM per_run
)
SELECT run_id, model, gpu, device_id, subject, subject_kind, launches, stretches, gpu_time_ns, idle_ns,
       est_time_saved_ns, idle_ns / NULLIF(gpu_time_ns, 0) AS idle_per_busy,
       100.0 * est_time_saved_ns / NULLIF(span_ns, 0) AS est_saved_pct_of_span,
       gap_median_ns,
       concat(CAST(launches AS VARCHAR), ' launches in ', CAST(stretches AS VARCHAR), ' stretch(es): GPU ran ',
              CAST(round(gpu_time_ns / 100) / 10 AS VARCHAR), ' us and sat idle ', CAST(round(idle_ns / 100) / 10 AS VARCHAR),
              ' us between them (median gap ', CAST(round(gap_median_ns / 100) / 10 AS VARCHAR),
              ' us; smallest gap of the run ', CAST(round(floor_gap_ns / 100) / 10 AS VARCHAR),
              ' us): launch-bound, a CUDA Graph or kernel-fusion candidate. Gaps include profiler overhead, ',
              'so the saving is an upper bound') AS evidence
FROM both_levels
WHERE idle_ns > gpu_time_ns
ORDER BY model, gpu, run_id, device_id, est_time_saved_ns DESC, subject
