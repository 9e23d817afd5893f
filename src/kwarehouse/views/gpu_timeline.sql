-- How busy each GPU really was, per timeline run, device and stream (stream_id NULL = all streams of the device): span, busy and idle %, the idle gaps (median, p90, max), kernels per ms, overlap between streams, and the memcpy/memset share and direction.
-- From kernel_launches (nsys, PyTorch traces): every GPU activity (kernel, memcpy, memset) is an interval
-- [start_ns, start_ns + duration_ns). span_ns runs from the first start to the last end; busy_ns is the
-- union of the intervals (overlapping ones counted once) = span_ns minus the idle gaps; a gap is a
-- stretch with nothing running between two busy stretches (back-to-back or overlapping activities leave
-- none). A low busy_pct with gaps of tens of microseconds is launch-bound work (CPU launch overhead,
-- Python, synchronisation) that CUDA Graphs or torch.compile remove; the profiler's own overhead widens
-- the gaps too, so read them as an upper bound.
-- stream_overlap_ns (device rows): per-stream busy time added up minus the device's busy time = time the
-- streams ran concurrently. memcpy direction comes from the activity name ("[CUDA memcpy Host-to-Device]",
-- "Memcpy HtoD (Pageable -> Device)"); memcpy_pct and memset_pct are shares of all activity time.
WITH activity AS (
    SELECT run_id, model, gpu, device_id, device_name, stream_id, activity, kernel_name, bytes,
           start_ns, start_ns + duration_ns AS end_ns, duration_ns
    FROM kernel_launches
), per_stream AS (
    SELECT a.*, CAST(stream_id AS VARCHAR) AS lane,
           max(end_ns) OVER (PARTITION BY run_id, device_id, stream_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
    FROM activity a
), per_device AS (
    SELECT a.*, 'all' AS lane,
           max(end_ns) OVER (PARTITION BY run_id, device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
    FROM activity a
), both_levels AS (
    SELECT run_id, model, gpu, device_id, device_name, stream_id, stream_id AS on_stream, lane, activity, kernel_name,
           bytes, start_ns, end_ns, duration_ns, CASE WHEN start_ns > busy_until THEN start_ns - busy_until END AS gap_ns
    FROM per_stream
    UNION ALL
    SELECT run_id, model, gpu, device_id, device_name, CAST(NULL AS BIGINT) AS stream_id, stream_id AS on_stream, lane,
           activity, kernel_name, bytes, start_ns, end_ns, duration_ns, CASE WHEN start_ns > busy_until THEN start_ns - busy_until END AS gap_ns
    FROM per_device
), directed AS (
    SELECT b.*,
           CASE WHEN activity <> 'memcpy' THEN NULL
                WHEN kernel_name LIKE '%Host-to-Device%' OR kernel_name LIKE '%HtoD%' THEN 'HtoD'
                WHEN kernel_name LIKE '%Device-to-Host%' OR kernel_name LIKE '%DtoH%' THEN 'DtoH'
                WHEN kernel_name LIKE '%Device-to-Device%' OR kernel_name LIKE '%DtoD%' THEN 'DtoD'
                ELSE 'other' END AS direction
    FROM both_levels b
), summed AS (
    SELECT run_id, model, gpu, device_id, min(device_name) AS device_name, stream_id, lane,
           max(end_ns) - min(start_ns) AS span_ns,
           coalesce(sum(gap_ns), 0) AS idle_ns,
           count(gap_ns) AS gaps,
           median(gap_ns) AS gap_median_ns,
           quantile_cont(gap_ns, 0.9) AS gap_p90_ns,
           max(gap_ns) AS gap_max_ns,
           count_if(activity = 'kernel') AS kernels,
           sum(CASE WHEN activity = 'kernel' THEN duration_ns ELSE 0 END) AS kernel_ns,
           sum(CASE WHEN activity = 'memcpy' THEN duration_ns ELSE 0 END) AS memcpy_ns,
           sum(CASE WHEN activity = 'memset' THEN duration_ns ELSE 0 END) AS memset_ns,
           sum(duration_ns) AS activity_ns,
           sum(CASE WHEN direction = 'HtoD' THEN duration_ns ELSE 0 END) AS memcpy_htod_ns,
           sum(CASE WHEN direction = 'DtoH' THEN duration_ns ELSE 0 END) AS memcpy_dtoh_ns,
           sum(CASE WHEN direction = 'DtoD' THEN duration_ns ELSE 0 END) AS memcpy_dtod_ns,
           sum(CASE WHEN direction = 'other' THEN duration_ns ELSE 0 END) AS memcpy_other_ns,
           sum(CASE WHEN direction = 'HtoD' THEN bytes ELSE 0 END) AS memcpy_htod_bytes,
           sum(CASE WHEN direction = 'DtoH' THEN bytes ELSE 0 END) AS memcpy_dtoh_bytes,
           sum(CASE WHEN direction = 'DtoD' THEN bytes ELSE 0 END) AS memcpy_dtod_bytes,
           count(DISTINCT on_stream) AS streams
    FROM directed
    GROUP BY run_id, model, gpu, device_id, stream_id, lane
), with_busy AS (
    SELECT s.*, s.span_ns - s.idle_ns AS busy_ns,
           sum(CASE WHEN s.lane <> 'all' THEN s.span_ns - s.idle_ns END)
               OVER (PARTITION BY s.run_id, s.device_id) AS stream_busy_sum_ns
    FROM summed s
)
SELECT run_id, model, gpu, device_id, device_name, stream_id, span_ns, busy_ns,
       100.0 * busy_ns / NULLIF(span_ns, 0) AS busy_pct,
       100.0 * idle_ns / NULLIF(span_ns, 0) AS idle_pct,
       idle_ns, gaps, gap_median_ns, gap_p90_ns, gap_max_ns,
       kernels, kernels * 1e6 / NULLIF(span_ns, 0) AS kernels_per_ms,
       CASE WHEN lane = 'all' THEN stream_busy_sum_ns - busy_ns END AS stream_overlap_ns,
       CASE WHEN lane = 'all' THEN streams END AS streams,
       kernel_ns, memcpy_ns, memset_ns,
       100.0 * memcpy_ns / NULLIF(activity_ns, 0) AS memcpy_pct,
       100.0 * memset_ns / NULLIF(activity_ns, 0) AS memset_pct,
       memcpy_htod_ns, memcpy_dtoh_ns, memcpy_dtod_ns, memcpy_other_ns,
       memcpy_htod_bytes, memcpy_dtoh_bytes, memcpy_dtod_bytes
FROM with_busy
ORDER BY model, gpu, run_id, device_id, stream_id NULLS FIRST
