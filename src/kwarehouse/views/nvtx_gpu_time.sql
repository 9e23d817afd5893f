-- GPU time per NVTX range ("which layer costs what"): per timeline run, the kernels' real GPU time under each range: the innermost user range (nvtx_range: nsys NVTX, torch user annotations and compiled regions) and the outermost entry of the launch's NVTX / CPU-op stack, with launches and share of the run's GPU time.
-- level 'innermost range': each kernel counts once, under the innermost user range around it (exclusive
-- time; kernels outside any range are '(no range)'). level 'outermost': under the first entry of its
-- nvtx_path (inclusive time of a top-level range or framework op, aten::layer_norm in an eager trace).
-- nsys runs exported as `nsys stats` only count through nvtx_kern_sum (level 'innermost range').
-- Kernel time only (memcpy/memset left out); an NVTX range's CPU-side duration is in nvtx_summaries.
WITH timed AS (
    SELECT run_id, model, gpu, 'innermost range' AS level, coalesce(nvtx_range, '(no range)') AS nvtx_range,
           duration_ns, kernel_id
    FROM kernel_launches
    WHERE activity = 'kernel'
    UNION ALL
    SELECT run_id, model, gpu, 'outermost' AS level, coalesce(split_part(nvtx_path, ' > ', 1), '(no range)') AS nvtx_range,
           duration_ns, kernel_id
    FROM kernel_launches
    WHERE activity = 'kernel'
), from_launches AS (
    SELECT run_id, model, gpu, level, nvtx_range, count(*) AS launches, count(DISTINCT kernel_id) AS kernel_ids,
           CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns, 'kernel_launches' AS source
    FROM timed
    GROUP BY run_id, model, gpu, level, nvtx_range
), from_summaries AS (
    SELECT run_id, model, gpu, 'innermost range' AS level, coalesce(nvtx_range, '(no range)') AS nvtx_range,
           CAST(sum(instances) AS BIGINT) AS launches, count(DISTINCT kernel_id) AS kernel_ids,
           sum(total_ns) AS gpu_time_ns, 'nvtx_kern_sum' AS source
    FROM kernel_summaries
    WHERE report = 'nvtx_kern_sum' AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)
    GROUP BY run_id, model, gpu, nvtx_range
), both_sources AS (
    SELECT * FROM from_launches
    UNION ALL
    SELECT * FROM from_summaries
)
SELECT run_id, model, gpu, level, nvtx_range, launches, kernel_ids, gpu_time_ns,
       100 * gpu_time_ns / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY run_id, level), 0) AS run_time_pct, source
FROM both_sources
ORDER BY model, gpu, run_id, level, gpu_time_ns DESC, nvtx_range
