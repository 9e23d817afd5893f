-- Roofline per launch and per kernel identity on each GPU: FLOPs, bytes and arithmetic intensity at each memory level (DRAM, L2, L1), achieved FLOP/s, the compute roof of the launch's dtype and unit, the roof that limits it, % of that roof and the headroom.
-- FLOPs are kernels.flops: CUDA-core FLOPs from ncu's roofline counters plus tensor-core FLOPs from its
-- tensor roofline counters, or the op's FLOPs from its input shapes (kernels.flops_source says which);
-- for ncu launches without NVTX, the shape FLOPs of the same model's timeline launches of that kernel
-- and launch shape (view timeline_shape_flops; flops_source 'op shapes (timeline)', roof: the dtype's
-- datasheet peak that the timeline launches carry).
-- The compute roof (roof, peak_flops_per_s) is kernels.peak_flops_per_s: the dense tensor peak of the
-- launch's math dtype when it runs tensor work ('bf16 tensor', ...), else the CUDA-core FP64 or FP32
-- peak ('fp64 CUDA-core', 'fp32 CUDA-core'). The memory roofs are each level's bandwidth x the
-- launch's intensity at that level (FLOPs / bytes there): DRAM always, L2 and L1 where the export has
-- ncu's hierarchical roofline metrics (kernels.l2_bytes, l1_bytes and their peaks). roof_flops_per_s is
-- the lowest of the compute roof and the memory roofs present; limiter names it ('DRAM', 'L2', 'L1' or
-- the compute roof). ridge_intensity (= ridge_point) is the DRAM intensity where the compute roof meets
-- the DRAM roof; roof_side says on which side of it the launch sits. pct_of_roof = 100 x achieved /
-- roof_flops_per_s; headroom_x = roof_flops_per_s / achieved (2.0: the roofline allows twice the speed).
-- unplaced_reason says why a row has no limiter: 'no FLOP count' (flops NULL), 'no floating-point
-- work' (0 FLOPs counted), or 'tensor-core work not counted': a GEMM, conv or attention kernel whose
-- only FLOPs are the CUDA-core ones (ncu ran without SpeedOfLight_HierarchicalTensorRooflineChart and
-- no op shapes gave them), whose intensity and roofs would be those of its epilogue: left NULL. Kernel
-- level: sums over the launches that have FLOPs, the roof of the identity's longest launch, and the
-- average of its launches' peaks.
-- Useful beside executed work: useful_flops is the op's math from its input shapes (kernels.useful_flops:
-- 2·M·N·K, conv without channel padding, causal attention halved; else the same model's timeline launches
-- of that kernel and launch shape, timeline_shape_flops); tensor_flops what the tensor counters executed
-- (whole tiles, padded channels, masked blocks); padding_factor = tensor_flops / useful_flops over the
-- launches that have both (1.0: nothing wasted; GPT-2's QKV GEMM 1.03, a C=3 patch conv ~11).
-- pct_of_peak_at_clock and pct_of_datasheet_peak are on the useful basis (flops_basis 'useful' where
-- useful_flops is known, else 'executed': the counted FLOPs, which equal the useful ones for CUDA-core
-- code): 100 x FLOPs / duration / the roof's peak, the peak at the SM clock ncu measured
-- (peak_flops_per_s) or the published one (kernels.datasheet_peak_flops_per_s, gpu_peaks.csv; they
-- differ by 20-25 % on power-throttled GEMMs); executed_pct_of_peak_at_clock the same for tensor_flops.
-- A tensor kernel whose tensor work was not counted (unplaced 'tensor-core work not counted') has none
-- of them unless its useful FLOPs are known. pct_of_roof stays on the FLOPs the roofline places. Rows come unordered: at 10,000 runs the launch level is ~1M rows, and
-- sorting them all took most of the view's time; add the ORDER BY your question needs.
WITH borrowed AS (
    -- FLOPs of ncu launches without NVTX shapes (compiled_mlp), from the same model's timeline launches of
    -- the same kernel and launch shape (timeline_shape_flops: kept only where they all agree)
    SELECT model, gpu, kernel_id, grid_size, block_size, flops, flops_source, math_dtype
    FROM timeline_shape_flops
    WHERE flops IS NOT NULL
), dtype_roofs AS (
    -- their roof: the dense tensor peak of that dtype on that GPU as the timeline launches carry it
    -- (gpu_peaks.csv at the datasheet clock: a timeline has no measured clock)
    SELECT gpu, math_dtype, median(peak_flops_per_s) AS peak_flops_per_s
    FROM kernel_launches
    WHERE peak_flops_per_s IS NOT NULL
    GROUP BY gpu, math_dtype
), sourced AS (
    SELECT k.*, b.flops AS borrowed_flops, b.flops_source AS borrowed_source,
           CASE WHEN k.math_dtype IS NULL OR k.math_dtype = 'unknown' THEN coalesce(b.math_dtype, k.math_dtype)
                ELSE k.math_dtype END AS borrowed_dtype,
           -- the kernel's own FLOPs win where they count its tensor work (counters or NVTX shapes)
           b.flops IS NOT NULL AND NOT coalesce(k.flops_source = 'ncu tensor counters'
                                                OR k.flops_source LIKE 'op shapes%', false) AS use_borrowed,
           -- its own FLOPs from op shapes but no dtype (NVTX shapes carry none) and so no roof: the dtype
           -- (and its tensor roof) of the same model's timeline launches of that kernel, whose trace records it
           coalesce(k.flops_source LIKE 'op shapes%' AND k.peak_flops_per_s IS NULL
                    AND coalesce(k.math_dtype, 'unknown') = 'unknown' AND b.math_dtype <> 'unknown', false)
               AS dtype_from_timeline
    FROM kernels k
    LEFT JOIN borrowed b
      ON b.model = k.model AND b.gpu = k.gpu AND b.kernel_id = k.kernel_id
     AND b.grid_size = k.grid_size AND b.block_size = k.block_size
), launches AS (
    SELECT 'launch' AS level, s.run_id, s.launch_id, s.model, s.gpu, s.kernel_id, s.library, s.op_class,
           s.kernel_base,
           CASE WHEN s.use_borrowed OR s.dtype_from_timeline THEN s.borrowed_dtype ELSE s.math_dtype END AS math_dtype,
           CASE WHEN s.use_borrowed THEN s.borrowed_source ELSE s.flops_source END AS flops_source,
           CAST(1 AS BIGINT) AS launches, s.duration_ns,
           CASE WHEN s.use_borrowed THEN s.borrowed_flops ELSE s.flops END AS flops,
           s.dram_bytes, s.l2_bytes, s.l1_bytes,
           CASE WHEN s.use_borrowed OR s.dtype_from_timeline THEN r.peak_flops_per_s
                -- FLOPs from op shapes with no dtype known (a cuDNN "f16" kernel under NVTX ranges, which
                -- carry shapes but no dtypes): no roof at all rather than the CUDA-core one
                WHEN s.flops_source LIKE 'op shapes%' THEN s.peak_flops_per_s
                -- runs an older kwh wrote have no peak_flops_per_s until `kwh renormalize`: the CUDA-core roof
                ELSE coalesce(s.peak_flops_per_s,
                              CASE WHEN coalesce(s.flops_fp64, 0) > coalesce(s.flops_fp32, 0) + coalesce(s.flops_fp16, 0)
                                   THEN s.peak_fp64_flops_per_s ELSE s.peak_fp32_flops_per_s END) END AS peak_flops_per_s,
           s.peak_fp32_flops_per_s, s.peak_fp64_flops_per_s,
           s.peak_dram_bytes_per_s, s.peak_l2_bytes_per_s, s.peak_l1_bytes_per_s,
           coalesce(s.useful_flops, s.borrowed_flops) AS useful_flops,
           CASE WHEN s.flops_source = 'ncu tensor counters' THEN s.tensor_flops END AS tensor_flops,
           CASE WHEN s.use_borrowed OR s.dtype_from_timeline THEN r.peak_flops_per_s ELSE s.datasheet_peak_flops_per_s END
               AS datasheet_peak_flops_per_s
    FROM sourced s
    LEFT JOIN dtype_roofs r ON r.gpu = s.gpu AND r.math_dtype = s.borrowed_dtype
), named AS (
    SELECT *,
           CASE WHEN peak_flops_per_s IS NULL THEN NULL
                -- a GEMM, conv or attention launch with no FLOP count and no dtype known to be FP32/FP64 (a
                -- timeline summary's kernel): its unit is unknown, so no roof rather than the CUDA-core one
                WHEN flops IS NULL AND op_class IN ('gemm', 'conv', 'attention')
                     AND coalesce(math_dtype, 'unknown') NOT IN ('fp32', 'fp64') THEN NULL
                WHEN peak_flops_per_s = peak_fp64_flops_per_s THEN 'fp64 CUDA-core'
                WHEN peak_flops_per_s = peak_fp32_flops_per_s THEN 'fp32 CUDA-core'
                ELSE coalesce(math_dtype, 'unknown') || ' tensor' END AS roof,
           coalesce(op_class IN ('gemm', 'conv', 'attention') AND flops_source = 'ncu CUDA-core counters'
                    AND coalesce(math_dtype, 'unknown') NOT IN ('fp32', 'fp64'), false) AS tensor_uncounted
    FROM launches
), launch_rows AS (
    SELECT level, run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base, math_dtype,
           flops_source, roof, tensor_uncounted, launches, duration_ns, flops, dram_bytes, l2_bytes, l1_bytes,
           -- the bytes the intensities divide by: those of launches whose FLOPs were counted
           CASE WHEN NOT tensor_uncounted THEN dram_bytes END AS counted_dram_bytes,
           CASE WHEN NOT tensor_uncounted THEN l2_bytes END AS counted_l2_bytes,
           CASE WHEN NOT tensor_uncounted THEN l1_bytes END AS counted_l1_bytes,
           flops / NULLIF(duration_ns * 1e-9, 0) AS achieved_flops_per_s,
           peak_flops_per_s, peak_dram_bytes_per_s, peak_l2_bytes_per_s, peak_l1_bytes_per_s,
           useful_flops, tensor_flops,
           -- the efficiency basis: useful FLOPs, else the counted ones unless they miss the tensor work
           CASE WHEN useful_flops IS NOT NULL THEN 'useful' WHEN NOT tensor_uncounted AND flops IS NOT NULL
                THEN 'executed' END AS flops_basis,
           coalesce(useful_flops, CASE WHEN NOT tensor_uncounted THEN flops END) AS basis_flops,
           datasheet_peak_flops_per_s
    FROM named
), identities AS (
    -- an identity is placed by its launches whose FLOPs were counted (a GEMM profiled with and
    -- without the tensor roofline section keeps the counted runs)
    SELECT 'kernel' AS level, CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS BIGINT) AS launch_id,
           CAST(NULL AS VARCHAR) AS model, gpu, kernel_id, library, op_class, min(kernel_base) AS kernel_base,
           -- the value of the longest launch that has one (for the source and roof: of the launches whose FLOPs
           -- were counted); among launches equally long (a run profiled twice), the first by name, so that every
           -- computation gives the same row
           min(CASE WHEN duration_ns = longest_dtype_ns THEN math_dtype END) AS math_dtype,
           min(CASE WHEN counted_ns = longest_source_ns THEN flops_source END) AS flops_source,
           min(CASE WHEN counted_ns = longest_roof_ns THEN roof END) AS roof,
           bool_and(tensor_uncounted) AS tensor_uncounted, count(*) AS launches,
           CAST(sum(duration_ns) AS DOUBLE) AS duration_ns,
           sum(CASE WHEN NOT tensor_uncounted THEN flops END) AS flops,
           sum(dram_bytes) AS dram_bytes, sum(l2_bytes) AS l2_bytes, sum(l1_bytes) AS l1_bytes,
           sum(CASE WHEN counted THEN dram_bytes END) AS counted_dram_bytes,
           sum(CASE WHEN counted THEN l2_bytes END) AS counted_l2_bytes,
           sum(CASE WHEN counted THEN l1_bytes END) AS counted_l1_bytes,
           sum(CASE WHEN NOT tensor_uncounted THEN flops END)
               / NULLIF(sum(CASE WHEN counted THEN duration_ns END) * 1e-9, 0) AS achieved_flops_per_s,
           coalesce(avg(CASE WHEN NOT tensor_uncounted THEN peak_flops_per_s END), avg(peak_flops_per_s))
               AS peak_flops_per_s,
           avg(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s,
           avg(peak_l2_bytes_per_s) AS peak_l2_bytes_per_s, avg(peak_l1_bytes_per_s) AS peak_l1_bytes_per_s,
           sum(useful_flops) AS useful_flops, sum(tensor_flops) AS tensor_flops,
           CASE WHEN count(useful_flops) = count(*) THEN 'useful' WHEN count(useful_flops) > 0 THEN 'useful + executed'
                WHEN count(basis_flops) > 0 THEN 'executed' END AS flops_basis,
           sum(basis_flops) AS basis_flops,
           avg(datasheet_peak_flops_per_s) AS datasheet_peak_flops_per_s,
           -- the per-launch sums the two peak bases and the padding factor need (launches with both terms)
           sum(basis_flops / peak_flops_per_s) AS basis_peak_s, sum(CASE WHEN basis_flops / peak_flops_per_s
               IS NOT NULL THEN duration_ns END) AS basis_peak_ns,
           sum(basis_flops / datasheet_peak_flops_per_s) AS basis_datasheet_s,
           sum(CASE WHEN basis_flops / datasheet_peak_flops_per_s IS NOT NULL THEN duration_ns END) AS basis_datasheet_ns,
           sum(tensor_flops / peak_flops_per_s) AS executed_peak_s,
           sum(CASE WHEN tensor_flops / peak_flops_per_s IS NOT NULL THEN duration_ns END) AS executed_peak_ns,
           sum(CASE WHEN useful_flops > 0 THEN tensor_flops END) AS padded_tensor_flops,
           sum(CASE WHEN tensor_flops IS NOT NULL THEN useful_flops END) AS padded_useful_flops
    FROM (SELECT *, flops IS NOT NULL AND NOT tensor_uncounted AS counted,
                 max(CASE WHEN math_dtype IS NOT NULL THEN duration_ns END) OVER identity AS longest_dtype_ns,
                 max(CASE WHEN flops_source IS NOT NULL THEN counted_ns END) OVER identity AS longest_source_ns,
                 max(CASE WHEN roof IS NOT NULL THEN counted_ns END) OVER identity AS longest_roof_ns
          FROM (SELECT *, CASE WHEN NOT tensor_uncounted THEN duration_ns END AS counted_ns FROM launch_rows) AS timed
          WINDOW identity AS (PARTITION BY gpu, kernel_id, library, op_class)) AS counted_launches
    GROUP BY gpu, kernel_id, library, op_class
), launch_level AS (
    SELECT *,
           basis_flops / peak_flops_per_s AS basis_peak_s,
           CASE WHEN basis_flops / peak_flops_per_s IS NOT NULL THEN duration_ns END AS basis_peak_ns,
           basis_flops / datasheet_peak_flops_per_s AS basis_datasheet_s,
           CASE WHEN basis_flops / datasheet_peak_flops_per_s IS NOT NULL THEN duration_ns END AS basis_datasheet_ns,
           tensor_flops / peak_flops_per_s AS executed_peak_s,
           CASE WHEN tensor_flops / peak_flops_per_s IS NOT NULL THEN duration_ns END AS executed_peak_ns,
           CASE WHEN useful_flops > 0 THEN tensor_flops END AS padded_tensor_flops,
           CASE WHEN tensor_flops IS NOT NULL THEN useful_flops END AS padded_useful_flops
    FROM launch_rows
), both_levels AS (
    -- identities lists its columns in launch_level's order (launch_rows, then the per-launch sums)
    SELECT * FROM launch_level
    UNION ALL
    SELECT * FROM identities
), intensities AS (
    SELECT *,
           CASE WHEN NOT tensor_uncounted THEN flops / NULLIF(counted_dram_bytes, 0) END AS dram_intensity,
           CASE WHEN NOT tensor_uncounted THEN flops / NULLIF(counted_l2_bytes, 0) END AS l2_intensity,
           CASE WHEN NOT tensor_uncounted THEN flops / NULLIF(counted_l1_bytes, 0) END AS l1_intensity,
           peak_flops_per_s / NULLIF(peak_dram_bytes_per_s, 0) AS ridge_point
    FROM both_levels
), memory_roofs AS (
    SELECT *,
           dram_intensity * peak_dram_bytes_per_s AS dram_roof_flops_per_s,
           l2_intensity * peak_l2_bytes_per_s AS l2_roof_flops_per_s,
           l1_intensity * peak_l1_bytes_per_s AS l1_roof_flops_per_s
    FROM intensities
), roofs AS (
    SELECT *,
           CASE WHEN flops IS NOT NULL AND NOT tensor_uncounted
                THEN least(peak_flops_per_s, dram_roof_flops_per_s, l2_roof_flops_per_s, l1_roof_flops_per_s)
                END AS roof_flops_per_s
    FROM memory_roofs
)
SELECT level, run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base, launches, duration_ns,
       flops, dram_bytes, dram_intensity AS arithmetic_intensity, achieved_flops_per_s, peak_flops_per_s,
       peak_dram_bytes_per_s, ridge_point, roof_flops_per_s,
       achieved_flops_per_s / NULLIF(roof_flops_per_s, 0) AS fraction_of_roof,
       CASE WHEN dram_intensity IS NULL OR ridge_point IS NULL THEN NULL
            WHEN dram_intensity < ridge_point THEN 'memory' ELSE 'compute' END AS roof_side,
       math_dtype, flops_source, CASE WHEN NOT tensor_uncounted THEN roof END AS roof,
       ridge_point AS ridge_intensity,
       l2_bytes, l1_bytes, dram_intensity, l2_intensity, l1_intensity,
       peak_l2_bytes_per_s, peak_l1_bytes_per_s,
       CASE WHEN roof_flops_per_s IS NULL OR NOT flops > 0 THEN NULL
            WHEN roof_flops_per_s = peak_flops_per_s THEN roof
            WHEN roof_flops_per_s = dram_roof_flops_per_s THEN 'DRAM'
            WHEN roof_flops_per_s = l2_roof_flops_per_s THEN 'L2'
            WHEN roof_flops_per_s = l1_roof_flops_per_s THEN 'L1' END AS limiter,
       100 * achieved_flops_per_s / NULLIF(roof_flops_per_s, 0) AS pct_of_roof,
       roof_flops_per_s / NULLIF(achieved_flops_per_s, 0) AS headroom_x,
       CASE WHEN tensor_uncounted THEN 'tensor-core work not counted'
            WHEN flops IS NULL THEN 'no FLOP count'
            WHEN flops = 0 THEN 'no floating-point work'
            WHEN peak_flops_per_s IS NULL THEN 'math dtype unknown: no roof' END AS unplaced_reason,
       useful_flops, tensor_flops, padded_tensor_flops / NULLIF(padded_useful_flops, 0) AS padding_factor,
       flops_basis,
       100 * basis_peak_s / NULLIF(basis_peak_ns * 1e-9, 0) AS pct_of_peak_at_clock,
       100 * basis_datasheet_s / NULLIF(basis_datasheet_ns * 1e-9, 0) AS pct_of_datasheet_peak,
       100 * executed_peak_s / NULLIF(executed_peak_ns * 1e-9, 0) AS executed_pct_of_peak_at_clock,
       datasheet_peak_flops_per_s
FROM roofs
