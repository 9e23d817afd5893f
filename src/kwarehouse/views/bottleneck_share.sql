-- Share of each model's real GPU time per bottleneck class: time_weighted_kernels added up by class, per model and GPU, with time_basis, counter_coverage_pct, the kernels behind each class, the top one, and how much of the class rests on counters borrowed from other models.
-- Why: bottleneck_class judges ncu's replayed launches (the first N, serialised, small kernels 1.6-2.5x
-- slow): adding up their durations ranks classes by replay time. Here each kernel identity counts with its
-- real GPU time from the model's timelines (nsys, PyTorch traces; ncu replay time only where the model has
-- no timeline on that GPU: time_basis) and the class holding most of it (time_weighted_kernels: each launch
-- shape's time split by the classes of the ncu launches its counters came from, kernel_time's provenance).
-- 'not profiled' is real time that no ncu launch of the same kernel on that GPU describes, so the shares
-- stay shares of all the time. share_pct is of the model's GPU time on that GPU; counter_coverage_pct is the
-- share of it that has a class (the same on every row of a model and GPU).
WITH kernels_ AS (
    SELECT model, gpu, kernel_id, kernel_base, time_basis, coalesce(bottleneck, 'not profiled') AS bottleneck,
           weight_ns, coalesce(timeline_launches, ncu_launches) AS launches,
           CASE WHEN borrowed_from_model IS NOT NULL THEN weight_ns ELSE 0 END AS borrowed_ns
    FROM time_weighted_kernels
    WHERE weight_ns > 0
), per_class AS (
    SELECT model, gpu, bottleneck, min(time_basis) AS time_basis, sum(weight_ns) AS gpu_time_ns,
           CAST(sum(launches) AS BIGINT) AS launches, count(*) AS kernels, arg_max(kernel_base, weight_ns) AS top_kernel,
           max(weight_ns) AS top_kernel_ns, sum(borrowed_ns) AS borrowed_ns
    FROM kernels_
    GROUP BY model, gpu, bottleneck
), totals AS (
    SELECT model, gpu, sum(gpu_time_ns) AS total_ns,
           sum(CASE WHEN bottleneck <> 'not profiled' THEN gpu_time_ns ELSE 0 END) AS classed_ns
    FROM per_class
    GROUP BY model, gpu
)
SELECT c.model, c.gpu, c.bottleneck, c.time_basis, c.gpu_time_ns,
       100.0 * c.gpu_time_ns / NULLIF(t.total_ns, 0) AS share_pct,
       100.0 * t.classed_ns / NULLIF(t.total_ns, 0) AS counter_coverage_pct,
       c.kernels, c.launches, c.top_kernel, 100.0 * c.top_kernel_ns / NULLIF(c.gpu_time_ns, 0) AS top_kernel_pct,
       concat(CASE c.time_basis WHEN 'timeline' THEN 'real GPU time' ELSE 'ncu replay time (no timeline)' END,
              ' of ', CAST(c.launches AS VARCHAR), ' launch(es) of ', CAST(c.kernels AS VARCHAR), ' kernel(s)',
              CASE WHEN c.bottleneck = 'not profiled' THEN '; no ncu launch of these kernels on this GPU'
                   WHEN c.borrowed_ns > 0
                   THEN concat('; ', CAST(round(100.0 * c.borrowed_ns / c.gpu_time_ns, 1) AS VARCHAR),
                               ' % of it judged on counters borrowed from other models (kernel_time says which)')
                   ELSE '' END) AS evidence
FROM per_class c
JOIN totals t ON t.model = c.model AND t.gpu = c.gpu
ORDER BY c.model, c.gpu, c.gpu_time_ns DESC, c.bottleneck
