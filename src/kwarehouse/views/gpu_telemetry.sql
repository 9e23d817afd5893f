-- GPU telemetry per profiled run and GPU: the samples (gpu_samples: nvidia-smi, dcgmi dmon, NVML) taken during the run's window: SM activity and occupancy, tensor and DRAM activity, clocks and whether they moved or were held down (throttling), power, memory; an estimated tensor TFLOP/s beside the counter- or shape-based figure.
-- The window of a profiled run: the span of its timeline in kernel_launches (first start .. last end,
-- when the GPU itself says the kernels ran) when that timeline counts from the Unix epoch (PyTorch
-- traces: baseTimeNanoseconds + ts), else the manifest's start_ns / end_ns (integer ns since the Unix
-- epoch, kept in runs.tags). nsys exports count from the session start, and ncu exports have no times:
-- such runs need the manifest's window. Telemetry logs are not profiled runs.
-- A sample at t describes the period (t - interval_ns, t] (nvidia-smi and NVML average utilisation over
-- the last sample period), so it belongs to a run when that period overlaps the window, on the same GPU
-- index (a sample or launch without an index matches any) and GPU name. Means weigh each sample by the
-- part of its period inside the window (p95s count samples); a sample that straddles the start or end
-- still mixes in time outside the run. Logs that print no time (dmon
-- without -o DT, dcgmi dmon) stay in gpu_samples but join no run. window_ns much shorter than
-- sampled_ns means the samples mostly describe time around the run, not the run.
-- gpu_util (nvidia-smi utilization.gpu, dmon sm, NVML, DCGM GPUTL) is the share of time ANY kernel was
-- running: one tiny kernel at a time reads 100 %. It is not efficiency; sm_active, sm_occupancy,
-- tensor_active and dram_active (DCGM profiling fields 1002-1005, or NVML GPM metrics) are.
-- estimated_tensor_tflops_per_s is an ESTIMATE: dense tensor peak of the run's dtype (gpu_peaks)
-- x mean tensor_active x mean SM clock / boost clock. DCGM's tensor_active is the ratio of cycles any
-- tensor pipe is active over all SMs' elapsed cycles, so SM activity and occupancy are already in it
-- (multiplying them in again would discount idle SMs twice). Legacy mma.sync kernels keep the pipe busy
-- about twice as long per FLOP as wgmma (GPU-PERF-NOTES), so the estimate overstates their FLOPs.
-- counter_tflops_per_s: the run's own FLOPs over its kernel time (ncu: kernels.flops / duration, i.e.
-- achieved_flops_per_s weighted by time); over_window: the same FLOPs over the whole window, the
-- figure to set beside the telemetry estimate.
-- throttled: a clock-event reason other than idle, application clocks or sync boost was set (NVML
-- bitmask 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 power brake = 236),
-- or dmon's pviol/tviol were non-zero.
WITH timeline_windows AS (
    SELECT run_id, device_id AS gpu_index, 'timeline span' AS window_source,
           min(start_ns) AS start_ns, max(start_ns + duration_ns) AS end_ns
    FROM kernel_launches
    GROUP BY run_id, device_id
    HAVING min(start_ns) >= 978307200000000000
), manifest_windows AS (
    SELECT run_id, CAST(NULL AS BIGINT) AS gpu_index, 'manifest' AS window_source,
           TRY_CAST(tags['start_ns'] AS BIGINT) AS start_ns, TRY_CAST(tags['end_ns'] AS BIGINT) AS end_ns
    FROM runs
    WHERE TRY_CAST(tags['start_ns'] AS BIGINT) IS NOT NULL AND TRY_CAST(tags['end_ns'] AS BIGINT) IS NOT NULL
      AND run_id NOT IN (SELECT run_id FROM timeline_windows)
), windows AS (
    SELECT w.*, r.model, r.gpu, r.tool, r.dtype
    FROM (SELECT * FROM timeline_windows UNION ALL SELECT * FROM manifest_windows) w
    JOIN runs r ON r.run_id = w.run_id
    WHERE r.tool <> 'telemetry'
), attached AS (
    SELECT w.run_id, w.model, w.gpu, w.tool, w.dtype, w.window_source, w.start_ns, w.end_ns,
           coalesce(s.gpu_index, w.gpu_index) AS gpu_index, s.run_id AS telemetry_run_id, s.source,
           s.timestamp_ns, s.interval_ns, s.gpu_model, s.field, s.value,
           -- how much of the sample's period lies in the window: its weight in the means (at least 1 ns,
           -- so a mean is NULL only where no sample has the field)
           greatest(least(s.timestamp_ns, w.end_ns) - greatest(s.timestamp_ns - coalesce(s.interval_ns, 0), w.start_ns), 1)
               AS overlap_ns
    FROM windows w
    JOIN gpu_samples s
      ON s.timestamp_ns >= w.start_ns
     AND s.timestamp_ns - coalesce(s.interval_ns, 0) <= w.end_ns
     AND (s.gpu_index IS NULL OR w.gpu_index IS NULL OR s.gpu_index = w.gpu_index)
     AND (s.gpu_name IS NULL OR s.gpu_name = w.gpu)
    WHERE s.process_id IS NULL
), per_sample AS (
    SELECT run_id, model, gpu, tool, dtype, window_source, start_ns, end_ns, gpu_index, telemetry_run_id,
           source, timestamp_ns, interval_ns, gpu_model, overlap_ns,
           max(CASE WHEN field = 'sm_active' THEN value END) AS sm_active,
           max(CASE WHEN field = 'sm_occupancy' THEN value END) AS sm_occupancy,
           max(CASE WHEN field = 'tensor_active' THEN value END) AS tensor_active,
           max(CASE WHEN field = 'dram_active' THEN value END) AS dram_active,
           max(CASE WHEN field = 'gpu_util' THEN value END) AS gpu_util,
           max(CASE WHEN field = 'sm_clock' THEN value END) AS sm_clock,
           max(CASE WHEN field = 'graphics_clock' THEN value END) AS graphics_clock,
           max(CASE WHEN field = 'memory_clock' THEN value END) AS memory_clock,
           max(CASE WHEN field = 'power' THEN value END) AS power,
           max(CASE WHEN field = 'memory_used' THEN value END) AS memory_used,
           max(CASE WHEN field = 'gpu_temperature' THEN value END) AS gpu_temperature,
           max(CASE WHEN field = 'throttle_reasons' THEN value END) AS throttle_reasons,
           max(CASE WHEN field IN ('power_violation', 'thermal_violation') THEN value END) AS violation
    FROM attached
    GROUP BY run_id, model, gpu, tool, dtype, window_source, start_ns, end_ns, gpu_index, telemetry_run_id,
             source, timestamp_ns, interval_ns, gpu_model, overlap_ns
), telemetry AS (
    SELECT run_id, model, gpu, tool, dtype, window_source, gpu_index,
           min(start_ns) AS window_start_ns, max(end_ns) AS window_end_ns,
           max(end_ns) - min(start_ns) AS window_ns,
           count(*) AS samples,
           CAST(sum(coalesce(interval_ns, 0)) AS BIGINT) AS sampled_ns,
           array_to_string(list_sort(list(DISTINCT source)), ', ') AS sources,
           array_to_string(list_sort(list(DISTINCT telemetry_run_id)), ', ') AS telemetry_runs,
           max(gpu_model) AS gpu_model,
           time_weighted(sm_active, overlap_ns) AS sm_active_mean_pct, quantile_cont(sm_active, 0.95) AS sm_active_p95_pct,
           time_weighted(sm_occupancy, overlap_ns) AS sm_occupancy_mean_pct, quantile_cont(sm_occupancy, 0.95) AS sm_occupancy_p95_pct,
           time_weighted(tensor_active, overlap_ns) AS tensor_active_mean_pct, quantile_cont(tensor_active, 0.95) AS tensor_active_p95_pct,
           time_weighted(dram_active, overlap_ns) AS dram_active_mean_pct, quantile_cont(dram_active, 0.95) AS dram_active_p95_pct,
           time_weighted(gpu_util, overlap_ns) AS gpu_util_mean_pct, quantile_cont(gpu_util, 0.95) AS gpu_util_p95_pct,
           min(coalesce(sm_clock, graphics_clock)) AS sm_clock_min_hz,
           max(coalesce(sm_clock, graphics_clock)) AS sm_clock_max_hz,
           time_weighted(coalesce(sm_clock, graphics_clock), overlap_ns) AS sm_clock_mean_hz,
           min(memory_clock) AS memory_clock_min_hz, max(memory_clock) AS memory_clock_max_hz,
           time_weighted(power, overlap_ns) AS power_mean_w, max(power) AS power_max_w,
           max(memory_used) AS memory_used_max_bytes, max(gpu_temperature) AS gpu_temperature_max_c,
           bool_or(CASE WHEN throttle_reasons IS NOT NULL OR violation IS NOT NULL
                        THEN coalesce((CAST(throttle_reasons AS BIGINT) & 236) <> 0, false) OR coalesce(violation > 0, false)
                   END) AS throttled
    FROM per_sample
    GROUP BY run_id, model, gpu, tool, dtype, window_source, gpu_index
), counters AS (
    SELECT run_id, 'ncu counters' AS counter_source, sum(flops) AS flops,
           sum(CASE WHEN flops IS NOT NULL THEN duration_ns END) AS flops_ns
    FROM kernels GROUP BY run_id
)
SELECT t.run_id, t.model, t.gpu, t.tool, t.gpu_index, t.window_source, t.window_start_ns, t.window_end_ns,
       t.window_ns, t.samples, t.sampled_ns, t.sources, t.telemetry_runs,
       t.sm_active_mean_pct, t.sm_active_p95_pct, t.sm_occupancy_mean_pct, t.sm_occupancy_p95_pct,
       t.tensor_active_mean_pct, t.tensor_active_p95_pct, t.dram_active_mean_pct, t.dram_active_p95_pct,
       t.gpu_util_mean_pct, t.gpu_util_p95_pct,
       t.sm_clock_min_hz, t.sm_clock_max_hz, t.sm_clock_mean_hz,
       t.sm_clock_max_hz > t.sm_clock_min_hz AS sm_clock_varied,
       t.memory_clock_min_hz, t.memory_clock_max_hz, t.throttled,
       t.power_mean_w, t.power_max_w, t.memory_used_max_bytes, t.gpu_temperature_max_c,
       t.dtype AS peak_dtype, p.tensor_dense_flops_per_s / 1e12 AS peak_tensor_tflops_per_s,
       p.tensor_dense_flops_per_s * t.tensor_active_mean_pct / 100.0
           * coalesce(t.sm_clock_mean_hz / NULLIF(p.boost_clock_hz, 0), 1.0) / 1e12 AS estimated_tensor_tflops_per_s,
       c.counter_source,
       c.flops / NULLIF(c.flops_ns, 0) * 1e9 / 1e12 AS counter_tflops_per_s,
       c.flops / NULLIF(t.window_ns, 0) * 1e9 / 1e12 AS counter_tflops_per_s_over_window
FROM telemetry t
LEFT JOIN gpu_peaks p ON p.gpu_model = t.gpu_model AND p.dtype = t.dtype
LEFT JOIN counters c ON c.run_id = t.run_id AND c.flops IS NOT NULL
ORDER BY t.model, t.run_id, t.gpu_index
