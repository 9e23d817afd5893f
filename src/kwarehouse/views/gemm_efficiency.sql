-- GEMM efficiency per model, GPU, op, M/N/K/batch, math dtype and kernel: launches, GPU time, TFLOP/s and % of the dtype's dense peak, shape pathologies (misaligned dims, fill of the last wave, tiny problems, short K loops), its floor (L2-resident on warm timelines) and an estimate of the time saved at the efficiency of the most similar well-shaped GEMM on the same GPU.
-- Computed from gemm_launch_groups (each partition's launches grouped by kernel, grid, block, shape and roof) and
-- partition_peaks, not launch by launch. Rows: the main kernel of each GEMM op (mm, addmm, bmm, baddbmm, matmul, linear, _scaled_mm, _grouped_mm;
-- normalize/op_flops.py), M/N/K/batch from the op's input shapes. time_basis 'timeline': the model has a
-- timeline on that GPU (PyTorch trace, nsys) and gpu_time_ns is its real GPU time; 'ncu replay': it has
-- none, and ncu's durations (serialised, cache-flushed replays) are the time; its ncu launches without
-- NVTX take their shapes from timeline_shape_flops, where every timeline on that GPU that ran the same
-- kernel, grid and block agrees on op, M, N, K and batch (shape_source 'op shapes (timeline)').
-- tflops and pct_of_peak count the op's math, 2·M·N·K·batch per launch (not the padded tiles the tensor
-- counters also count), against peak_tflops: the dense tensor peak of math_dtype on that GPU (timeline:
-- normalize/gpu_peaks.csv at the datasheet clock; ncu: its peak per cycle x the SM clock it measured).
-- The two peak bases apart: pct_of_peak_at_clock against the dtype's peak at the SM clock ncu measured
-- (ncu rows; NULL on a timeline, which measures no clock) and pct_of_datasheet_peak against the published
-- peak (gpu_peaks.csv); on power-throttled big GEMMs (1.4-1.6 GHz of 1.98) they differ by 20-25 %.
-- pct_of_peak is the one of them the row has (at clock on ncu rows, datasheet on timeline rows).
-- executed_flops_per_launch: what the tensor counters executed (whole tiles), from this row's ncu launches
-- or, for timeline rows, from ncu launches of the same kernel, grid, block and M/N/K/batch on that GPU;
-- padding_factor = executed / useful (2·M·N·K·batch): M = 1024 in 96-row tiles reads 1.03.
-- misaligned: M, N or K not a multiple of 8 (16 for fp8), which makes cuBLAS fall back to unaligned
-- kernels, never on a GEMV (gemv: M or N <= gemv_max_dim of bottleneck_thresholds; batch-1 decode is the
-- workload, judged on its memory roof: pct_of_dram_roof, the compulsory bytes over time x DRAM peak); evidence also names an older-architecture or align1 kernel (cutlass_75, s1688, h1688, align1)
-- on a newer GPU. wave_fill_pct: how full the last wave of blocks is, 100 * (waves - ceil(waves) + 1),
-- waves from ncu's launch__waves_per_sm where ncu profiled that kernel and grid (wave_basis 'ncu
-- waves_per_sm'), else grid_size / SMs (one block per SM: what warp-specialised Hopper GEMMs run;
-- persistent kernels such as nvjet launch one block per SM and always read 100). tiny: 2·M·N·K·batch
-- below tiny_flops or a dimension below tiny_dim (the limits CTE; documented constants).
-- floor_ns (floor_basis): the time the row cannot beat, max(memory_floor_ns, compute_floor_ns: its FLOPs at
-- achievable_tensor_pct of its dtype's dense peak; on a timeline, which measures no clock, of the peak at the
-- GPU's highest clock where ncu's tensor counters give the peak per cycle). memory_floor_ns is dram_floor_ns (A,
-- B and C once at the GPU's DRAM peak) except for an L2-resident working set (l2_resident: a timeline's warm
-- caches and bytes per launch within the L2 ncu reported, device__attribute_l2_cache_size, 50 MiB on the H100):
-- those bytes at the L2 peak ncu measured (derived__lts__lts2xbar_bytes.sum.peak_sustained x L2 clock, 8.55-8.76
-- TB/s on the corpus H100), NULL where no export on that GPU gave it. Why (GPU-PERF-NOTES "Bounding an
-- estimate": a floor is a time the kernel cannot beat): on the corpus timelines, kernels whose bytes fit in L2
-- ran faster than their bytes at the DRAM peak (24.2 us against a 30.2 us DRAM floor), so for them the DRAM
-- floor is no floor; ncu's cold-cache replays keep the DRAM floor. shape_class: 'GEMV', 'memory-bound shape'
-- (DRAM floor above compute floor: small K, skinny) or 'compute-bound shape'.
-- The K loop: k_tile and pipeline_stages from the kernel name (nvjet/CUTLASS '_<M>x<N>_<k>x<stages>_'),
-- k_iterations = ceil(K / k_tile) (64 where the name has none), short_k where the loop is at most
-- short_k_iterations (bottleneck_thresholds) or no longer than the pipeline's stages: prologue/epilogue-
-- dominated, not short of ILP. diagnosis: kwh's word for the row (GEMV, tiny, misaligned, short K loop,
-- memory-bound or compute-bound shape) where ncu's SOLBottleneck words mislead on Hopper GEMMs.
-- est_time_saved_ns (an ESTIMATE, estimate_basis says of what, never above gpu_time_ns - floor_ns): a GEMV's
-- time above its memory roof (its compulsory bytes at achievable_dram_pct of DRAM peak); a short-K GEMM's time
-- above its roof (its bytes at achievable_dram_pct of their level's peak, or its compute floor); any other row's FLOPs
-- at the efficiency (pct_of_peak) of the most similar well-shaped GEMM in the warehouse (same GPU, dtype and
-- shape class, aligned, not tiny, another shape or kernel, nearest FLOPs per launch on a log scale) minus its
-- actual time, floored at 0; the source GEMM is named in estimate_basis.
WITH limits AS (
    SELECT 1e8 AS tiny_flops,   -- 2·M·N·K below 0.1 GFLOP: ~0.1 µs at an H100's BF16 peak, less than a launch costs
           16 AS tiny_dim,      -- M, N or K below 16: most of a 64-wide tensor-core tile idles
           t.achievable_tensor_pct, t.achievable_dram_pct, t.gemv_max_dim, t.short_k_iterations
    FROM thresholds t
), parts AS (
    -- gemm_launch_groups (each partition's GEMM launches grouped by kernel, grid, block, shape and roof) read once
    SELECT * FROM gemm_launch_groups
), ncu_waves AS (
    SELECT model, gpu, kernel_id, grid_size, block_size, sum(waves_per_sm * waves_launches) / sum(waves_launches) AS waves_per_sm
    FROM parts
    WHERE time_basis = 'ncu replay'
    GROUP BY model, gpu, kernel_id, grid_size, block_size
    HAVING sum(waves_launches) > 0
), gpu_sms AS (
    -- the highest DRAM and L2 peaks ncu reported for the GPU (partition_peaks, over its partitions): the floor of
    -- a bound errs low, never high
    SELECT gpu, max(sm_count) AS sm_count, max(compute_capability) AS compute_capability,
           max(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s, max(peak_l2_bytes_per_s) AS peak_l2_bytes_per_s,
           -- the L2 capacity ncu reported for the GPU (device__attribute_l2_cache_size: 50 MiB on the H100 SXM)
           max(l2_cache_bytes) AS l2_cache_bytes
    FROM partition_peaks
    GROUP BY gpu
), timeline_gemms AS (
    SELECT model, gpu, op, m, n, k, batch, math_dtype, kernel_id, kernel_base, kernel_display, kernel_name, grid_size,
           block_size, launches, duration_ns, peak_flops_per_s, 'timeline' AS time_basis, 'op shapes' AS shape_source,
           CAST(NULL AS DOUBLE) AS clock_peak_flops_per_s, datasheet_peak_flops_per_s, executed_flops, executed_launches
    FROM parts
    WHERE time_basis = 'timeline'
), borrowed AS (
    -- shapes for ncu launches without NVTX of a model that has no timeline: the timelines of any model on
    -- the same GPU that ran this kernel with this grid and block, where all of them agree on every value
    -- (a kernel and grid fix M and N tiles, not K: only a unanimous K is taken)
    SELECT gpu, kernel_id, grid_size, block_size,
           CASE WHEN min(framework_op) = max(framework_op) THEN min(framework_op) END AS framework_op,
           CASE WHEN count(gemm_m) = count(*) AND min(gemm_m) = max(gemm_m) THEN min(gemm_m) END AS gemm_m,
           CASE WHEN count(gemm_n) = count(*) AND min(gemm_n) = max(gemm_n) THEN min(gemm_n) END AS gemm_n,
           CASE WHEN count(gemm_k) = count(*) AND min(gemm_k) = max(gemm_k) THEN min(gemm_k) END AS gemm_k,
           CASE WHEN count(gemm_batch) = count(*) AND min(gemm_batch) = max(gemm_batch) THEN min(gemm_batch) END AS gemm_batch,
           CASE WHEN min(math_dtype) = max(math_dtype) THEN min(math_dtype) END AS math_dtype
    FROM timeline_shape_flops
    GROUP BY gpu, kernel_id, grid_size, block_size
), ncu_gemms AS (
    -- ncu launches of models without a timeline on that GPU: their own op shapes, else those borrowed
    SELECT k.model, k.gpu,
           CASE WHEN k.m IS NOT NULL THEN k.op ELSE s.framework_op END AS op,
           CASE WHEN k.m IS NOT NULL THEN k.m ELSE s.gemm_m END AS m,
           CASE WHEN k.m IS NOT NULL THEN k.n ELSE s.gemm_n END AS n,
           CASE WHEN k.m IS NOT NULL THEN k.k ELSE s.gemm_k END AS k,
           CASE WHEN k.m IS NOT NULL THEN k.batch ELSE s.gemm_batch END AS batch,
           CASE WHEN k.math_dtype IS NULL OR k.math_dtype = 'unknown' THEN coalesce(s.math_dtype, k.math_dtype)
                ELSE k.math_dtype END AS math_dtype,
           k.kernel_id, k.kernel_base, k.kernel_display, k.kernel_name, k.grid_size, k.block_size, k.launches,
           k.duration_ns, k.peak_flops_per_s, 'ncu replay' AS time_basis,
           CASE WHEN k.m IS NOT NULL THEN 'op shapes' ELSE 'op shapes (timeline)' END AS shape_source,
           k.peak_flops_per_s AS clock_peak_flops_per_s, k.datasheet_peak_flops_per_s, k.executed_flops, k.executed_launches
    FROM parts k
    LEFT JOIN borrowed s
      ON s.gpu = k.gpu AND s.kernel_id = k.kernel_id
     AND s.grid_size = k.grid_size AND s.block_size = k.block_size
    WHERE k.time_basis = 'ncu replay' AND NOT k.model_has_timeline
      AND (k.m IS NOT NULL OR (s.gemm_m IS NOT NULL AND s.gemm_n IS NOT NULL AND s.gemm_k IS NOT NULL))
), gemm_launches AS (
    -- groups of launches alike in shape and roof (launches of them each)
    SELECT * FROM timeline_gemms
    UNION ALL
    SELECT * FROM ncu_gemms
), executed AS (
    -- tiles executed per launch for timeline rows: ncu launches of the same kernel, grid, block and shape
    SELECT gpu, kernel_id, grid_size, block_size, m, n, k, batch,
           sum(executed_flops) / sum(executed_launches) AS executed_flops
    FROM parts
    WHERE time_basis = 'ncu replay' AND m IS NOT NULL
    GROUP BY gpu, kernel_id, grid_size, block_size, m, n, k, batch
    HAVING sum(executed_launches) > 0
), roof_values AS (
    -- the roofs of gemm_launches with how many launches have each, for the medians below: ncu's roof at the clock
    -- it measured ('clock'), and the published one ('datasheet')
    SELECT 'clock' AS roof, gpu, math_dtype, peak_flops_per_s AS value, sum(launches) AS launches
    FROM gemm_launches WHERE peak_flops_per_s IS NOT NULL
    GROUP BY gpu, math_dtype, peak_flops_per_s
    UNION ALL
    SELECT 'datasheet' AS roof, gpu, math_dtype, datasheet_peak_flops_per_s AS value, sum(launches) AS launches
    FROM gemm_launches WHERE datasheet_peak_flops_per_s IS NOT NULL
    GROUP BY gpu, math_dtype, datasheet_peak_flops_per_s
), roof_medians AS (
    -- the median roof of each GPU and dtype over launches, as median() takes it: the middle value, or the mean
    -- of the two middle ones (positions floor and ceil of (n - 1) / 2, from 0, in value order)
    SELECT roof, gpu, math_dtype,
           (max(CASE WHEN position = 'low' THEN value END) + max(CASE WHEN position = 'high' THEN value END)) / 2
               AS peak_flops_per_s
    FROM (
        SELECT c.roof, c.gpu, c.math_dtype, c.value, p.position
        FROM (
            SELECT roof, gpu, math_dtype, value,
                   sum(launches) OVER (PARTITION BY roof, gpu, math_dtype ORDER BY value
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - launches AS first_index,
                   sum(launches) OVER (PARTITION BY roof, gpu, math_dtype ORDER BY value
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) - 1 AS last_index,
                   sum(launches) OVER (PARTITION BY roof, gpu, math_dtype) AS n
            FROM roof_values
        ) c
        JOIN (SELECT 'low' AS position UNION ALL SELECT 'high' AS position) p
          ON CASE WHEN p.position = 'low' THEN floor((c.n - 1) / 2.0) ELSE ceil((c.n - 1) / 2.0) END
             BETWEEN c.first_index AND c.last_index
    ) m
    GROUP BY roof, gpu, math_dtype
), dtype_roofs AS (
    -- a roof for rows whose kernel has none (shapes borrowed onto CUDA-core counters): the GPU's roof of
    -- that dtype seen on other launches
    SELECT gpu, math_dtype, peak_flops_per_s FROM roof_medians WHERE roof = 'clock'
), datasheet_roofs AS (
    -- the published roof of the dtype on that GPU for rows whose kernel has none (as dtype_roofs)
    SELECT gpu, math_dtype, peak_flops_per_s FROM roof_medians WHERE roof = 'datasheet'
), clock_roofs AS (
    -- the dense peak of each dtype at the GPU's highest SM clock (ncu's tensor peak per cycle x max_sm_clock_hz,
    -- where ncu ran the tensor roofline section: 540,672 BF16 FLOP/cycle x 1.98 GHz = 1,070 TFLOP/s on the H100
    -- SXM): a timeline measures no clock, and a GEMM boosting past the datasheet's clock runs above its datasheet
    -- peak (compiled_mlp's 4096 x 2048 x 8192 at 84 % of 989.5 TFLOP/s), so its compute floor takes this roof
    SELECT gpu, math_dtype, max(clock_peak_flops_per_s) AS peak_flops_per_s
    FROM partition_peaks
    GROUP BY gpu, math_dtype
), grouped AS (
    SELECT g.model, g.gpu, g.op, g.m, g.n, g.k, g.batch, g.math_dtype, g.kernel_id,
           min(g.kernel_base) AS kernel_base,
           min(g.kernel_display) AS kernel_display,
           min(g.kernel_name) AS kernel_name,
           CAST(sum(g.launches) AS BIGINT) AS launches,
           sum(g.duration_ns) AS gpu_time_ns,
           2.0 * g.m * g.n * g.k * g.batch AS flops_per_launch,
           -- the mean roof of the launches that have one (each group's roof times its launches)
           coalesce(sum(g.peak_flops_per_s * g.launches) / sum(CASE WHEN g.peak_flops_per_s IS NOT NULL THEN g.launches END),
                    max(r.peak_flops_per_s)) AS peak_flops_per_s,
           -- the roof of the compute floor: on a timeline (no clock measured) the higher of the datasheet peak and
           -- the peak at the GPU's highest clock; on ncu rows the peak at the clock ncu measured
           CASE WHEN min(g.time_basis) = 'timeline'
                THEN greatest(coalesce(sum(g.peak_flops_per_s * g.launches)
                                       / sum(CASE WHEN g.peak_flops_per_s IS NOT NULL THEN g.launches END),
                                       max(r.peak_flops_per_s)),
                              coalesce(max(c.peak_flops_per_s), 0))
                ELSE coalesce(sum(g.peak_flops_per_s * g.launches) / sum(CASE WHEN g.peak_flops_per_s IS NOT NULL THEN g.launches END),
                              max(r.peak_flops_per_s)) END AS floor_peak_flops_per_s,
           max(g.grid_size) AS grid_size,
           max(g.block_size) AS block_size,
           min(g.time_basis) AS time_basis,
           min(g.shape_source) AS shape_source,
           -- each peak basis over the launches that have it (FLOPs over peak-seconds, launch by launch)
           sum(2.0 * g.m * g.n * g.k * g.batch / g.clock_peak_flops_per_s * g.launches) AS clock_peak_s,
           sum(CASE WHEN g.clock_peak_flops_per_s > 0 THEN g.duration_ns END) AS clock_peak_ns,
           sum(2.0 * g.m * g.n * g.k * g.batch / coalesce(g.datasheet_peak_flops_per_s, d.peak_flops_per_s) * g.launches)
               AS datasheet_peak_s,
           sum(CASE WHEN coalesce(g.datasheet_peak_flops_per_s, d.peak_flops_per_s) > 0 THEN g.duration_ns END)
               AS datasheet_peak_ns,
           -- per launch its own executed FLOPs, else those of ncu launches of its kernel, grid, block and shape
           (coalesce(sum(g.executed_flops), 0)
            + coalesce(sum(CASE WHEN e.executed_flops IS NOT NULL THEN (g.launches - g.executed_launches) * e.executed_flops END), 0))
               / NULLIF(sum(g.executed_launches)
                        + coalesce(sum(CASE WHEN e.executed_flops IS NOT NULL THEN g.launches - g.executed_launches END), 0), 0)
               AS executed_flops_per_launch
    FROM gemm_launches g
    LEFT JOIN dtype_roofs r ON r.gpu = g.gpu AND r.math_dtype = g.math_dtype
    LEFT JOIN datasheet_roofs d ON d.gpu = g.gpu AND d.math_dtype = g.math_dtype
    LEFT JOIN clock_roofs c ON c.gpu = g.gpu AND c.math_dtype = g.math_dtype
    LEFT JOIN executed e
      ON e.gpu = g.gpu AND e.kernel_id = g.kernel_id AND e.grid_size = g.grid_size AND e.block_size = g.block_size
     AND e.m = g.m AND e.n = g.n AND e.k = g.k AND e.batch = g.batch
    GROUP BY g.model, g.gpu, g.op, g.m, g.n, g.k, g.batch, g.math_dtype, g.kernel_id
), judged AS (
    SELECT g.*,
           g.flops_per_launch * g.launches / NULLIF(g.gpu_time_ns, 0) / 1e3 AS tflops,
           100.0 * g.flops_per_launch * g.launches / NULLIF(g.gpu_time_ns * 1e-9 * g.peak_flops_per_s, 0) AS pct_of_peak,
           CASE WHEN g.math_dtype LIKE 'fp8%' THEN 16 ELSE 8 END AS alignment,
           s.sm_count,
           s.compute_capability,
           w.waves_per_sm AS ncu_waves_per_sm,
           coalesce(w.waves_per_sm, g.grid_size / NULLIF(s.sm_count, 0)) AS waves,
           CASE WHEN w.waves_per_sm IS NOT NULL THEN 'ncu waves_per_sm'
                WHEN s.sm_count IS NOT NULL THEN 'grid_size / sm_count (one block per SM assumed)' END AS wave_basis,
           regexp_extract(g.kernel_name, '(cutlass_75|cutlass_70|sm75|sm70|s1688|h1688|s884|h884|align1)', 1) AS fallback_marker,
           -- the K-loop: the k-tile and pipeline stages the kernel name carries (nvjet_sm90_tst_176x128_64x5_...,
           -- cutlass_80_..._128x32_8x5_...: tile M x N, then k-tile x stages); NULL where the name has none
           TRY_CAST(nullif(regexp_extract(g.kernel_name, '_[0-9]+x[0-9]+_([0-9]+)x([0-9]+)_', 1), '') AS INTEGER) AS k_tile,
           TRY_CAST(nullif(regexp_extract(g.kernel_name, '_[0-9]+x[0-9]+_([0-9]+)x([0-9]+)_', 2), '') AS INTEGER) AS pipeline_stages,
           l.short_k_iterations,
           (g.flops_per_launch < l.tiny_flops OR least(g.m, g.n, g.k) < l.tiny_dim) AS tiny,
           l.tiny_flops,
           l.tiny_dim,
           least(g.m, g.n) <= l.gemv_max_dim AS gemv,
           l.gemv_max_dim,
           l.achievable_tensor_pct,
           l.achievable_dram_pct,
           s.peak_dram_bytes_per_s,
           s.peak_l2_bytes_per_s,
           s.l2_cache_bytes,
           -- bytes the GEMM must move: A, B read once and C written once, at the math dtype's element size
           -- (an fp8 GEMM writing bf16 moves more: the floor errs low)
           CAST(g.batch AS DOUBLE) * (CAST(g.m AS DOUBLE) * g.k + CAST(g.k AS DOUBLE) * g.n + CAST(g.m AS DOUBLE) * g.n)
               * CASE WHEN g.math_dtype = 'fp64' THEN 8 WHEN g.math_dtype IN ('fp32', 'tf32') THEN 4
                      WHEN g.math_dtype IN ('bf16', 'fp16') THEN 2
                      WHEN g.math_dtype IN ('fp8_e4m3', 'fp8_e5m2', 'int8') THEN 1 END AS compulsory_bytes_per_launch
    FROM grouped g
    CROSS JOIN limits l
    LEFT JOIN gpu_sms s ON s.gpu = g.gpu
    LEFT JOIN ncu_waves w
      ON w.model = g.model AND w.gpu = g.gpu AND w.kernel_id = g.kernel_id
     AND w.grid_size = g.grid_size AND w.block_size = g.block_size
), k_loops AS (
    -- k-iterations per tile: ceil(K / k-tile), the k-tile from the name or 64 (the wgmma k-tile of every
    -- nvjet/CUTLASS sm90 kernel here) where the name has none. A K loop no longer than short_k_iterations, or
    -- than the pipeline the kernel fills before its first MMA (its stages), never reaches a steady state: the
    -- prologue (pipeline fill), epilogue and tail dominate, whatever ncu's latency/ILP wording says
    SELECT j.*,
           CAST(ceil(CAST(j.k AS DOUBLE) / coalesce(j.k_tile, 64)) AS BIGINT) AS k_iterations,
           ceil(CAST(j.k AS DOUBLE) / coalesce(j.k_tile, 64)) <= greatest(j.short_k_iterations, coalesce(j.pipeline_stages, 0))
               AS short_k,
           -- warm caches (a timeline) and bytes that fit in L2: they need not come from DRAM
           j.time_basis = 'timeline' AND j.compulsory_bytes_per_launch <= j.l2_cache_bytes AS l2_resident
    FROM judged j
), floored AS (
    -- the row's floor: the time it cannot beat, max(memory floor, compute floor: its FLOPs at
    -- achievable_tensor_pct of its dtype's dense peak, at the GPU's highest clock on a timeline). The memory
    -- floor: the compulsory bytes at the DRAM peak; for an L2-resident working set (l2_resident: a timeline,
    -- whose caches are warm, and bytes within the L2 ncu reported) at the L2 peak ncu measured, or none where no
    -- L2 peak is known (the DRAM floor would exceed the time such a kernel can take, a floor must err low)
    SELECT j.*,
           j.launches * j.compulsory_bytes_per_launch / NULLIF(j.peak_dram_bytes_per_s, 0) * 1e9 AS dram_floor_ns,
           CASE WHEN j.l2_resident THEN j.launches * j.compulsory_bytes_per_launch / NULLIF(j.peak_l2_bytes_per_s, 0) * 1e9
                ELSE j.launches * j.compulsory_bytes_per_launch / NULLIF(j.peak_dram_bytes_per_s, 0) * 1e9 END AS memory_floor_ns,
           j.launches * j.flops_per_launch / NULLIF(j.achievable_tensor_pct / 100.0 * j.floor_peak_flops_per_s, 0) * 1e9
               AS compute_floor_ns
    FROM k_loops j
), flagged AS (
    SELECT j.*,
           -- a GEMV's shape is its workload (batch-1 decode), not a misalignment
           NOT j.gemv AND (j.m % j.alignment <> 0 OR j.n % j.alignment <> 0 OR j.k % j.alignment <> 0) AS misaligned,
           greatest(coalesce(j.memory_floor_ns, 0), coalesce(j.compute_floor_ns, 0)) AS floor_ns,
           CASE WHEN j.memory_floor_ns IS NULL AND j.compute_floor_ns IS NULL AND j.l2_resident
                    THEN 'no floor known (bytes within the L2 of a warm timeline, no L2 peak; no compute peak)'
                WHEN j.memory_floor_ns IS NULL AND j.compute_floor_ns IS NULL THEN 'no floor known (no DRAM or compute peak)'
                WHEN coalesce(j.memory_floor_ns, 0) >= coalesce(j.compute_floor_ns, 0) AND j.l2_resident
                    THEN concat('L2: ', CAST(round(j.compulsory_bytes_per_launch * j.launches / 1e6, 2) AS VARCHAR),
                                ' MB compulsory at ', CAST(round(j.peak_l2_bytes_per_s / 1e12, 2) AS VARCHAR),
                                ' TB/s (L2-resident: ', CAST(round(j.compulsory_bytes_per_launch / 1e6, 2) AS VARCHAR),
                                ' MB a launch within the ', CAST(round(j.l2_cache_bytes / 1048576) AS VARCHAR), ' MiB L2, warm caches)')
                WHEN coalesce(j.memory_floor_ns, 0) >= coalesce(j.compute_floor_ns, 0)
                    THEN concat('DRAM: ', CAST(round(j.compulsory_bytes_per_launch * j.launches / 1e6, 2) AS VARCHAR),
                                ' MB compulsory at ', CAST(round(j.peak_dram_bytes_per_s / 1e12, 2) AS VARCHAR), ' TB/s')
                ELSE concat('compute: ', CAST(round(j.flops_per_launch * j.launches / 1e9, 3) AS VARCHAR), ' GFLOP at ',
                            CAST(j.achievable_tensor_pct AS VARCHAR), ' % of the ', coalesce(j.math_dtype, '?'),
                            ' dense peak', CASE WHEN j.floor_peak_flops_per_s > j.peak_flops_per_s
                                                THEN ' at the GPU''s highest clock' ELSE '' END,
                            CASE WHEN j.l2_resident AND j.peak_l2_bytes_per_s IS NULL
                                 THEN '; L2-resident bytes, no L2 peak known: no memory floor' ELSE '' END) END AS floor_basis,
           -- comparable shapes for a borrowed efficiency: GEMVs, shapes whose DRAM floor outweighs their compute
           -- floor (small K, skinny), and compute-bound shapes
           CASE WHEN j.gemv THEN 'GEMV'
                WHEN coalesce(j.dram_floor_ns, 0) > coalesce(j.compute_floor_ns, 0) THEN 'memory-bound shape'
                ELSE 'compute-bound shape' END AS shape_class,
           -- a GEMV's roof: its compulsory bytes at achievable_dram_pct of the DRAM peak (or its compute floor)
           CASE WHEN j.gemv THEN greatest(coalesce(j.dram_floor_ns * 100.0 / j.achievable_dram_pct, 0),
                                          coalesce(j.compute_floor_ns, 0)) END AS gemv_roof_ns,
           -- a short-K GEMM's roof: its bytes at achievable_dram_pct of the DRAM peak (at the L2 peak where they
           -- are L2-resident) or its compute floor, whichever is longer
           CASE WHEN j.short_k THEN greatest(coalesce(j.memory_floor_ns * 100.0 / j.achievable_dram_pct, 0),
                                             coalesce(j.compute_floor_ns, 0)) END AS short_k_roof_ns
    FROM floored j
), references_ AS (
    -- per shape and kernel, its two best models: the nearest reference of a shape is never more than one
    -- model's row away from them (only its own is excluded), and the join stays small however many models
    -- share a shape
    SELECT model, gpu, op, m, n, k, batch, math_dtype, kernel_id, kernel_base, pct_of_peak, flops_per_launch, shape_class
    FROM flagged
    WHERE NOT misaligned AND NOT tiny AND NOT gemv AND pct_of_peak IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY gpu, math_dtype, op, m, n, k, batch, kernel_id
                               ORDER BY pct_of_peak DESC, model) <= 2
), nearest AS (
    SELECT f.model, f.gpu, f.op, f.m, f.n, f.k, f.batch, f.math_dtype, f.kernel_id,
           r.model AS ref_model, r.op AS ref_op, r.m AS ref_m, r.n AS ref_n, r.k AS ref_k, r.batch AS ref_batch,
           r.kernel_base AS ref_kernel_base, r.pct_of_peak AS ref_pct_of_peak
    FROM flagged f
    LEFT JOIN references_ r
      ON r.gpu = f.gpu AND r.math_dtype = f.math_dtype AND r.shape_class = f.shape_class
     AND NOT (r.model = f.model AND r.m = f.m AND r.n = f.n AND r.k = f.k AND r.batch = f.batch
              AND r.kernel_id = f.kernel_id AND coalesce(r.op, '') = coalesce(f.op, ''))
    QUALIFY row_number() OVER (
        PARTITION BY f.model, f.gpu, f.op, f.m, f.n, f.k, f.batch, f.math_dtype, f.kernel_id
        ORDER BY abs(ln(r.flops_per_launch / f.flops_per_launch)), r.pct_of_peak DESC, r.model, r.kernel_id,
                 r.m, r.n, r.k, r.batch) = 1
)
SELECT
    f.model,
    f.gpu,
    f.op,
    f.m,
    f.n,
    f.k,
    f.batch,
    f.math_dtype,
    f.kernel_id,
    f.launches,
    f.gpu_time_ns,
    f.tflops,
    f.pct_of_peak,
    f.misaligned,
    100.0 * (f.waves - CAST(ceil(f.waves) AS DOUBLE) + 1) AS wave_fill_pct,
    -- never more than the time above the floor; a GEMV against its memory roof, the others at a borrowed efficiency
    CASE WHEN f.gemv THEN least(greatest(0.0, f.gpu_time_ns - f.gemv_roof_ns), greatest(0.0, f.gpu_time_ns - f.floor_ns))
         WHEN f.short_k AND NOT f.tiny THEN least(greatest(0.0, f.gpu_time_ns - f.short_k_roof_ns), greatest(0.0, f.gpu_time_ns - f.floor_ns))
         WHEN n.ref_pct_of_peak IS NOT NULL AND f.peak_flops_per_s IS NOT NULL
         THEN least(greatest(0.0, f.gpu_time_ns - f.flops_per_launch * f.launches
                                                  / (n.ref_pct_of_peak / 100.0 * f.peak_flops_per_s) * 1e9),
                    greatest(0.0, f.gpu_time_ns - f.floor_ns))
    END AS est_time_saved_ns,
    f.kernel_base,
    f.kernel_display,
    f.kernel_name,
    f.flops_per_launch,
    f.peak_flops_per_s / 1e12 AS peak_tflops,
    f.grid_size,
    f.block_size,
    f.sm_count,
    f.waves,
    f.wave_basis,
    f.tiny,
    concat_ws('; ',
        CASE WHEN f.misaligned THEN concat_ws(', ',
            CASE WHEN f.m % f.alignment <> 0 THEN concat('M = ', CAST(f.m AS VARCHAR)) END,
            CASE WHEN f.n % f.alignment <> 0 THEN concat('N = ', CAST(f.n AS VARCHAR)) END,
            CASE WHEN f.k % f.alignment <> 0 THEN concat('K = ', CAST(f.k AS VARCHAR)) END)
            || concat(' not a multiple of ', CAST(f.alignment AS VARCHAR)) END,
        CASE WHEN f.fallback_marker <> '' THEN concat('kernel name shows an unaligned or older-architecture kernel (',
            f.fallback_marker, ')', CASE WHEN f.compute_capability IS NOT NULL
            THEN concat(' on compute capability ', f.compute_capability) ELSE '' END) END,
        CASE WHEN f.gemv THEN concat('GEMV (M or N <= ', CAST(CAST(f.gemv_max_dim AS BIGINT) AS VARCHAR),
            '): judged on its memory roof, not its tensor peak') END,
        CASE WHEN f.tiny THEN concat('tiny: 2·M·N·K·batch = ', CAST(CAST(f.flops_per_launch AS BIGINT) AS VARCHAR),
            ' FLOPs (limit ', CAST(CAST(f.tiny_flops AS BIGINT) AS VARCHAR), ') or a dimension below ',
            CAST(f.tiny_dim AS VARCHAR)) END,
        CASE WHEN f.short_k THEN concat('short K loop: K = ', CAST(f.k AS VARCHAR), ' is ', CAST(f.k_iterations AS VARCHAR),
            ' k-iteration(s) of ', CAST(coalesce(f.k_tile, 64) AS VARCHAR),
            CASE WHEN f.k_tile IS NULL THEN ' (k-tile assumed)' ELSE '' END,
            CASE WHEN f.pipeline_stages IS NOT NULL THEN concat(' in a ', CAST(f.pipeline_stages AS VARCHAR), '-stage pipeline')
                 ELSE '' END, ': prologue/epilogue-dominated, not short of ILP') END,
        CASE WHEN f.waves IS NOT NULL AND f.waves - ceil(f.waves) + 1 < 0.5
            THEN concat('last wave ', CAST(CAST(round(100.0 * (f.waves - ceil(f.waves) + 1)) AS BIGINT) AS VARCHAR),
                        ' % full over ', CAST(CAST(ceil(f.waves) AS BIGINT) AS VARCHAR), ' wave(s)') END) AS evidence,
    CASE WHEN f.short_k AND NOT f.gemv AND NOT f.tiny
         THEN concat('ESTIMATE (upper bound): the short-K GEMM at its roof, its compulsory bytes at ',
                     CAST(f.achievable_dram_pct AS VARCHAR), ' % of the ', CASE WHEN f.l2_resident THEN 'L2' ELSE 'DRAM' END,
                     ' peak or its FLOPs at ', CAST(f.achievable_tensor_pct AS VARCHAR),
                     ' % of the dense peak, as one larger (batched or fused) GEMM without split-K would run; floor ',
                     CAST(round(f.floor_ns / 100) / 10 AS VARCHAR), ' us (', f.floor_basis, ')')
         WHEN f.gemv THEN concat('ESTIMATE: the GEMV at its memory roof, its compulsory bytes at ',
                                 CAST(f.achievable_dram_pct AS VARCHAR), ' % of the DRAM peak (now ',
                                 CAST(round(100.0 * f.compulsory_bytes_per_launch * f.launches
                                            / NULLIF(f.gpu_time_ns * 1e-9 * f.peak_dram_bytes_per_s, 0), 1) AS VARCHAR),
                                 ' %); floor ', CAST(round(f.floor_ns / 100) / 10 AS VARCHAR), ' us (', f.floor_basis, ')')
         WHEN n.ref_pct_of_peak IS NULL THEN concat('no well-shaped GEMM of this dtype and shape class (', f.shape_class,
                                                    ') on this GPU to compare with')
         ELSE concat('ESTIMATE: time at ', CAST(round(n.ref_pct_of_peak, 1) AS VARCHAR), ' % of peak, the efficiency of ',
                     n.ref_model, ' ', coalesce(n.ref_op, '?'), ' ', CAST(n.ref_m AS VARCHAR), 'x', CAST(n.ref_n AS VARCHAR),
                     'x', CAST(n.ref_k AS VARCHAR),
                     CASE WHEN n.ref_batch <> 1 THEN concat(' x', CAST(n.ref_batch AS VARCHAR)) ELSE '' END,
                     ' (', n.ref_kernel_base, '), the nearest well-shaped GEMM by FLOPs of its shape class (', f.shape_class,
                     ') on this GPU, capped at the time above its floor ', CAST(round(f.floor_ns / 100) / 10 AS VARCHAR),
                     ' us (', f.floor_basis, ')') END AS estimate_basis,
    f.time_basis,
    f.shape_source,
    f.gemv,
    f.shape_class,
    f.floor_ns,
    f.floor_basis,
    f.dram_floor_ns,
    f.compute_floor_ns,
    100.0 * f.compulsory_bytes_per_launch * f.launches / NULLIF(f.gpu_time_ns * 1e-9 * f.peak_dram_bytes_per_s, 0)
        AS pct_of_dram_roof,
    f.flops_per_launch AS useful_flops_per_launch,
    f.executed_flops_per_launch,
    f.executed_flops_per_launch / NULLIF(f.flops_per_launch, 0) AS padding_factor,
    100.0 * f.clock_peak_s / NULLIF(f.clock_peak_ns * 1e-9, 0) AS pct_of_peak_at_clock,
    100.0 * f.datasheet_peak_s / NULLIF(f.datasheet_peak_ns * 1e-9, 0) AS pct_of_datasheet_peak,
    f.k_tile,
    f.pipeline_stages,
    f.k_iterations,
    f.short_k,
    f.l2_resident,
    f.memory_floor_ns,
    -- kwh's word for the row where ncu's (latency, grid too small, L1) misleads on a Hopper GEMM
    CASE WHEN f.gemv THEN 'GEMV: judged on its memory roof'
         WHEN f.tiny THEN 'tiny problem: launch overhead'
         WHEN f.misaligned THEN 'misaligned dimensions: fallback kernel'
         WHEN f.short_k THEN 'short K loop: prologue/epilogue-dominated'
         WHEN f.shape_class = 'memory-bound shape' THEN 'memory-bound shape: judged against its memory floor'
         ELSE 'compute-bound shape' END AS diagnosis
FROM flagged f
LEFT JOIN nearest n
  ON n.model = f.model AND n.gpu = f.gpu AND n.kernel_id = f.kernel_id
 AND n.m = f.m AND n.n = f.n AND n.k = f.k AND n.batch = f.batch
 AND coalesce(n.op, '') = coalesce(f.op, '') AND coalesce(n.math_dtype, '') = coalesce(f.math_dtype, '')
