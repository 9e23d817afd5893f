-- Model-level efficiency per model and run: MFU (useful FLOPs over the span at the datasheet dense peak of each kernel's dtype) and over GPU busy time, tensor-core busy share, executed/useful FLOPs (padding_factor), throttled share, and how the span splits into kernels at their roof, below it, not placed, and idle.
-- Rows: each timeline run (PyTorch trace, nsys: time_basis 'timeline'), and each ncu run of a model that has
-- no timeline on that GPU (time_basis 'ncu replay': serialised, cache-flushed replays, no idle time, so
-- mfu_pct, idle_pct and the span are NULL and the shares are of ncu time).
-- useful FLOPs: the op's math from its input shapes (timeline: kernel_launches.flops, 2·M·N·K, conv
-- without channel padding, causal attention halved; ncu: roofline.useful_flops), never the padded tiles the
-- tensor counters execute. mfu_pct = 100 x sum over launches of useful FLOPs / the dense datasheet peak of
-- the launch's dtype (gpu_peaks.csv, a mix of dtypes weighs each by its own peak), over span_ns (first
-- start to last end of the run on each device, summed over devices); mfu_busy_pct the same over busy_ns
-- (gpu_timeline: the union of kernel, memcpy and memset intervals). Both are lower bounds where
-- flops_coverage_pct (the share of tensor-kernel time whose useful FLOPs are known) is below 100: kernels
-- whose shapes no source recorded (a trace without record_shapes, a compiled graph) count no FLOPs.
-- tensor_busy_pct: time in tensor-core kernels (GEMM, conv, attention of a dtype other than FP32/FP64) as
-- a share of the span (ncu: of ncu time). padding_factor = executed tensor FLOPs (ncu's counters) / useful
-- FLOPs over the ncu launches of the model on that GPU that have both (1.0: no padding; GPT-2's QKV GEMM
-- 1.03, a C=3 patch-embedding conv ~11): NULL without tensor counters.
-- throttled_pct: share of the span (ncu: of ncu time) in kernels that clock_throttling found throttled in
-- an ncu run of this model and GPU; throttle_lost_ns its est_time_lost_ns scaled to this run's time (an
-- upper bound). Roof shares: each kernel identity on the GPU is placed by its roofline row (pct_of_roof on
-- the useful basis, pct_of_roof / padding_factor) or its DRAM throughput (% of peak, time-weighted over its
-- ncu launches): at_roof_pct at or above at_roof_pct of the limits CTE (published ceilings: big cuBLAS BF16
-- GEMMs 76-77 % of peak, streaming kernels 70-90 % of DRAM), below_roof_pct under it, unplaced_pct with
-- no ncu launch or nothing to place it by; memcpy_memset_pct the copies' and memsets' share, idle_pct the
-- idle share of the span. On one stream the five add up to 100; kernels overlapping on several streams
-- count once per stream, so they can add past 100 on multi-stream runs.
-- NULL, not 0, where a column's basis is missing (missing_data says which and why): mfu_pct without a span,
-- mfu_* without useful FLOPs, tensor_busy_pct where no kernel has a known op class, throttled_pct and
-- throttle_lost_ns where ncu measured no SM clock for the model on that GPU (a trimmed run, an nsys capture).
WITH limits AS (
    SELECT 70.0 AS at_roof_pct
), tensor_classes AS (
    SELECT 'gemm' AS op_class UNION ALL SELECT 'conv' UNION ALL SELECT 'attention'
), timeline_models AS (
    SELECT DISTINCT model, gpu FROM partition_kernels WHERE timeline_launches > 0
), devices AS (
    SELECT run_id, sum(span_ns) AS span_ns, sum(busy_ns) AS busy_ns, sum(idle_ns) AS idle_ns,
           sum(memcpy_ns + memset_ns) AS memcpy_memset_ns
    FROM gpu_timeline
    WHERE stream_id IS NULL
    GROUP BY run_id
), roof_rows AS (
    SELECT gpu, kernel_id, max(pct_of_roof / coalesce(padding_factor, 1.0)) AS useful_pct_of_roof
    FROM roofline
    WHERE level = 'kernel'
    GROUP BY gpu, kernel_id
), dram_rows AS (
    -- the time-weighted DRAM % of each kernel's ncu launches on the GPU, from each partition's sums
    SELECT gpu, kernel_id, sum(dram_pct * dram_weight_ns) / NULLIF(sum(dram_weight_ns), 0) AS dram_pct
    FROM partition_kernels
    WHERE ncu_launches > 0
    GROUP BY gpu, kernel_id
), placement AS (
    SELECT coalesce(r.gpu, d.gpu) AS gpu, coalesce(r.kernel_id, d.kernel_id) AS kernel_id,
           CASE WHEN r.useful_pct_of_roof IS NULL AND d.dram_pct IS NULL THEN 'unplaced'
                WHEN coalesce(r.useful_pct_of_roof >= l.at_roof_pct, false)
                     OR coalesce(d.dram_pct >= l.at_roof_pct, false) THEN 'at roof'
                ELSE 'below roof' END AS placement
    FROM roof_rows r
    FULL OUTER JOIN dram_rows d ON d.gpu = r.gpu AND d.kernel_id = r.kernel_id
    CROSS JOIN limits l
), clocked_models AS (
    -- models whose SM clock ncu measured on that GPU: the basis of throttled_pct
    SELECT DISTINCT model, gpu FROM clock_throttling
), throttling AS (
    SELECT model, gpu, kernel_id, bool_or(throttled) AS throttled,
           max(CASE WHEN throttled THEN 1 - sm_clock_hz / max_sm_clock_hz END) AS lost_share
    FROM clock_throttling
    GROUP BY model, gpu, kernel_id
), padding AS (
    SELECT model, gpu,
           sum(CASE WHEN useful_flops > 0 THEN tensor_flops END)
               / NULLIF(sum(CASE WHEN tensor_flops IS NOT NULL THEN useful_flops END), 0) AS padding_factor
    FROM roofline
    WHERE level = 'launch'
    GROUP BY model, gpu
), timeline_launches AS (
    SELECT l.run_id, l.model, l.gpu, CAST(l.duration_ns AS DOUBLE) AS duration_ns, l.flops AS useful_flops,
           l.peak_flops_per_s AS datasheet_peak_flops_per_s, l.math_dtype,
           c.op_class IS NOT NULL AND coalesce(l.math_dtype, 'unknown') NOT IN ('fp32', 'fp64') AS tensor_kernel,
           coalesce(l.op_class, 'unknown') <> 'unknown' AS classified,
           coalesce(p.placement, 'unplaced') AS placement,
           coalesce(t.throttled, false) AS throttled, coalesce(t.lost_share, 0.0) AS lost_share
    FROM kernel_launches l
    LEFT JOIN tensor_classes c ON c.op_class = l.op_class
    LEFT JOIN placement p ON p.gpu = l.gpu AND p.kernel_id = l.kernel_id
    LEFT JOIN throttling t ON t.model = l.model AND t.gpu = l.gpu AND t.kernel_id = l.kernel_id
    WHERE l.activity = 'kernel'
), ncu_launches AS (
    SELECT r.run_id, r.model, r.gpu, r.duration_ns, r.useful_flops, r.datasheet_peak_flops_per_s, r.math_dtype,
           c.op_class IS NOT NULL AND coalesce(r.math_dtype, 'unknown') NOT IN ('fp32', 'fp64') AS tensor_kernel,
           coalesce(r.op_class, 'unknown') <> 'unknown' AS classified,
           coalesce(p.placement, 'unplaced') AS placement,
           coalesce(t.throttled, false) AS throttled, coalesce(t.lost_share, 0.0) AS lost_share
    FROM roofline r
    LEFT JOIN timeline_models m ON m.model = r.model AND m.gpu = r.gpu
    LEFT JOIN tensor_classes c ON c.op_class = r.op_class
    LEFT JOIN placement p ON p.gpu = r.gpu AND p.kernel_id = r.kernel_id
    LEFT JOIN throttling t ON t.model = r.model AND t.gpu = r.gpu AND t.kernel_id = r.kernel_id
    WHERE r.level = 'launch' AND m.model IS NULL AND r.duration_ns > 0
), all_launches AS (
    SELECT 'timeline' AS time_basis, * FROM timeline_launches
    UNION ALL
    SELECT 'ncu replay' AS time_basis, * FROM ncu_launches
), per_run AS (
    SELECT run_id, model, gpu, min(time_basis) AS time_basis, count(*) AS kernels,
           sum(duration_ns) AS kernel_ns,
           sum(useful_flops) AS useful_flops,
           sum(useful_flops / datasheet_peak_flops_per_s) AS peak_s,
           arg_max(math_dtype, useful_flops / datasheet_peak_flops_per_s) AS main_dtype,
           sum(CASE WHEN tensor_kernel THEN duration_ns ELSE 0 END) AS tensor_ns,
           sum(CASE WHEN classified THEN duration_ns ELSE 0 END) AS classified_ns,
           sum(CASE WHEN tensor_kernel AND useful_flops / datasheet_peak_flops_per_s IS NOT NULL
                    THEN duration_ns ELSE 0 END) AS tensor_counted_ns,
           sum(CASE WHEN placement = 'at roof' THEN duration_ns ELSE 0 END) AS at_roof_ns,
           sum(CASE WHEN placement = 'below roof' THEN duration_ns ELSE 0 END) AS below_roof_ns,
           sum(CASE WHEN placement = 'unplaced' THEN duration_ns ELSE 0 END) AS unplaced_ns,
           sum(CASE WHEN throttled THEN duration_ns ELSE 0 END) AS throttled_ns,
           sum(duration_ns * lost_share) AS throttle_lost_ns
    FROM all_launches
    GROUP BY run_id, model, gpu
), spanned AS (
    SELECT p.*,
           CASE WHEN p.time_basis = 'timeline' THEN d.span_ns END AS span_ns,
           CASE WHEN p.time_basis = 'timeline' THEN d.busy_ns ELSE p.kernel_ns END AS busy_ns,
           CASE WHEN p.time_basis = 'timeline' THEN d.idle_ns END AS idle_ns,
           CASE WHEN p.time_basis = 'timeline' THEN d.memcpy_memset_ns END AS memcpy_memset_ns,
           -- the base of the shares: the span on a timeline, ncu's time otherwise
           CASE WHEN p.time_basis = 'timeline' THEN d.span_ns ELSE p.kernel_ns END AS share_base_ns
    FROM per_run p
    LEFT JOIN devices d ON d.run_id = p.run_id
)
SELECT s.model, s.run_id, s.gpu, s.time_basis,
       100.0 * s.peak_s / NULLIF(s.span_ns * 1e-9, 0) AS mfu_pct,
       100.0 * s.peak_s / NULLIF(s.busy_ns * 1e-9, 0) AS mfu_busy_pct,
       CASE WHEN s.classified_ns > 0 THEN 100.0 * s.tensor_ns / NULLIF(s.share_base_ns, 0) END AS tensor_busy_pct,
       pad.padding_factor,
       CASE WHEN cm.model IS NOT NULL THEN 100.0 * s.throttled_ns / NULLIF(s.share_base_ns, 0) END AS throttled_pct,
       100.0 * s.at_roof_ns / NULLIF(s.share_base_ns, 0) AS at_roof_pct,
       100.0 * s.below_roof_ns / NULLIF(s.share_base_ns, 0) AS below_roof_pct,
       100.0 * s.unplaced_ns / NULLIF(s.share_base_ns, 0) AS unplaced_pct,
       100.0 * s.memcpy_memset_ns / NULLIF(s.span_ns, 0) AS memcpy_memset_pct,
       100.0 * s.idle_ns / NULLIF(s.span_ns, 0) AS idle_pct,
       100.0 * s.tensor_counted_ns / NULLIF(s.tensor_ns, 0) AS flops_coverage_pct,
       s.useful_flops, s.main_dtype, s.span_ns, s.busy_ns, s.kernel_ns, s.kernels,
       CASE WHEN cm.model IS NOT NULL THEN s.throttle_lost_ns END AS throttle_lost_ns,
       -- why a column is NULL: its basis is missing, which is not the same as zero
       nullif(concat_ws('; ',
           CASE WHEN s.span_ns IS NULL THEN 'mfu_pct, idle_pct: no timeline span (ncu replays are serialised, without idle time)' END,
           CASE WHEN s.peak_s IS NULL THEN 'mfu_pct, mfu_busy_pct: no useful FLOPs known (no op shapes, or no tensor/FP work)' END,
           CASE WHEN NOT s.classified_ns > 0 THEN 'tensor_busy_pct: no kernel with a known op class' END,
           CASE WHEN pad.padding_factor IS NULL THEN 'padding_factor: no ncu tensor counters beside useful FLOPs' END,
           CASE WHEN cm.model IS NULL THEN 'throttled_pct: no SM clock measured (no ncu run of this model on this GPU)' END), '')
           AS missing_data
FROM spanned s
LEFT JOIN padding pad ON pad.model = s.model AND pad.gpu = s.gpu
LEFT JOIN clocked_models cm ON cm.model = s.model AND cm.gpu = s.gpu
