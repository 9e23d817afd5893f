-- Fusion candidates in timeline runs: chains of consecutive memory-bound kernels (elementwise, reduction, normalization, softmax, copy classes, or DRAM-bound by their ncu counters) on one stream under one NVTX range, with their time, DRAM bytes and an estimate of what one fused kernel would take at the DRAM roof.
-- From kernel_launches (nsys, PyTorch traces) in start order per run, device and stream: a chain is two
-- or more member kernels in a row with nothing else between them on the stream and the same innermost
-- user NVTX range (a module, a compiled region; none in plain eager traces, so there the chain is what
-- runs back to back: GELU's mul/pow/add/tanh, RMSNorm's pow/mean/rsqrt/mul, BN+ReLU). Identical chains
-- (same range, first and last op, length) of a run are one row; occurrences counts them.
-- DRAM bytes per launch come from ncu counters through kernel_time (this model's, or borrowed by kernel
-- identity and launch shape); est_time_saved_ns = chain time - fused time, where the fused kernel is
-- ESTIMATED to move the bytes of the chain's largest member once (each tensor read or written once,
-- intermediates kept on chip) at the GPU's peak DRAM bandwidth (kernels.peak_dram_bytes_per_s). NULL when
-- a member has no counters. It is a bound, not a promise: launch gaps between the kernels come on top
-- (launch_bound), and a fused kernel rarely reaches the full roof.
WITH gpu_peak AS (
    SELECT gpu, max(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s FROM kernels GROUP BY gpu
), launches AS (
    SELECT l.run_id, l.model, l.gpu, l.device_id, l.stream_id, l.start_ns, l.duration_ns, l.op_class, l.kernel_base,
           coalesce(l.framework_op, l.kernel_base) AS op, coalesce(l.nvtx_range, '') AS range_name,
           kt.dram_bytes_per_launch, kt.dram_pct, coalesce(kt.peak_dram_bytes_per_s, p.peak_dram_bytes_per_s) AS peak_bw,
           (l.op_class IN ('elementwise', 'reduction', 'normalization', 'softmax', 'copy/transpose')
            OR kt.dram_pct >= c.memory_pct) AND l.activity = 'kernel' AS member
    FROM kernel_launches l
    CROSS JOIN thresholds c
    LEFT JOIN gpu_peak p ON p.gpu = l.gpu
    LEFT JOIN kernel_time kt
      ON kt.model = l.model AND kt.gpu = l.gpu AND kt.kernel_id = l.kernel_id AND kt.time_basis = 'timeline'
     AND coalesce(kt.grid_x, -1) = coalesce(l.grid_x, -1) AND coalesce(kt.grid_y, -1) = coalesce(l.grid_y, -1)
     AND coalesce(kt.grid_z, -1) = coalesce(l.grid_z, -1) AND coalesce(kt.block_x, -1) = coalesce(l.block_x, -1)
     AND coalesce(kt.block_y, -1) = coalesce(l.block_y, -1) AND coalesce(kt.block_z, -1) = coalesce(l.block_z, -1)
     AND coalesce(kt.op_shapes, '') = coalesce(l.op_shapes, '')
), islands AS (
    -- consecutive launches with the same (member, range) share one island number
    SELECT x.*,
           row_number() OVER (PARTITION BY run_id, device_id, stream_id ORDER BY start_ns)
           - row_number() OVER (PARTITION BY run_id, device_id, stream_id, member, range_name ORDER BY start_ns) AS island
    FROM launches x
), chains AS (
    SELECT run_id, model, gpu, device_id, stream_id, range_name, island,
           count(*) AS kernels, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           arg_min(op, start_ns) AS first_op, arg_max(op, start_ns) AS last_op,
           count(DISTINCT op) AS distinct_ops,
           sum(dram_bytes_per_launch) AS dram_bytes, max(dram_bytes_per_launch) AS largest_member_bytes,
           count(dram_bytes_per_launch) AS with_bytes, min(peak_bw) AS peak_bw
    FROM islands
    WHERE member
    GROUP BY run_id, model, gpu, device_id, stream_id, range_name, island
    HAVING count(*) >= 2
), estimated AS (
    SELECT c.*,
           CASE WHEN c.with_bytes = c.kernels AND c.peak_bw > 0 THEN 1e9 * c.largest_member_bytes / c.peak_bw END
               AS fused_ns
    FROM chains c
), grouped AS (
    SELECT run_id, model, gpu, device_id,
           concat(CASE WHEN range_name <> '' THEN concat(range_name, ': ') ELSE '' END, first_op, ' … ', last_op,
                  ' (', CAST(kernels AS VARCHAR), ' kernels)') AS subject,
           count(*) AS occurrences, min(kernels) AS kernels, min(distinct_ops) AS distinct_ops,
           sum(gpu_time_ns) AS gpu_time_ns, sum(dram_bytes) AS dram_bytes,
           sum(largest_member_bytes) AS fused_dram_bytes,
           sum(fused_ns) AS fused_time_ns,
           CASE WHEN count(fused_ns) = count(*) THEN sum(gpu_time_ns - fused_ns) END AS est_time_saved_ns,
           min(peak_bw) AS peak_dram_bytes_per_s
    FROM estimated
    GROUP BY run_id, model, gpu, device_id, range_name, first_op, last_op, kernels
)
SELECT run_id, model, gpu, device_id, subject, occurrences, kernels, gpu_time_ns, dram_bytes, fused_dram_bytes,
       fused_time_ns,
       CASE WHEN est_time_saved_ns < 0 THEN 0.0 ELSE est_time_saved_ns END AS est_time_saved_ns,
       peak_dram_bytes_per_s,
       concat(CAST(occurrences AS VARCHAR), ' time(s) ', CAST(kernels AS VARCHAR), ' memory-bound kernels in a row (',
              CAST(distinct_ops AS VARCHAR), ' distinct ops): ', CAST(round(gpu_time_ns / 100) / 10 AS VARCHAR), ' us',
              CASE WHEN dram_bytes IS NOT NULL
                   THEN concat(', ', CAST(round(dram_bytes / 1e6, 2) AS VARCHAR), ' MB of DRAM traffic') ELSE '' END,
              CASE WHEN fused_time_ns IS NOT NULL
                   THEN concat('; ESTIMATE: one fused kernel moving the largest member''s bytes once (',
                               CAST(round(fused_dram_bytes / occurrences / 1e6, 2) AS VARCHAR), ' MB per chain) at ',
                               CAST(round(peak_dram_bytes_per_s / 1e12, 2) AS VARCHAR), ' TB/s would take ',
                               CAST(round(fused_time_ns / 1000, 1) AS VARCHAR), ' us in all')
                   ELSE '; no ncu counters for every member: bytes unknown, no estimate' END) AS evidence
FROM grouped
ORDER BY model, gpu, run_id, est_time_saved_ns DESC NULLS LAST, gpu_time_ns DESC, subject
