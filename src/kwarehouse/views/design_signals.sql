-- Design signals for GPU architects and library authors, each with its subject, evidence, models, GPU time, an estimated time saved (with its assumption) and the fix: misaligned GEMMs on fallback kernels, GEMM/conv/attention at low tensor efficiency, DRAM-bound kernels failing the reuse test, truly register-limited occupancy, grids too small to fill the GPU, partial last waves, Ampere (sm80) kernels running on Hopper, short-K GEMMs, GEMMs sharing an input (gate/up, q/k/v), fusable chains of small kernels and launch-bound runs; plus the seed's four signals as it computed them (source 'seed heuristic').
-- Computed fleet-wide from partition-local stages (design_signal_parts: each partition's launches per signal and
-- kernel with their sums; shared_input_gemms; partition_kernels; partition_peaks), so that a commit recomputes
-- the launch work of the partitions it changed only. Cut-offs come from bottleneck_thresholds. time_basis says what gpu_time_ns is: 'timeline' (real GPU time
-- of the model's nsys/PyTorch runs) or 'ncu replay' (ncu's serialised replays of the profiled launches; small
-- kernels read 1.6-2.5x long), one row per basis. The signals judged on ncu launches weigh each launch by the
-- real time it stands for where the model has a timeline on that GPU: the kernel's timeline time
-- (kernel_time) spread over its ncu launches in proportion to their durations (launches likewise), so
-- gpu_time_ns and est_time_saved_ns are real time and a kernel the timeline never ran weighs nothing. gpu_time_pct is the
-- share of all GPU time of that basis in the warehouse. est_time_saved_ns is an ESTIMATE under the row's
-- assumption, never a measurement; NULL where no defensible estimate exists (the seed's signals).
-- Signals and their evidence:
--   misaligned GEMM dims → fallback kernel: gemm_efficiency rows with misaligned M/N/K, tiny problems left out
--       (its est_time_saved_ns: the FLOPs at the efficiency of the most similar well-shaped GEMM);
--   low tensor efficiency: GEMMs of gemm_efficiency below tensor_efficiency_low_pct of the dense peak (its
--       estimate); convolutions, attention and GEMMs without a framework op from ncu: the tensor FLOPs' share of
--       peak where ncu counted them, else the tensor pipe's elapsed busy share (halved for mma.sync kernels,
--       which keep the pipe busy twice as long per FLOP), saved = time x (1 - efficiency / target), target the
--       efficiency well-shaped kernels of that class reach here (tensor_efficiency_target_pct); problems below
--       trivial_gemm_flops (K = 1, N = 4 GEMMs) are never flagged;
--   DRAM-bound with reuse failure: cache-inefficient launches (bottleneck_class), saved = time x (1 - compulsory /
--       DRAM bytes): the same bandwidth moving only the compulsory bytes;
--   register-limited occupancy: registers strictly the lowest block limit, theoretical occupancy < 100 %, not
--       warp-specialised, and the launch latency-bound or occupancy-limited (where more resident warps would hide
--       latency; a kernel saturating a unit gains nothing from them); saved = ncu's own TheoreticalOccupancy
--       estimate (global speedup) where it made one;
--   grid too small: grid-too-small launches (< 1 wave, not launch-overhead) whose blocks cover fewer than
--       full_wave_pct of the SMs (128 tiles on 132 SMs fill the GPU); saved = time x (1 - min(blocks, SMs) / SMs):
--       the same work spread over the idle SMs at the same per-SM speed (an upper bound);
--   partial last wave: launches of more than one wave whose last wave is less than full_wave_pct full, not
--       DRAM-bound ones (their last wave gets the bandwidth the idle SMs leave); saved = the real tail,
--       time x (ceil(w) - w) / ceil(w) for w waves per SM, never ncu's "may cost up to";
--   GEMV below its memory roof: GEMVs (M or N <= gemv_max_dim) of gemm_efficiency moving their compulsory bytes
--       at less than dram_roof_pct of DRAM peak (its estimate: the GEMV at achievable_dram_pct); a GEMV is never a
--       misaligned or low-tensor-efficiency GEMM;
--   pre-Hopper kernel on Hopper (sm_90): kernel_time rows on a GPU of compute capability 9.x whose name matches
--       pre_hopper_kernels.csv (FlashAttention-2, cuBLAS and cuDNN sm80 builds); saved = time x (1 - 1/speedup) where
--       a published speed of the Hopper path exists (the row cites it), else no estimate; the fix (signal_fixes.csv,
--       fix_key = the kernel family) names the Hopper path;
--   short-K GEMM (prologue/epilogue-dominated): gemm_efficiency rows with short_k (a K loop no longer than
--       short_k_iterations or the kernel's pipeline stages), not tiny, not GEMVs, aligned; its estimate (the GEMM at
--       its memory or compute roof), fix: a larger batched or fused GEMM without split-K; never 'low tensor
--       efficiency' (ncu calls such GEMMs latency-bound, fix more ILP);
--   GEMMs sharing an input (fusion candidate): on a timeline, GEMMs back to back on one stream (at most
--       neighbour_kernels_between kernels apart) with the same op, M, K, batch and dtype: the same input A (Llama's
--       q/k/v projections; gate_proj, SiLU, up_proj); saved = each shorter member's re-read of A at the DRAM peak,
--       never more than its time above its floor; the launch gaps it also removes are idle time, evidence only;
--   fusable chain of small kernels / launch-bound run: fusion_candidates and launch_bound (timeline), averaged
--       over the model's timeline runs.
-- Bounds (issue 33): a kernel-time estimate is at most the row's time above its floor (floor_ns, floor_basis:
-- max of the DRAM floor, its compulsory bytes at the DRAM peak, and the compute floor, its FLOPs at
-- achievable_tensor_pct of its tensor roof or achievable_cuda_core_pct of its CUDA-core roof; on timeline time,
-- whose caches are warm and whose clock is unknown, bytes within the L2 at the L2 peak ncu measured (none where
-- no export gave it) and the tensor roof at the GPU's highest clock, as gemm_efficiency says why; bound_ns =
-- gpu_time_ns - floor_ns; est_alone_ns is the estimate so bounded). Several signals on one kernel share its
-- bound: combined 1 - prod(1 - s_i) of the kernel's time (s_i: each signal's saving over that time), each
-- keeping its part in proportion (one fix leaves the others' share of the remaining time; a plain sum passed
-- 100 %). A model's kernel-time savings (a row of several models split by their time in its kernel) never
-- exceed its GPU time: past it, all its rows shrink by one factor (the evidence says so). basis: 'kernel
-- time', or for launch-bound runs 'idle time without the profiler' / 'idle time measured under the profiler,
-- an upper bound' (launch_bound), a separate basis never added to kernel time.
-- fix comes from signal_fixes.csv by the signal's fix_key and the stack its models share (run_framework:
-- PyTorch, XLA, CuPy), else the row for any stack: no torch.compile for a CUDA C, OpenMP or CuPy application.
-- Where that fix edits the kernel's code or algorithm (edits_kernel) and a library owns the kernel (a library_fixes
-- row for its library, implementation, op class and stack), the fix is that library's knob instead.
WITH kernel_time_rows AS (
    -- kernel_time and gemm_efficiency read once each: DuckDB computes a CTE read several times once, where
    -- each of the 5 and 4 reads of the views themselves computed them again (0.90 CPU-s against 1.72 on the
    -- sample runs, 8.0 against 19.0 on a 300-run fleet; bench/RESULTS.md)
    SELECT * FROM kernel_time
), gemm_efficiency_rows AS (
    SELECT * FROM gemm_efficiency
), signal_parts AS (
    -- design_signal_parts, partition_peaks and partition_kernels read once each (as the two above)
    SELECT * FROM design_signal_parts
), peaks AS (
    SELECT * FROM partition_peaks
), kernel_counts AS (
    SELECT * FROM partition_kernels
), model_stack AS (
    -- each model's stack (run_framework), NULL where its runs disagree or nothing says
    SELECT model, CASE WHEN count(DISTINCT coalesce(framework, '?')) = 1 THEN min(framework) END AS framework
    FROM run_framework GROUP BY model
), gpu_l2 AS (
    -- per GPU (partition_peaks, over its partitions): the L2 capacity (device__attribute_l2_cache_size, 50 MiB on
    -- the H100 SXM) and the highest L2 peak ncu measured (8.55-8.76 TB/s on the corpus H100s; NULL where no export
    -- had the hierarchical roofline); only GPUs whose runs reported the L2 capacity
    SELECT gpu, max(l2_cache_bytes) AS l2_cache_bytes, max(peak_l2_bytes_per_s) AS peak_l2_bytes_per_s
    FROM peaks GROUP BY gpu HAVING max(l2_cache_bytes) IS NOT NULL
), launches AS (
    -- design_signal_parts: each partition's launches of a kernel that a signal judges, with their sums. A
    -- timeline row's floor is its launches' floor in a timeline (warm caches, no clock measured): bytes that fit in
    -- L2 at the L2 peak (no memory floor where no L2 peak is known: the DRAM floor exceeds what such a kernel
    -- takes, and a floor must err low), the FLOPs at the roof of the GPU's highest clock; an ncu replay row's
    -- floor is summed there (its launches' own DRAM and compute floors). top_floor_ns and top_floor_basis: the
    -- highest launch floor of the row and its basis
    SELECT f.*, ms.framework,
           CASE WHEN f.time_basis = 'timeline' THEN f.warm_floor_ns * f.launch_scale * f.launches ELSE f.floor_ns END AS real_floor_ns,
           CASE WHEN f.time_basis = 'timeline' THEN f.warm_floor_ns * f.launch_scale ELSE f.max_floor_ns END AS top_floor_ns,
           CASE WHEN f.time_basis = 'timeline' THEN f.warm_floor_basis ELSE f.floor_basis END AS top_floor_basis
    FROM (
        SELECT w.*,
               greatest(coalesce(CASE WHEN w.l2_resident THEN w.l2_floor_ns ELSE w.dram_floor_ns END, 0),
                        coalesce(w.warm_compute_floor_ns, 0)) AS warm_floor_ns,
               CASE WHEN w.dram_floor_ns IS NULL AND w.warm_compute_floor_ns IS NULL THEN 'none known'
                    WHEN w.l2_resident AND w.l2_floor_ns IS NULL AND w.warm_compute_floor_ns IS NULL
                    THEN 'none known: bytes within the L2 (warm caches), no L2 peak known'
                    WHEN coalesce(CASE WHEN w.l2_resident THEN w.l2_floor_ns ELSE w.dram_floor_ns END, 0)
                         >= coalesce(w.warm_compute_floor_ns, 0)
                    THEN CASE WHEN w.l2_resident THEN 'L2: compulsory bytes within the L2 (warm caches) at the L2 peak'
                              ELSE 'DRAM: compulsory bytes at the DRAM peak' END
                    ELSE concat('compute: FLOPs at ', CAST(w.achievable_pct AS VARCHAR), ' % of the ', w.roof, ' peak',
                                CASE WHEN w.clock_scaled THEN ' at the GPU''s highest clock' ELSE '' END,
                                CASE WHEN w.l2_resident AND w.l2_floor_ns IS NULL
                                     THEN '; bytes within the L2, no L2 peak known: no memory floor' ELSE '' END) END AS warm_floor_basis
        FROM (
            SELECT p.*, p.floor_bytes / NULLIF(g.peak_l2_bytes_per_s, 0) * 1e9 AS l2_floor_ns,
                   coalesce(p.floor_bytes <= g.l2_cache_bytes, false) AS l2_resident
            FROM signal_parts p LEFT JOIN gpu_l2 g ON g.gpu = p.gpu
        ) w
    ) f
    LEFT JOIN model_stack ms ON ms.model = f.model
), totals AS (
    SELECT 'ncu replay' AS time_basis, CAST(sum(ncu_ns) AS DOUBLE) AS total_ns FROM kernel_counts
    UNION ALL
    SELECT 'timeline', CAST(sum(gpu_time_ns) AS DOUBLE) FROM kernel_time_rows WHERE time_basis = 'timeline'
), gemm_signal_rows AS (
    -- the gemm_efficiency rows each GEMM signal judges (a row may serve several): misaligned dims (not tiny);
    -- low tensor efficiency (aligned, not tiny, not a GEMV, not short K, below tensor_efficiency_low_pct, not
    -- trivial); a GEMV with a saving (flagged below dram_roof_pct after grouping); a short K loop (not tiny, not a
    -- GEMV, aligned) with a saving
    SELECT g.*, 'misaligned GEMM dims → fallback kernel' AS signal, 'misaligned GEMM' AS fix_key
    FROM gemm_efficiency_rows g WHERE g.misaligned AND NOT g.tiny
    UNION ALL
    SELECT g.*, 'GEMM/conv/attention at low tensor efficiency', 'low-efficiency GEMM op'
    FROM gemm_efficiency_rows g CROSS JOIN thresholds t
    WHERE NOT g.misaligned AND NOT g.tiny AND NOT g.gemv AND NOT g.short_k AND g.pct_of_peak < t.tensor_efficiency_low_pct
          AND g.flops_per_launch >= t.trivial_gemm_flops
    UNION ALL
    SELECT g.*, 'GEMV below its memory roof', 'GEMV below memory roof'
    FROM gemm_efficiency_rows g WHERE g.gemv AND g.est_time_saved_ns > 0
    UNION ALL
    -- GEMMs whose K loop is too short to reach a steady state (gemm_efficiency.short_k): prologue/epilogue-
    -- dominated, whatever ncu's latency/ILP words say; the estimate is the GEMM at its memory or compute roof
    SELECT g.*, 'short-K GEMM (prologue/epilogue-dominated)', 'short-K GEMM'
    FROM gemm_efficiency_rows g WHERE g.short_k AND NOT g.tiny AND NOT g.gemv AND NOT g.misaligned AND g.est_time_saved_ns > 0
), gemm_signals AS (
    -- one row per signal, op shape and kernel, over its models
    SELECT g.signal,
           concat(min(g.op), ' [', CAST(g.m AS VARCHAR), ', ', CAST(g.n AS VARCHAR), ', ', CAST(g.k AS VARCHAR), '] ',
                  min(g.math_dtype), ' on ', coalesce(min(g.kernel_display), min(g.kernel_base))) AS subject,
           g.kernel_id, 'cuBLAS' AS library, 'gemm' AS op_class,
           count(DISTINCT g.model) AS models, array_to_string(list_sort(list(DISTINCT g.model)), ',') AS model_list,
           CAST(sum(g.launches) AS BIGINT) AS launches, sum(g.gpu_time_ns) AS gpu_time_ns,
           CAST(round(sum(g.pct_of_peak * g.gpu_time_ns) / NULLIF(sum(g.gpu_time_ns), 0), 1) AS VARCHAR) AS pct_of_peak,
           sum(g.pct_of_dram_roof * g.gpu_time_ns) / NULLIF(sum(g.gpu_time_ns), 0) AS pct_of_dram_roof,
           min(g.math_dtype) AS math_dtype, CAST(round(min(g.wave_fill_pct), 0) AS VARCHAR) AS wave_fill,
           min(g.evidence) AS gemm_evidence,
           sum(g.est_time_saved_ns) AS est_time_saved_ns, min(g.estimate_basis) AS assumption, g.fix_key,
           CASE WHEN count(DISTINCT coalesce(ms.framework, '?')) = 1 THEN min(ms.framework) END AS framework,
           min(g.time_basis) AS time_basis, sum(g.floor_ns) AS floor_ns, min(g.floor_basis) AS floor_basis
    FROM gemm_signal_rows g LEFT JOIN model_stack ms ON ms.model = g.model
    GROUP BY g.signal, g.fix_key, g.op, g.m, g.n, g.k, g.kernel_id, g.time_basis
), gemm_rows AS (
    SELECT g.signal, g.subject, g.kernel_id, g.library, g.op_class, g.models, g.model_list, g.launches, g.gpu_time_ns,
           CASE g.fix_key
                WHEN 'misaligned GEMM' THEN concat(g.gemm_evidence, '; ', g.pct_of_peak, ' % of the dense ', g.math_dtype, ' peak')
                WHEN 'low-efficiency GEMM op'
                    THEN concat(g.pct_of_peak, ' % of the dense ', g.math_dtype, ' peak (< ', CAST(t.tensor_efficiency_low_pct AS VARCHAR),
                                '); wave fill ', g.wave_fill, ' %')
                WHEN 'GEMV below memory roof'
                    THEN concat('GEMV moving its compulsory bytes at ', CAST(round(g.pct_of_dram_roof, 1) AS VARCHAR),
                                ' % of the DRAM peak (< ', CAST(t.dram_roof_pct AS VARCHAR), '); ', g.pct_of_peak,
                                ' % of the dense ', g.math_dtype, ' peak, as a GEMV must be')
                ELSE concat(g.gemm_evidence, '; ', g.pct_of_peak, ' % of the dense ', g.math_dtype, ' peak; wave fill ',
                            g.wave_fill, ' %') END AS evidence,
           g.est_time_saved_ns, g.assumption, g.fix_key, g.framework, g.time_basis, g.floor_ns, g.floor_basis,
           'kernel time' AS basis
    FROM gemm_signals g CROSS JOIN thresholds t
    -- a GEMV is flagged only below dram_roof_pct of the DRAM peak, time-weighted over its models
    WHERE g.fix_key <> 'GEMV below memory roof' OR g.pct_of_dram_roof < t.dram_roof_pct
), shared_input_members AS (
    -- shared_input_gemms: the members of each group; each member's floor (A, B and C once at the DRAM peak; its
    -- FLOPs at achievable_tensor_pct of its dtype's peak) and the re-read of A it saves
    SELECT m.*,
           greatest(coalesce(CAST(m.gemm_batch AS DOUBLE) * (CAST(m.gemm_m AS DOUBLE) * m.gemm_k + CAST(m.gemm_k AS DOUBLE) * m.gemm_n
                                                             + CAST(m.gemm_m AS DOUBLE) * m.gemm_n) * m.elem_bytes
                             / NULLIF(d.peak_dram_bytes_per_s, 0) * 1e9, 0),
                    coalesce(2.0 * m.gemm_m * m.gemm_n * m.gemm_k * m.gemm_batch
                             / NULLIF(greatest(m.peak_flops_per_s, coalesce(r.peak_flops_per_s, 0)) * t.achievable_tensor_pct / 100.0, 0) * 1e9, 0))
               AS floor_ns,
           CAST(m.gemm_batch AS DOUBLE) * m.gemm_m * m.gemm_k * m.elem_bytes / NULLIF(d.peak_dram_bytes_per_s, 0) * 1e9 AS a_read_ns,
           CAST(m.gemm_batch AS DOUBLE) * m.gemm_m * m.gemm_k * m.elem_bytes AS a_bytes
    FROM shared_input_gemms m
    CROSS JOIN thresholds t
    LEFT JOIN (SELECT gpu, max(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s FROM peaks GROUP BY gpu) d ON d.gpu = m.gpu
    -- a timeline measures no clock: the compute floor takes the dtype's peak at the GPU's highest clock where
    -- ncu's tensor counters give its peak per cycle (above the datasheet's: 1,070 TFLOP/s BF16 at 1.98 GHz)
    LEFT JOIN (SELECT gpu, math_dtype, max(clock_peak_flops_per_s) AS peak_flops_per_s
               FROM peaks GROUP BY gpu, math_dtype) r ON r.gpu = m.gpu AND r.math_dtype = m.math_dtype
), shared_input_occurrences AS (
    -- one row per group of two or more: fusing them into one GEMM (N = the sum of their N) saves, per member
    -- but the longest, its re-read of A from DRAM (an upper bound: A may still sit in L2), never more than those
    -- members' time above their floors; the launch gaps before them are idle time, kept as evidence only
    SELECT m.run_id, m.model, m.gpu, m.group_no, min(m.framework_op) AS op, min(m.gemm_m) AS m, min(m.gemm_k) AS k,
           min(m.gemm_batch) AS batch, min(m.math_dtype) AS math_dtype, count(*) AS members,
           array_to_string(list_sort(list(CAST(m.gemm_n AS VARCHAR))), ' + ') AS n_list,
           array_to_string(list_sort(list(DISTINCT coalesce(m.kernel_display, m.kernel_base))), ' / ') AS kernels,
           arg_max(m.kernel_id, CASE WHEN m.time_rank > 1 THEN m.duration_ns END) AS kernel_id,
           arg_max(m.library, CASE WHEN m.time_rank > 1 THEN m.duration_ns END) AS library,
           sum(CASE WHEN m.time_rank > 1 THEN m.duration_ns END) AS others_ns,
           sum(CASE WHEN m.time_rank > 1 THEN m.floor_ns END) AS others_floor_ns,
           sum(CASE WHEN m.time_rank > 1 THEN m.a_read_ns END) AS reread_ns,
           sum(CASE WHEN m.starts_group = 0 THEN m.gap_before_ns ELSE 0 END) AS gaps_ns,
           max(m.a_bytes) AS a_bytes, sum(m.duration_ns) AS group_ns
    FROM shared_input_members m
    WHERE m.group_size > 1
    GROUP BY m.run_id, m.model, m.gpu, m.device_id, m.stream_id, m.group_no
), shared_input AS (
    SELECT 'GEMMs sharing an input (fusion candidate)' AS signal,
           concat(coalesce(o.op, '?'), ' x', CAST(min(o.members) AS VARCHAR), ' [', CAST(o.m AS VARCHAR), ', ', o.n_list, ', ', CAST(o.k AS VARCHAR), '] ',
                  coalesce(o.math_dtype, '?'), ' on ', min(o.kernels)) AS subject,
           o.kernel_id, min(o.library) AS library, 'gemm' AS op_class, 1 AS models, o.model AS model_list,
           CAST(sum(o.members) AS BIGINT) AS launches, sum(o.others_ns) AS gpu_time_ns,
           concat(CAST(count(*) AS VARCHAR), ' occurrence(s) of ', CAST(min(o.members) AS VARCHAR), ' GEMMs back to back on one stream with the same M = ',
                  CAST(o.m AS VARCHAR), ', K = ', CAST(o.k AS VARCHAR), ' and input shape (A: ', CAST(round(max(o.a_bytes) / 1e6, 2) AS VARCHAR),
                  ' MB), N = ', o.n_list, ' (', min(o.kernels), '); all ', CAST(round(sum(o.group_ns) / 1e3, 1) AS VARCHAR),
                  ' us, the shorter members ', CAST(round(sum(o.others_ns) / 1e3, 1) AS VARCHAR), ' us; re-reads of A ',
                  coalesce(concat(CAST(round(sum(o.reread_ns) / 1e3, 1) AS VARCHAR), ' us at the DRAM peak'),
                           'unknown (no DRAM peak for this GPU: no ncu run on it)'), '; launch gaps ',
                  CAST(round(sum(o.gaps_ns) / 1e3, 1) AS VARCHAR), ' us (idle time, under the profiler)') AS evidence,
           -- no DRAM peak known for the GPU (no ncu run on it): no estimate (least() would skip the NULL)
           sum(CASE WHEN o.reread_ns IS NOT NULL THEN least(o.reread_ns, greatest(0.0, o.others_ns - coalesce(o.others_floor_ns, 0))) END)
               AS est_time_saved_ns,
           'ESTIMATE (upper bound): one GEMM over the concatenated weights (N = the sum) reads A once: each shorter member saves its re-read of A at the DRAM peak (A may still sit in L2: then less), never more than its time above its floor; the launch gaps it also removes are idle time, another basis, shown in the evidence and not added; the shared A is inferred from shapes and adjacency (the trace records no tensor identity)' AS assumption,
           'GEMMs sharing an input' AS fix_key, min(ms.framework) AS framework, 'timeline' AS time_basis,
           sum(o.others_floor_ns) AS floor_ns, 'the shorter members'' floors: max(A, B and C at the DRAM peak, FLOPs at the achievable tensor rate)' AS floor_basis,
           'kernel time' AS basis
    FROM shared_input_occurrences o LEFT JOIN model_stack ms ON ms.model = o.model
    GROUP BY o.model, o.op, o.m, o.k, o.n_list, o.math_dtype, o.kernel_id
), low_tensor AS (
    SELECT 'GEMM/conv/attention at low tensor efficiency' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.real_launches)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat(CAST(round(sum(b.tensor_efficiency_pct * b.tensor_efficiency_weight_ns) / NULLIF(sum(b.ncu_ns), 0), 2) AS VARCHAR),
                  ' % tensor efficiency (', min(b.efficiency_basis), ', time-weighted) < ',
                  CAST(max(t.tensor_efficiency_low_pct) AS VARCHAR), '; ', coalesce(min(b.framework_op), 'no framework op'), ' ',
                  coalesce(min(b.op_shapes), ''), '; math dtype ', min(b.math_dtype)) AS evidence,
           sum(b.est_time_saved_ns) AS est_time_saved_ns,
           concat('ESTIMATE: the same FLOPs at ', CAST(max(t.tensor_efficiency_target_pct) AS VARCHAR),
                  ' % tensor efficiency (what well-shaped kernels of this class reach on this corpus)') AS assumption,
           CASE WHEN min(b.op_class) = 'conv' THEN 'low-efficiency conv'
                WHEN min(b.op_class) = 'attention' THEN 'low-efficiency attention'
                ELSE 'low-efficiency GEMM kernel' END AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis, sum(b.real_floor_ns) AS floor_ns, arg_max(b.top_floor_basis, b.top_floor_ns) AS floor_basis,
           'kernel time' AS basis
    FROM launches b CROSS JOIN thresholds t
    WHERE b.signal = 'GEMM/conv/attention at low tensor efficiency'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.tensor_efficiency_pct * b.tensor_efficiency_weight_ns) / NULLIF(sum(b.ncu_ns), 0) < max(t.tensor_efficiency_low_pct) AND sum(b.real_ns) > 0
), reuse AS (
    SELECT 'DRAM-bound with reuse failure' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.real_launches)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat('DRAM ', CAST(round(sum(b.dram_pct * b.dram_weight_ns) / sum(b.ncu_ns), 1) AS VARCHAR), ' %, moves ',
                  CAST(round(sum(b.dram_bytes) / sum(b.compulsory_bytes), 2) AS VARCHAR), 'x its compulsory bytes') AS evidence,
           sum(b.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE: the same DRAM bandwidth moving only the compulsory bytes (each input read once, the output written once)' AS assumption,
           'reuse failure' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis, sum(b.real_floor_ns) AS floor_ns, arg_max(b.top_floor_basis, b.top_floor_ns) AS floor_basis,
           'kernel time' AS basis
    FROM launches b
    WHERE b.signal = 'DRAM-bound with reuse failure'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), register_limited AS (
    SELECT 'register-limited occupancy' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.real_launches)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat(min(b.limiter_evidence), '; achieved ', CAST(round(sum(b.achieved_occupancy_pct * b.achieved_occupancy_weight_ns) / sum(b.ncu_ns), 1) AS VARCHAR),
                  ' % (time-weighted); ', CAST(min(b.min_registers_per_thread) AS VARCHAR), '-', CAST(max(b.max_registers_per_thread) AS VARCHAR),
                  ' registers/thread; ', min(b.bottleneck)) AS evidence,
           sum(b.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE: ncu''s own TheoreticalOccupancy speedup (global) for these launches' AS assumption,
           'register-limited' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis, sum(b.real_floor_ns) AS floor_ns, arg_max(b.top_floor_basis, b.top_floor_ns) AS floor_basis,
           'kernel time' AS basis
    FROM launches b
    WHERE b.signal = 'register-limited occupancy'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), small_grid AS (
    SELECT 'grid too small to fill the GPU' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.real_launches)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat(CAST(sum(b.launches) AS VARCHAR), ' ncu launches at ', CAST(round(min(b.min_waves_per_sm), 2) AS VARCHAR), '-',
                  CAST(round(max(b.max_waves_per_sm), 2) AS VARCHAR), ' waves per SM, ',
                  CAST(min(b.min_grid_size) AS VARCHAR), '-', CAST(max(b.max_grid_size) AS VARCHAR), ' blocks on ',
                  CAST(CAST(max(b.sm_count) AS BIGINT) AS VARCHAR), ' SMs; SM ',
                  CAST(round(sum(b.sm_pct * b.sm_weight_ns) / sum(b.ncu_ns), 1) AS VARCHAR), ' %, memory ',
                  CAST(round(sum(b.mem_pct * b.mem_weight_ns) / sum(b.ncu_ns), 1) AS VARCHAR), ' % (time-weighted)') AS evidence,
           sum(b.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE (upper bound): the same work spread over the SMs the grid leaves idle, at the same per-SM speed: time x (1 - min(blocks, SMs) / SMs)' AS assumption,
           'grid too small' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis, sum(b.real_floor_ns) AS floor_ns, arg_max(b.top_floor_basis, b.top_floor_ns) AS floor_basis,
           'kernel time' AS basis
    FROM launches b
    WHERE b.signal = 'grid too small to fill the GPU'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), tail_wave AS (
    SELECT 'partial last wave (wave quantization)' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.real_launches)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat(CAST(round(min(b.min_waves_per_sm), 2) AS VARCHAR), '-', CAST(round(max(b.max_waves_per_sm), 2) AS VARCHAR),
                  ' waves per SM, last wave ', CAST(CAST(round(min(b.min_last_wave_pct)) AS BIGINT) AS VARCHAR), '-',
                  CAST(CAST(round(max(b.max_last_wave_pct)) AS BIGINT) AS VARCHAR),
                  ' % full') AS evidence,
           sum(b.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE (upper bound): the idle share of the last wave, (ceil(w) - w) / ceil(w) of the time for w waves per SM, blocks of equal duration (not ncu''s "may cost up to")' AS assumption,
           'partial last wave' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis, sum(b.real_floor_ns) AS floor_ns, arg_max(b.top_floor_basis, b.top_floor_ns) AS floor_basis,
           'kernel time' AS basis
    FROM launches b
    WHERE b.signal = 'partial last wave (wave quantization)'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), hopper_gpus AS (
    -- GPUs of compute capability 9.x (Hopper), as any run on them recorded it
    SELECT gpu FROM peaks GROUP BY gpu HAVING max(run_compute_capability) LIKE '9.%'
), pre_hopper_matches AS (
    -- each kernel identity on a Hopper GPU whose name shows an Ampere (sm80) build: its family (pre_hopper_kernels.csv,
    -- lowest priority number first) and its real GPU time (kernel_time: timeline where the model has one)
    SELECT k.model, k.gpu, k.kernel_id, k.kernel_base, k.kernel_signature, k.library, k.op_class, k.time_basis, k.launches, k.gpu_time_ns,
           arg_min(p.kernel_family, CAST(p.priority AS INTEGER)) AS kernel_family,
           arg_min(TRY_CAST(nullif(p.hopper_speedup, '') AS DOUBLE), CAST(p.priority AS INTEGER)) AS hopper_speedup,
           arg_min(p.speedup_source, CAST(p.priority AS INTEGER)) AS speedup_source
    FROM kernel_time_rows k
    JOIN hopper_gpus h ON h.gpu = k.gpu
    JOIN pre_hopper_kernels p ON regexp_matches(lower(concat(k.kernel_base, ' ', k.kernel_signature)), p.pattern)
    GROUP BY k.model, k.gpu, k.kernel_id, k.kernel_base, k.kernel_signature, k.library, k.op_class, k.time_basis, k.launches, k.gpu_time_ns,
             k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.op_shapes
), pre_hopper AS (
    SELECT 'pre-Hopper kernel on Hopper (sm_90)' AS signal, min(m.kernel_signature) AS subject, m.kernel_id,
           min(m.library) AS library, min(m.op_class) AS op_class, count(DISTINCT m.model) AS models,
           array_to_string(list_sort(list(DISTINCT m.model)), ',') AS model_list,
           CAST(sum(m.launches) AS BIGINT) AS launches, sum(m.gpu_time_ns) AS gpu_time_ns,
           concat(min(m.kernel_family), ' kernel on ', min(m.gpu),
                  ' (compute capability 9.x): built for Ampere, it uses no wgmma or TMA') AS evidence,
           CASE WHEN min(m.hopper_speedup) > 1 THEN sum(m.gpu_time_ns) * (1 - 1 / min(m.hopper_speedup)) END AS est_time_saved_ns,
           CASE WHEN min(m.hopper_speedup) > 1
                THEN concat('ESTIMATE: the Hopper path runs the same work ', CAST(min(m.hopper_speedup) AS VARCHAR), 'x faster (',
                            min(m.speedup_source), ')')
                ELSE 'no estimate: no published speed of the Hopper path for this kernel family' END AS assumption,
           min(m.kernel_family) AS fix_key,
           CASE WHEN count(DISTINCT coalesce(ms.framework, '?')) = 1 THEN min(ms.framework) END AS framework,
           m.time_basis, CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, 'kernel time' AS basis
    FROM pre_hopper_matches m LEFT JOIN model_stack ms ON ms.model = m.model
    GROUP BY m.kernel_id, m.time_basis
    HAVING sum(m.gpu_time_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), fusion AS (
    -- averaged over the model's timeline runs (each run is one profiled stretch of the same workload)
    SELECT 'fusable chain of small kernels' AS signal, f.subject, CAST(NULL AS VARCHAR) AS kernel_id,
           CAST(NULL AS VARCHAR) AS library, CAST(NULL AS VARCHAR) AS op_class, 1 AS models, f.model AS model_list,
           CAST(round(avg(f.occurrences * f.kernels)) AS BIGINT) AS launches, avg(f.gpu_time_ns) AS gpu_time_ns,
           concat(min(f.evidence), ' (mean of ', CAST(count(*) AS VARCHAR), ' timeline run(s))') AS evidence,
           avg(f.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE (fusion_candidates): one fused kernel moving the largest member''s bytes once at the DRAM roof; launch gaps come on top' AS assumption,
           'fusable chain' AS fix_key, min(ms.framework) AS framework,
           'timeline' AS time_basis, CAST(NULL AS DOUBLE) AS floor_ns,
           'the fused chain''s DRAM time (fusion_candidates)' AS floor_basis, 'kernel time' AS basis
    FROM fusion_candidates f LEFT JOIN model_stack ms ON ms.model = f.model
    WHERE f.est_time_saved_ns > 0
    GROUP BY f.model, f.subject
), launch_bound_runs AS (
    SELECT 'launch-bound run (CUDA Graphs)' AS signal, concat(l.model, ' (whole run)') AS subject, CAST(NULL AS VARCHAR) AS kernel_id,
           CAST(NULL AS VARCHAR) AS library, CAST(NULL AS VARCHAR) AS op_class, 1 AS models, l.model AS model_list,
           CAST(round(avg(l.launches)) AS BIGINT) AS launches, avg(l.gpu_time_ns) AS gpu_time_ns,
           concat(min(l.evidence), ' (mean of ', CAST(count(*) AS VARCHAR), ' timeline run(s))') AS evidence,
           avg(l.est_time_saved_ns) AS est_time_saved_ns,
           CASE WHEN min(l.basis) = 'idle time without the profiler'
                THEN 'ESTIMATE (launch_bound): the idle time of the un-profiled run (its wall time less the GPU busy time), capped by the idle time above the smallest gap under the profiler, which a CUDA Graph (or a compiler that fuses the kernels) removes; wall time, not kernel time'
                ELSE 'ESTIMATE (launch_bound, an upper bound): the idle time between kernels above the run''s smallest gap under the profiler, which a CUDA Graph (or a compiler that fuses the kernels) removes; wall time, not kernel time; the profiler stretches launch gaps (one launch every 35-65 us with record_shapes on, ~5-10 us without), so no un-profiled timing backs it' END AS assumption,
           'launch-bound run' AS fix_key, min(ms.framework) AS framework,
           'timeline' AS time_basis, CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, min(l.basis) AS basis
    FROM launch_bound l LEFT JOIN model_stack ms ON ms.model = l.model
    WHERE l.subject = '(whole run)'
    GROUP BY l.model
), seed_low_l2 AS (
    -- the seed's signals as it computed them (design_signal_parts selects their launches): memory = max(DRAM %,
    -- memory SOL %) >= memory_pct with L2 hit < l2_hit_pct; tensor pipe (active basis) < tensor_pipe_low_pct on GEMM
    -- kernels; registers among the binding limits (ties included) on Latency-Occupancy launches with low achieved
    -- occupancy; tiny grids launched often
    SELECT 'memory-bound with low L2 hit' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list, CAST(sum(b.launches) AS BIGINT) AS launches,
           sum(b.ncu_ns) AS gpu_time_ns,
           concat('memory_pct ', CAST(round(sum(b.memory_pct * b.memory_weight_ns) / NULLIF(sum(b.memory_weight_ns), 0), 1) AS VARCHAR),
                  ', l2_hit_pct ', CAST(round(sum(b.l2_hit_pct * b.l2_hit_weight_ns) / NULLIF(sum(b.l2_hit_weight_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted)') AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: a low L2 hit rate says nothing about a streaming kernel (see DRAM-bound with reuse failure)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis,
           CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, CAST(NULL AS VARCHAR) AS basis
    FROM signal_parts b
    WHERE b.signal = 'memory-bound with low L2 hit'
    GROUP BY b.kernel_id
), seed_gemm_tensor AS (
    SELECT 'GEMM-class kernel with low tensor-pipe use' AS signal, min(k.kernel_base) AS subject, k.kernel_id, min(k.library) AS library,
           min(k.op_class) AS op_class, count(DISTINCT k.model) AS models,
           array_to_string(list_sort(list(DISTINCT k.model)), ',') AS model_list, CAST(sum(k.launches) AS BIGINT) AS launches,
           sum(k.ncu_ns) AS gpu_time_ns,
           concat('tensor_pipe_pct ', CAST(round(sum(k.tensor_pipe_pct * k.tensor_pipe_weight_ns) / NULLIF(sum(k.tensor_pipe_weight_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted) < ', CAST(max(t.tensor_pipe_low_pct) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: catches trivial GEMMs and misses convolutions (see GEMM/conv/attention at low tensor efficiency)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis,
           CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, CAST(NULL AS VARCHAR) AS basis
    FROM signal_parts k CROSS JOIN thresholds t
    WHERE k.signal = 'GEMM-class kernel with low tensor-pipe use'
    GROUP BY k.kernel_id
    HAVING sum(k.tensor_pipe_pct * k.tensor_pipe_weight_ns) / NULLIF(sum(k.tensor_pipe_weight_ns), 0) < max(t.tensor_pipe_low_pct)
), seed_register AS (
    SELECT 'register-limited occupancy in a kernel family' AS signal, o.kernel_base AS subject,
           CAST(NULL AS VARCHAR) AS kernel_id, min(o.library) AS library, min(o.op_class) AS op_class,
           count(DISTINCT o.model) AS models, array_to_string(list_sort(list(DISTINCT o.model)), ',') AS model_list,
           CAST(sum(o.launches) AS BIGINT) AS launches, sum(o.ncu_ns) AS gpu_time_ns,
           concat('registers bind in ', CAST(sum(o.launches) AS VARCHAR), ' launches; achieved_occupancy_pct ',
                  CAST(round(sum(o.achieved_occupancy_pct * o.achieved_occupancy_weight_ns) / NULLIF(sum(o.achieved_occupancy_weight_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted); registers_per_thread ', CAST(min(o.min_registers_per_thread) AS VARCHAR), '-',
                  CAST(max(o.max_registers_per_thread) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: counts ties with other limits and warp-specialised kernels (see register-limited occupancy)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis,
           CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, CAST(NULL AS VARCHAR) AS basis
    FROM signal_parts o
    WHERE o.signal = 'register-limited occupancy in a kernel family'
    GROUP BY o.kernel_base
), tiny_launches AS (
    -- the seed's tiny-grid launches per kernel, one row per duration and grid size (design_signal_parts)
    SELECT kernel_id, tiny_duration_ns, tiny_grid_size, sum(launches) AS launches
    FROM signal_parts
    WHERE signal = 'tiny grid launched many times (fusion or CUDA Graph candidate)'
    GROUP BY kernel_id, tiny_duration_ns, tiny_grid_size
), tiny_medians AS (
    -- the median duration and grid size of each kernel's tiny launches from those counts: as median() does, the
    -- middle value, or halfway between the two middle ones (positions floor and ceil of (n - 1) / 2 from 0)
    SELECT kernel_id,
           (max(CASE WHEN what = 'duration' AND position = 'low' THEN value END)
            + max(CASE WHEN what = 'duration' AND position = 'high' THEN value END)) / 2 AS median_duration_ns,
           (max(CASE WHEN what = 'grid' AND position = 'low' THEN value END)
            + max(CASE WHEN what = 'grid' AND position = 'high' THEN value END)) / 2 AS median_grid_size
    FROM (
        SELECT c.kernel_id, c.what, c.value, p.position
        FROM (
            SELECT kernel_id, what, value,
                   sum(launches) OVER (PARTITION BY kernel_id, what ORDER BY value ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                       - launches AS first_index,
                   sum(launches) OVER (PARTITION BY kernel_id, what ORDER BY value ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
                       - 1 AS last_index,
                   sum(launches) OVER (PARTITION BY kernel_id, what) AS n
            FROM (SELECT kernel_id, 'duration' AS what, CAST(tiny_duration_ns AS DOUBLE) AS value, sum(launches) AS launches
                  FROM tiny_launches GROUP BY kernel_id, tiny_duration_ns
                  UNION ALL
                  SELECT kernel_id, 'grid', CAST(tiny_grid_size AS DOUBLE), sum(launches)
                  FROM tiny_launches GROUP BY kernel_id, tiny_grid_size) v
        ) c
        JOIN (SELECT 'low' AS position UNION ALL SELECT 'high') p
          ON CASE WHEN p.position = 'low' THEN floor((c.n - 1) / 2.0) ELSE ceil((c.n - 1) / 2.0) END
             BETWEEN c.first_index AND c.last_index
    ) m
    GROUP BY kernel_id
), seed_tiny_grids AS (
    SELECT 'tiny grid launched many times (fusion or CUDA Graph candidate)' AS signal, min(k.kernel_base) AS subject,
           k.kernel_id, min(k.library) AS library, min(k.op_class) AS op_class,
           count(DISTINCT k.model) AS models, array_to_string(list_sort(list(DISTINCT k.model)), ',') AS model_list,
           CAST(sum(k.launches) AS BIGINT) AS launches, sum(k.ncu_ns) AS gpu_time_ns,
           concat(CAST(sum(k.launches) AS VARCHAR), ' launches, median ', CAST(min(md.median_duration_ns) AS VARCHAR),
                  ' ns, median grid ', CAST(min(md.median_grid_size) AS VARCHAR), ' blocks, waves_per_sm <= ',
                  CAST(max(k.max_waves_per_sm) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: ncu replay durations (see fusable chain of small kernels, launch-bound run)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis,
           CAST(NULL AS DOUBLE) AS floor_ns, CAST(NULL AS VARCHAR) AS floor_basis, CAST(NULL AS VARCHAR) AS basis
    FROM signal_parts k CROSS JOIN thresholds t
    LEFT JOIN tiny_medians md ON md.kernel_id = k.kernel_id
    WHERE k.signal = 'tiny grid launched many times (fusion or CUDA Graph candidate)'
    GROUP BY k.kernel_id
    HAVING sum(k.launches) >= max(t.many_launches)
), calibrated AS (
    SELECT * FROM gemm_rows
    UNION ALL SELECT * FROM shared_input
    UNION ALL SELECT * FROM low_tensor
    UNION ALL SELECT * FROM reuse
    UNION ALL SELECT * FROM register_limited
    UNION ALL SELECT * FROM small_grid
    UNION ALL SELECT * FROM tail_wave
    UNION ALL SELECT * FROM pre_hopper
    UNION ALL SELECT * FROM fusion
    UNION ALL SELECT * FROM launch_bound_runs
), seed AS (
    SELECT * FROM seed_low_l2
    UNION ALL SELECT * FROM seed_gemm_tensor
    UNION ALL SELECT * FROM seed_register
    UNION ALL SELECT * FROM seed_tiny_grids
), bounded AS (
    -- a kernel-time estimate never exceeds the row's time above its floor
    SELECT c.*,
           CASE WHEN c.basis = 'kernel time' THEN greatest(0.0, c.gpu_time_ns - coalesce(c.floor_ns, 0.0)) END AS bound_ns,
           CASE WHEN c.basis = 'kernel time' AND c.est_time_saved_ns IS NOT NULL
                THEN least(c.est_time_saved_ns, greatest(0.0, c.gpu_time_ns - coalesce(c.floor_ns, 0.0)))
                ELSE c.est_time_saved_ns END AS est_alone_ns
    FROM calibrated c
), per_signal AS (
    -- one kernel's rows of one signal cover different launches (one row per op shape): they add up. Window
    -- sums, not a GROUP BY joined back: Spark inlines every reference to a CTE, and this one holds every signal
    SELECT b.*,
           CASE WHEN b.basis = 'kernel time' AND b.kernel_id IS NOT NULL AND b.est_alone_ns > 0 THEN 1 ELSE 0 END AS shares_kernel,
           sum(CASE WHEN b.est_alone_ns > 0 THEN b.est_alone_ns END) OVER (PARTITION BY b.basis, b.kernel_id, b.time_basis, b.signal) AS signal_est_ns,
           sum(CASE WHEN b.est_alone_ns > 0 THEN b.gpu_time_ns END) OVER (PARTITION BY b.basis, b.kernel_id, b.time_basis, b.signal) AS signal_time_ns,
           sum(CASE WHEN b.est_alone_ns > 0 THEN b.bound_ns END) OVER (PARTITION BY b.basis, b.kernel_id, b.time_basis, b.signal) AS signal_bound_ns
    FROM bounded b
), per_kernel AS (
    -- the kernel's time: the widest signal's (each signal sees a subset of its launches), and that signal's bound
    SELECT p.*,
           max(CASE WHEN p.shares_kernel = 1 THEN p.signal_time_ns END) OVER (PARTITION BY p.shares_kernel, p.kernel_id, p.time_basis) AS kernel_span_ns,
           first_value(CASE WHEN p.shares_kernel = 1 THEN p.signal_bound_ns END) OVER (
               PARTITION BY p.shares_kernel, p.kernel_id, p.time_basis ORDER BY p.signal_time_ns DESC, p.signal
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS kernel_bound_ns
    FROM per_signal p
), kernel_sums AS (
    -- each row weighs est_alone / its signal's estimate, so a signal's rows add up to one term: the number of
    -- signals, their summed estimate and sum(ln(1 - s_i)) over the kernel's signals
    SELECT k.*,
           sum(CASE WHEN k.shares_kernel = 1 THEN k.est_alone_ns / k.signal_est_ns END)
               OVER (PARTITION BY k.shares_kernel, k.kernel_id, k.time_basis) AS kernel_signals_x,
           sum(CASE WHEN k.shares_kernel = 1 THEN k.est_alone_ns END)
               OVER (PARTITION BY k.shares_kernel, k.kernel_id, k.time_basis) AS kernel_summed_ns,
           sum(CASE WHEN k.shares_kernel = 1
                    THEN k.est_alone_ns / k.signal_est_ns * ln(greatest(1e-12, 1 - k.signal_est_ns / k.kernel_span_ns)) END)
               OVER (PARTITION BY k.shares_kernel, k.kernel_id, k.time_basis) AS kernel_log_kept
    FROM per_kernel k
), combined AS (
    -- several signals on one kernel are fixes of one kernel: each removes its share of what the others leave,
    -- combined 1 - prod(1 - s_i) of the kernel's time (s_i = a signal's saving / the kernel's time), never more
    -- than the kernel's bound (a plain sum passed 100 %: three signals on one conv summed to 183 %); each signal
    -- keeps its part in proportion to its own estimate
    SELECT k.*,
           CASE WHEN k.shares_kernel = 1 THEN CAST(round(k.kernel_signals_x) AS BIGINT) ELSE 1 END AS kernel_signals,
           k.est_alone_ns * CASE WHEN k.shares_kernel = 1 AND round(k.kernel_signals_x) > 1
                                 THEN least(1.0, least(k.kernel_bound_ns, k.kernel_span_ns * (1 - exp(k.kernel_log_kept)))
                                                 / NULLIF(k.kernel_summed_ns, 0))
                                 ELSE 1.0 END AS est_combined_ns
    FROM kernel_sums k
), model_kernel_time AS (
    SELECT model, time_basis, kernel_id, sum(gpu_time_ns) AS gpu_time_ns FROM kernel_time_rows GROUP BY model, time_basis, kernel_id
), model_time AS (
    SELECT model, time_basis, sum(gpu_time_ns) AS gpu_time_ns FROM kernel_time_rows GROUP BY model, time_basis
), shares AS (
    -- a kernel-time row's saving split over its models by their time in that kernel; a chain's is its model's
    SELECT c.*, coalesce(m.model, CASE WHEN c.kernel_id IS NULL THEN c.model_list END) AS share_model,
           CASE WHEN c.kernel_id IS NULL THEN 1.0 ELSE m.gpu_time_ns END AS share_weight
    FROM combined c
    LEFT JOIN model_kernel_time m
      ON c.basis = 'kernel time' AND c.est_combined_ns > 0 AND m.time_basis = c.time_basis AND m.kernel_id = c.kernel_id
     AND contains(concat(',', c.model_list, ','), concat(',', m.model, ','))
), model_saved AS (
    SELECT s.*, t.gpu_time_ns AS model_gpu_time_ns,
           s.est_combined_ns * s.share_weight
               / NULLIF(sum(s.share_weight) OVER (PARTITION BY s.signal, s.subject, s.kernel_id, s.time_basis, s.model_list), 0) AS share_ns
    FROM shares s
    LEFT JOIN model_time t ON s.basis = 'kernel time' AND s.est_combined_ns > 0 AND t.model = s.share_model AND t.time_basis = s.time_basis
), capped AS (
    -- a model's kernel-time savings never exceed its GPU time: past it, all its rows shrink by one factor
    SELECT m.*,
           least(1.0, m.model_gpu_time_ns / NULLIF(sum(m.share_ns) OVER (PARTITION BY m.share_model, m.time_basis, m.model_gpu_time_ns IS NULL), 0))
               AS model_factor
    FROM model_saved m
), rows_capped AS (
    SELECT signal, subject, kernel_id, library, op_class, models, model_list, launches, gpu_time_ns, evidence,
           est_time_saved_ns, assumption, fix_key, framework, time_basis, floor_ns, floor_basis, basis, bound_ns,
           est_alone_ns, kernel_signals, est_combined_ns, min(model_factor) AS factor
    FROM capped
    GROUP BY signal, subject, kernel_id, library, op_class, models, model_list, launches, gpu_time_ns, evidence,
             est_time_saved_ns, assumption, fix_key, framework, time_basis, floor_ns, floor_basis, basis, bound_ns,
             est_alone_ns, kernel_signals, est_combined_ns
), final_calibrated AS (
    SELECT c.signal, c.subject, c.kernel_id, c.library, c.op_class, c.models, c.model_list, c.launches, c.gpu_time_ns,
           CASE WHEN c.basis = 'kernel time' AND c.est_time_saved_ns IS NOT NULL
                THEN concat(c.evidence, '; floor ', CAST(round(coalesce(c.floor_ns, 0) / 100) / 10 AS VARCHAR), ' us of ',
                            CAST(round(c.gpu_time_ns / 100) / 10 AS VARCHAR), ' us (', coalesce(c.floor_basis, 'none known'), ')',
                            CASE WHEN c.kernel_signals > 1
                                 THEN concat('; one of ', CAST(c.kernel_signals AS VARCHAR),
                                             ' signals on this kernel: they share its bound, 1 - prod(1 - s_i)')
                                 ELSE '' END,
                            CASE WHEN coalesce(c.factor, 1.0) < 1.0
                                 THEN concat('; scaled by ', CAST(round(c.factor, 3) AS VARCHAR),
                                             ' so that its models'' kernel-time savings stay within their GPU time')
                                 ELSE '' END)
                ELSE c.evidence END AS evidence,
           c.est_combined_ns * coalesce(c.factor, 1.0) AS est_time_saved_ns, c.assumption, c.fix_key, c.framework,
           c.time_basis, c.floor_ns, c.floor_basis, c.basis, c.bound_ns, c.est_alone_ns
    FROM rows_capped c
), signals AS (
    SELECT final_calibrated.*, 'calibrated' AS source FROM final_calibrated
    UNION ALL
    SELECT seed.*, CAST(NULL AS DOUBLE) AS bound_ns, CAST(NULL AS DOUBLE) AS est_alone_ns, 'seed heuristic' AS source FROM seed
), owners AS (
    -- each signalled kernel's library, implementation, op class and stack, for its library's knob
    SELECT DISTINCT s.kernel_id, s.library, i.implementation, s.op_class, s.framework
    FROM signals s
    JOIN (SELECT kernel_id, min(implementation) AS implementation FROM kernel_counts GROUP BY kernel_id) i
      ON i.kernel_id = s.kernel_id
), library_fix AS (
    -- library_fixes.csv: of the rows matching, the one naming the most (implementation, then op class, then stack)
    SELECT o.kernel_id, o.library, o.op_class, o.framework,
           arg_max(lf.fix, CASE WHEN lf.implementation <> '*' THEN 4 ELSE 0 END + CASE WHEN lf.op_class <> '*' THEN 2 ELSE 0 END
                           + CASE WHEN lf.framework <> '*' THEN 1 ELSE 0 END) AS fix
    FROM owners o
    JOIN library_fixes lf ON lf.library = o.library AND lf.implementation IN ('*', o.implementation)
         AND lf.op_class IN ('*', o.op_class) AND lf.framework IN ('*', o.framework)
    GROUP BY o.kernel_id, o.library, o.op_class, o.framework
)
SELECT s.signal, s.subject, s.kernel_id, s.library, s.op_class, s.models, s.model_list, s.launches, s.gpu_time_ns,
       100 * s.gpu_time_ns / NULLIF(tot.total_ns, 0) AS gpu_time_pct, s.evidence, s.est_time_saved_ns, s.assumption,
       CASE WHEN coalesce(f_stack.edits_kernel, f_any.edits_kernel) = 'true' AND lf.fix IS NOT NULL THEN lf.fix
            ELSE coalesce(f_stack.fix, f_any.fix) END AS fix, s.time_basis, s.source, s.framework,
       s.basis, s.floor_ns, s.floor_basis, s.bound_ns, s.est_alone_ns
FROM signals s LEFT JOIN totals tot ON tot.time_basis = s.time_basis
LEFT JOIN library_fix lf ON lf.kernel_id = s.kernel_id AND lf.library = s.library AND lf.op_class = s.op_class
     AND lf.framework IS NOT DISTINCT FROM s.framework
LEFT JOIN signal_fixes f_stack ON f_stack.fix_key = s.fix_key AND f_stack.framework = s.framework
LEFT JOIN signal_fixes f_any ON f_any.fix_key = s.fix_key AND f_any.framework = '*'
ORDER BY s.source, s.signal, s.est_time_saved_ns DESC NULLS LAST, s.models DESC, s.gpu_time_ns DESC, s.subject
