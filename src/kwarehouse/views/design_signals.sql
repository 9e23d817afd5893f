-- Design signals for GPU architects and library authors, each with its subject, evidence, models, GPU time, an estimated time saved (with its assumption) and the fix: misaligned GEMMs on fallback kernels, GEMM/conv/attention at low tensor efficiency, DRAM-bound kernels failing the reuse test, truly register-limited occupancy, grids too small to fill the GPU, partial last waves, Ampere (sm80) kernels running on Hopper, fusable chains of small kernels and launch-bound runs; plus the seed's four signals as it computed them (source 'seed heuristic').
-- Cut-offs come from bottleneck_thresholds. time_basis says what gpu_time_ns is: 'timeline' (real GPU time
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
--   grid too small: grid-too-small launches (< 1 wave, not launch-overhead); saved = time x (1 - waves): the same
--       work spread over every SM at the same per-SM speed (an upper bound);
--   partial last wave: ncu's LaunchConfiguration tail-wave estimate (global speedup) on the other launches, but
--       not on DRAM-bound ones (their last wave gets the bandwidth the idle SMs leave);
--   pre-Hopper kernel on Hopper (sm_90): kernel_time rows on a GPU of compute capability 9.x whose name matches
--       pre_hopper_kernels.csv (FlashAttention-2, cuBLAS and cuDNN sm80 builds); saved = time x (1 - 1/speedup) where
--       a published speed of the Hopper path exists (the row cites it), else no estimate; the fix (signal_fixes.csv,
--       fix_key = the kernel family) names the Hopper path;
--   fusable chain of small kernels / launch-bound run: fusion_candidates and launch_bound (timeline), averaged
--       over the model's timeline runs.
-- fix comes from signal_fixes.csv by the signal's fix_key and the stack its models share (run_framework:
-- PyTorch, XLA, CuPy), else the row for any stack: no torch.compile for a CUDA C, OpenMP or CuPy application.
-- Where that fix edits the kernel's code or algorithm (edits_kernel) and a library owns the kernel (a library_fixes
-- row for its library, implementation, op class and stack), the fix is that library's knob instead.
WITH t AS (
    SELECT max(CASE WHEN name = 'tensor_pipe_low_pct' THEN value END) AS tensor_pipe_low_pct,
           max(CASE WHEN name = 'tensor_efficiency_low_pct' THEN value END) AS tensor_efficiency_low_pct,
           max(CASE WHEN name = 'tensor_efficiency_target_pct' THEN value END) AS tensor_efficiency_target_pct,
           max(CASE WHEN name = 'trivial_gemm_flops' THEN value END) AS trivial_gemm_flops,
           max(CASE WHEN name = 'low_occupancy_pct' THEN value END) AS low_occupancy_pct,
           max(CASE WHEN name = 'memory_pct' THEN value END) AS memory_pct,
           max(CASE WHEN name = 'l2_hit_pct' THEN value END) AS l2_hit_pct,
           max(CASE WHEN name = 'tiny_kernel_ns' THEN value END) AS tiny_kernel_ns,
           max(CASE WHEN name = 'many_launches' THEN value END) AS many_launches
    FROM bottleneck_thresholds
), model_stack AS (
    -- each model's stack (run_framework), NULL where its runs disagree or nothing says
    SELECT model, CASE WHEN count(DISTINCT coalesce(framework, '?')) = 1 THEN min(framework) END AS framework
    FROM run_framework GROUP BY model
), real_weights AS (
    -- per model, GPU and kernel: how much real time (and how many real launches) one ns (one launch) of its
    -- ncu replays stands for; 1 where the model has no timeline on that GPU
    SELECT n.model, n.gpu, n.kernel_id,
           CASE WHEN r.model IS NULL THEN 'ncu replay' ELSE 'timeline' END AS time_basis,
           CASE WHEN r.model IS NULL THEN 1.0 ELSE coalesce(r.timeline_ns / NULLIF(n.ncu_ns, 0), 0.0) END AS time_scale,
           CASE WHEN r.model IS NULL THEN 1.0 ELSE r.timeline_launches / n.ncu_launches END AS launch_scale
    FROM (SELECT model, gpu, kernel_id, CAST(sum(duration_ns) AS DOUBLE) AS ncu_ns, CAST(count(*) AS DOUBLE) AS ncu_launches
          FROM kernels GROUP BY model, gpu, kernel_id) n
    LEFT JOIN (SELECT model, gpu, kernel_id, sum(gpu_time_ns) AS timeline_ns, CAST(sum(launches) AS DOUBLE) AS timeline_launches
               FROM kernel_time WHERE time_basis = 'timeline' GROUP BY model, gpu, kernel_id) r
      ON r.model = n.model AND r.gpu = n.gpu AND r.kernel_id = n.kernel_id
), launches AS (
    -- bottleneck_class and occupancy read once; the signals below all work from this
    SELECT b.run_id, b.launch_id, b.model, b.kernel_id, w.time_basis, b.duration_ns * w.time_scale AS real_ns,
           w.launch_scale, b.library, b.op_class, b.kernel_base, b.bottleneck,
           b.limiting_unit, b.seed_class, b.duration_ns, b.sm_pct, b.dram_pct, b.mem_pct, b.memory_pct, b.l2_hit_pct,
           b.waves_per_sm, b.dram_bytes, b.compulsory_bytes, b.dram_to_compulsory, b.achieved_occupancy_pct,
           o.occupancy_limiter, o.limiter_evidence, o.binding_limit, o.registers_per_thread, ms.framework
    FROM bottleneck_class b JOIN occupancy o ON o.run_id = b.run_id AND o.launch_id = b.launch_id
    LEFT JOIN model_stack ms ON ms.model = b.model
    JOIN real_weights w ON w.model = b.model AND w.gpu = b.gpu AND w.kernel_id = b.kernel_id
), totals AS (
    SELECT 'ncu replay' AS time_basis, CAST(sum(duration_ns) AS DOUBLE) AS total_ns FROM kernels
    UNION ALL
    SELECT 'timeline', CAST(sum(gpu_time_ns) AS DOUBLE) FROM kernel_time WHERE time_basis = 'timeline'
), misaligned AS (
    SELECT 'misaligned GEMM dims → fallback kernel' AS signal,
           concat(min(g.op), ' [', CAST(g.m AS VARCHAR), ', ', CAST(g.n AS VARCHAR), ', ', CAST(g.k AS VARCHAR), '] ',
                  min(g.math_dtype), ' on ', coalesce(min(g.kernel_display), min(g.kernel_base))) AS subject,
           g.kernel_id, 'cuBLAS' AS library, 'gemm' AS op_class,
           count(DISTINCT g.model) AS models, array_to_string(list_sort(list(DISTINCT g.model)), ',') AS model_list,
           CAST(sum(g.launches) AS BIGINT) AS launches, sum(g.gpu_time_ns) AS gpu_time_ns,
           concat(min(g.evidence), '; ', CAST(round(sum(g.pct_of_peak * g.gpu_time_ns) / NULLIF(sum(g.gpu_time_ns), 0), 1) AS VARCHAR),
                  ' % of the dense ', min(g.math_dtype), ' peak') AS evidence,
           sum(g.est_time_saved_ns) AS est_time_saved_ns, min(g.estimate_basis) AS assumption,
           'misaligned GEMM' AS fix_key, CASE WHEN count(DISTINCT coalesce(ms.framework, '?')) = 1 THEN min(ms.framework) END AS framework,
           min(g.time_basis) AS time_basis
    FROM gemm_efficiency g LEFT JOIN model_stack ms ON ms.model = g.model
    WHERE g.misaligned AND NOT g.tiny
    GROUP BY g.op, g.m, g.n, g.k, g.kernel_id, g.time_basis
), low_gemm AS (
    SELECT 'GEMM/conv/attention at low tensor efficiency' AS signal,
           concat(min(g.op), ' [', CAST(g.m AS VARCHAR), ', ', CAST(g.n AS VARCHAR), ', ', CAST(g.k AS VARCHAR), '] ',
                  min(g.math_dtype), ' on ', coalesce(min(g.kernel_display), min(g.kernel_base))) AS subject,
           g.kernel_id, 'cuBLAS' AS library, 'gemm' AS op_class,
           count(DISTINCT g.model) AS models, array_to_string(list_sort(list(DISTINCT g.model)), ',') AS model_list,
           CAST(sum(g.launches) AS BIGINT) AS launches, sum(g.gpu_time_ns) AS gpu_time_ns,
           concat(CAST(round(sum(g.pct_of_peak * g.gpu_time_ns) / NULLIF(sum(g.gpu_time_ns), 0), 1) AS VARCHAR),
                  ' % of the dense ', min(g.math_dtype), ' peak (< ', CAST(max(t.tensor_efficiency_low_pct) AS VARCHAR),
                  '); wave fill ', CAST(round(min(g.wave_fill_pct), 0) AS VARCHAR), ' %') AS evidence,
           sum(g.est_time_saved_ns) AS est_time_saved_ns, min(g.estimate_basis) AS assumption,
           'low-efficiency GEMM op' AS fix_key, CASE WHEN count(DISTINCT coalesce(ms.framework, '?')) = 1 THEN min(ms.framework) END AS framework,
           min(g.time_basis) AS time_basis
    FROM gemm_efficiency g LEFT JOIN model_stack ms ON ms.model = g.model CROSS JOIN t
    WHERE NOT g.misaligned AND NOT g.tiny AND g.pct_of_peak < t.tensor_efficiency_low_pct
          AND g.flops_per_launch >= t.trivial_gemm_flops
    GROUP BY g.op, g.m, g.n, g.k, g.kernel_id, g.time_basis
), tensor_launches AS (
    -- ncu launches of conv and attention kernels, and GEMM kernels without a framework op (gemm_efficiency
    -- covers those with one)
    SELECT k.*,
           CASE WHEN k.flops_source = 'ncu tensor counters' THEN k.pct_of_peak
                WHEN regexp_matches(lower(k.kernel_name), '(hmma|1688|16816|s884|h884|cutlass_75|cutlass_80)')
                    THEN k.tensor_util_pct / 2
                ELSE k.tensor_util_pct END AS tensor_efficiency_pct,
           CASE WHEN k.flops_source = 'ncu tensor counters' THEN 'tensor FLOPs / dense peak (ncu tensor counters)'
                WHEN regexp_matches(lower(k.kernel_name), '(hmma|1688|16816|s884|h884|cutlass_75|cutlass_80)')
                    THEN 'tensor pipe % of elapsed cycles / 2 (mma.sync kernel)'
                ELSE 'tensor pipe % of elapsed cycles' END AS efficiency_basis,
           w.time_basis, k.duration_ns * w.time_scale AS real_ns, w.launch_scale, ms.framework
    FROM kernels k
    JOIN real_weights w ON w.model = k.model AND w.gpu = k.gpu AND w.kernel_id = k.kernel_id
    LEFT JOIN model_stack ms ON ms.model = k.model
    WHERE (k.op_class IN ('conv', 'attention') OR (k.op_class = 'gemm' AND k.framework_op IS NULL))
      AND k.tensor_util_pct IS NOT NULL
), low_tensor AS (
    SELECT 'GEMM/conv/attention at low tensor efficiency' AS signal, min(l.kernel_base) AS subject, l.kernel_id,
           min(l.library) AS library, min(l.op_class) AS op_class,
           count(DISTINCT l.model) AS models, array_to_string(list_sort(list(DISTINCT l.model)), ',') AS model_list,
           CAST(round(sum(l.launch_scale)) AS BIGINT) AS launches, sum(l.real_ns) AS gpu_time_ns,
           concat(CAST(round(sum(l.tensor_efficiency_pct * l.duration_ns) / NULLIF(sum(l.duration_ns), 0), 2) AS VARCHAR),
                  ' % tensor efficiency (', min(l.efficiency_basis), ', time-weighted) < ',
                  CAST(max(t.tensor_efficiency_low_pct) AS VARCHAR), '; ', coalesce(min(l.framework_op), 'no framework op'), ' ',
                  coalesce(min(l.op_shapes), ''), '; math dtype ', min(l.math_dtype)) AS evidence,
           sum(l.real_ns * greatest(0, 1 - l.tensor_efficiency_pct / t.tensor_efficiency_target_pct)) AS est_time_saved_ns,
           concat('ESTIMATE: the same FLOPs at ', CAST(max(t.tensor_efficiency_target_pct) AS VARCHAR),
                  ' % tensor efficiency (what well-shaped kernels of this class reach on this corpus)') AS assumption,
           CASE WHEN min(l.op_class) = 'conv' THEN 'low-efficiency conv'
                WHEN min(l.op_class) = 'attention' THEN 'low-efficiency attention'
                ELSE 'low-efficiency GEMM kernel' END AS fix_key, CASE WHEN count(DISTINCT coalesce(l.framework, '?')) = 1 THEN min(l.framework) END AS framework,
           l.time_basis
    FROM tensor_launches l CROSS JOIN t
    WHERE coalesce(l.flops, t.trivial_gemm_flops) >= t.trivial_gemm_flops
    GROUP BY l.kernel_id, l.time_basis
    HAVING sum(l.tensor_efficiency_pct * l.duration_ns) / NULLIF(sum(l.duration_ns), 0) < max(t.tensor_efficiency_low_pct) AND sum(l.real_ns) > 0
), reuse AS (
    SELECT 'DRAM-bound with reuse failure' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.launch_scale)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat('DRAM ', CAST(round(sum(b.dram_pct * b.duration_ns) / sum(b.duration_ns), 1) AS VARCHAR), ' %, moves ',
                  CAST(round(sum(b.dram_bytes) / sum(b.compulsory_bytes), 2) AS VARCHAR), 'x its compulsory bytes') AS evidence,
           sum(b.real_ns * (1 - 1 / b.dram_to_compulsory)) AS est_time_saved_ns,
           'ESTIMATE: the same DRAM bandwidth moving only the compulsory bytes (each input read once, the output written once)' AS assumption,
           'reuse failure' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis
    FROM launches b
    WHERE b.bottleneck = 'cache-inefficient'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), register_limited AS (
    SELECT 'register-limited occupancy' AS signal, min(o.kernel_base) AS subject, o.kernel_id, min(o.library) AS library,
           min(o.op_class) AS op_class, count(DISTINCT o.model) AS models,
           array_to_string(list_sort(list(DISTINCT o.model)), ',') AS model_list,
           CAST(round(sum(o.launch_scale)) AS BIGINT) AS launches, sum(o.real_ns) AS gpu_time_ns,
           concat(min(o.limiter_evidence), '; achieved ', CAST(round(sum(o.achieved_occupancy_pct * o.duration_ns) / sum(o.duration_ns), 1) AS VARCHAR),
                  ' % (time-weighted); ', CAST(min(o.registers_per_thread) AS VARCHAR), '-', CAST(max(o.registers_per_thread) AS VARCHAR),
                  ' registers/thread; ', min(o.bottleneck)) AS evidence,
           sum(o.real_ns * r.speedup_pct / 100) AS est_time_saved_ns,
           'ESTIMATE: ncu''s own TheoreticalOccupancy speedup (global) for these launches' AS assumption,
           'register-limited' AS fix_key, CASE WHEN count(DISTINCT coalesce(o.framework, '?')) = 1 THEN min(o.framework) END AS framework,
           o.time_basis
    FROM launches o
    LEFT JOIN rules r ON r.run_id = o.run_id AND r.launch_id = o.launch_id AND r.rule_name = 'TheoreticalOccupancy'
         AND r.speedup_type = 'global'
    WHERE o.occupancy_limiter = 'registers' AND o.bottleneck IN ('latency-bound', 'occupancy-limited')
    GROUP BY o.kernel_id, o.time_basis
    HAVING sum(o.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), small_grid AS (
    SELECT 'grid too small to fill the GPU' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.launch_scale)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat(CAST(count(*) AS VARCHAR), ' ncu launches at ', CAST(round(min(b.waves_per_sm), 2) AS VARCHAR), '-',
                  CAST(round(max(b.waves_per_sm), 2) AS VARCHAR), ' waves per SM; SM ',
                  CAST(round(sum(b.sm_pct * b.duration_ns) / sum(b.duration_ns), 1) AS VARCHAR), ' %, memory ',
                  CAST(round(sum(b.mem_pct * b.duration_ns) / sum(b.duration_ns), 1) AS VARCHAR), ' % (time-weighted)') AS evidence,
           sum(b.real_ns * (1 - b.waves_per_sm)) AS est_time_saved_ns,
           'ESTIMATE (upper bound): the same work spread over every SM at the same per-SM speed: time x (1 - waves per SM)' AS assumption,
           'grid too small' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis
    FROM launches b
    WHERE b.bottleneck = 'grid-too-small'
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), tail_wave AS (
    SELECT 'partial last wave (wave quantization)' AS signal, min(b.kernel_base) AS subject, b.kernel_id,
           min(b.library) AS library, min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list,
           CAST(round(sum(b.launch_scale)) AS BIGINT) AS launches, sum(b.real_ns) AS gpu_time_ns,
           concat('ncu LaunchConfiguration: a partial last wave may cost up to ',
                  CAST(round(max(r.speedup_pct), 1) AS VARCHAR), ' % of the runtime; ',
                  CAST(round(min(b.waves_per_sm), 2) AS VARCHAR), '-', CAST(round(max(b.waves_per_sm), 2) AS VARCHAR), ' waves per SM') AS evidence,
           sum(b.real_ns * r.speedup_pct / 100) AS est_time_saved_ns,
           'ESTIMATE: ncu''s own tail-wave estimate (LaunchConfiguration, global speedup), assuming blocks of equal duration' AS assumption,
           'partial last wave' AS fix_key, CASE WHEN count(DISTINCT coalesce(b.framework, '?')) = 1 THEN min(b.framework) END AS framework,
           b.time_basis
    FROM launches b
    JOIN rules r ON r.run_id = b.run_id AND r.launch_id = b.launch_id AND r.rule_name = 'LaunchConfiguration'
         AND r.speedup_type = 'global' AND r.description LIKE '%partial wave%'
    WHERE b.bottleneck NOT IN ('launch-overhead', 'grid-too-small') AND r.speedup_pct > 0
      -- a streaming kernel at the DRAM roof shares the bandwidth among fewer blocks in its last wave: no tail cost
      AND NOT (b.bottleneck IN ('memory-bound', 'cache-inefficient') AND b.limiting_unit = 'dram')
    GROUP BY b.kernel_id, b.time_basis
    HAVING sum(b.real_ns) > 0   -- a kernel the model's timeline never ran costs it nothing
), hopper_gpus AS (
    -- GPUs of compute capability 9.x (Hopper), as any run on them recorded it
    SELECT gpu FROM runs GROUP BY gpu HAVING max(compute_capability) LIKE '9.%'
), pre_hopper_matches AS (
    -- each kernel identity on a Hopper GPU whose name shows an Ampere (sm80) build: its family (pre_hopper_kernels.csv,
    -- lowest priority number first) and its real GPU time (kernel_time: timeline where the model has one)
    SELECT k.model, k.gpu, k.kernel_id, k.kernel_base, k.kernel_signature, k.library, k.op_class, k.time_basis, k.launches, k.gpu_time_ns,
           arg_min(p.kernel_family, CAST(p.priority AS INTEGER)) AS kernel_family,
           arg_min(TRY_CAST(nullif(p.hopper_speedup, '') AS DOUBLE), CAST(p.priority AS INTEGER)) AS hopper_speedup,
           arg_min(p.speedup_source, CAST(p.priority AS INTEGER)) AS speedup_source
    FROM kernel_time k
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
           m.time_basis
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
           'timeline' AS time_basis
    FROM fusion_candidates f LEFT JOIN model_stack ms ON ms.model = f.model
    WHERE f.est_time_saved_ns > 0
    GROUP BY f.model, f.subject
), launch_bound_runs AS (
    SELECT 'launch-bound run (CUDA Graphs)' AS signal, concat(l.model, ' (whole run)') AS subject, CAST(NULL AS VARCHAR) AS kernel_id,
           CAST(NULL AS VARCHAR) AS library, CAST(NULL AS VARCHAR) AS op_class, 1 AS models, l.model AS model_list,
           CAST(round(avg(l.launches)) AS BIGINT) AS launches, avg(l.gpu_time_ns) AS gpu_time_ns,
           concat(min(l.evidence), ' (mean of ', CAST(count(*) AS VARCHAR), ' timeline run(s))') AS evidence,
           avg(l.est_time_saved_ns) AS est_time_saved_ns,
           'ESTIMATE (launch_bound): the idle time between kernels above the run''s smallest gap, which a CUDA Graph (or a compiler that fuses the kernels) removes; wall time, not kernel time, and part of it is profiler overhead' AS assumption,
           'launch-bound run' AS fix_key, min(ms.framework) AS framework,
           'timeline' AS time_basis
    FROM launch_bound l LEFT JOIN model_stack ms ON ms.model = l.model
    WHERE l.subject = '(whole run)'
    GROUP BY l.model
), seed_low_l2 AS (
    -- the seed's signals as it computed them: memory = max(DRAM %, memory SOL %) >= memory_pct with L2 hit <
    -- l2_hit_pct; tensor pipe (active basis) < tensor_pipe_low_pct on GEMM kernels; registers among the binding
    -- limits (ties included) on Latency-Occupancy launches with low achieved occupancy; tiny grids launched often
    SELECT 'memory-bound with low L2 hit' AS signal, min(b.kernel_base) AS subject, b.kernel_id, min(b.library) AS library,
           min(b.op_class) AS op_class, count(DISTINCT b.model) AS models,
           array_to_string(list_sort(list(DISTINCT b.model)), ',') AS model_list, count(*) AS launches,
           CAST(sum(b.duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('memory_pct ', CAST(round(sum(b.memory_pct * b.duration_ns) / NULLIF(sum(b.duration_ns), 0), 1) AS VARCHAR),
                  ', l2_hit_pct ', CAST(round(sum(b.l2_hit_pct * b.duration_ns) / NULLIF(sum(b.duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted)') AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: a low L2 hit rate says nothing about a streaming kernel (see DRAM-bound with reuse failure)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis
    FROM launches b CROSS JOIN t
    WHERE b.memory_pct >= t.memory_pct AND b.l2_hit_pct < t.l2_hit_pct AND b.duration_ns >= t.tiny_kernel_ns
    GROUP BY b.kernel_id
), seed_gemm_tensor AS (
    SELECT 'GEMM-class kernel with low tensor-pipe use' AS signal, min(k.kernel_base) AS subject, k.kernel_id, min(k.library) AS library,
           min(k.op_class) AS op_class, count(DISTINCT k.model) AS models,
           array_to_string(list_sort(list(DISTINCT k.model)), ',') AS model_list, count(*) AS launches,
           CAST(sum(k.duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('tensor_pipe_pct ', CAST(round(sum(k.tensor_pipe_pct * k.duration_ns) / NULLIF(sum(k.duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted) < ', CAST(max(t.tensor_pipe_low_pct) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: catches trivial GEMMs and misses convolutions (see GEMM/conv/attention at low tensor efficiency)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis
    FROM kernels k CROSS JOIN t
    WHERE k.op_class = 'gemm' AND k.tensor_pipe_pct IS NOT NULL
    GROUP BY k.kernel_id
    HAVING sum(k.tensor_pipe_pct * k.duration_ns) / NULLIF(sum(k.duration_ns), 0) < max(t.tensor_pipe_low_pct)
), seed_register AS (
    SELECT 'register-limited occupancy in a kernel family' AS signal, o.kernel_base AS subject,
           CAST(NULL AS VARCHAR) AS kernel_id, min(o.library) AS library, min(o.op_class) AS op_class,
           count(DISTINCT o.model) AS models, array_to_string(list_sort(list(DISTINCT o.model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(o.duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('registers bind in ', CAST(count(*) AS VARCHAR), ' launches; achieved_occupancy_pct ',
                  CAST(round(sum(o.achieved_occupancy_pct * o.duration_ns) / NULLIF(sum(o.duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted); registers_per_thread ', CAST(min(o.registers_per_thread) AS VARCHAR), '-',
                  CAST(max(o.registers_per_thread) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: counts ties with other limits and warp-specialised kernels (see register-limited occupancy)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis
    FROM launches o CROSS JOIN t
    WHERE o.seed_class = 'Latency-Occupancy' AND o.binding_limit LIKE '%registers%'
      AND o.achieved_occupancy_pct < t.low_occupancy_pct
    GROUP BY o.kernel_base
), seed_tiny_grids AS (
    SELECT 'tiny grid launched many times (fusion or CUDA Graph candidate)' AS signal, min(k.kernel_base) AS subject,
           k.kernel_id, min(k.library) AS library, min(k.op_class) AS op_class,
           count(DISTINCT k.model) AS models, array_to_string(list_sort(list(DISTINCT k.model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(k.duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat(CAST(count(*) AS VARCHAR), ' launches, median ', CAST(median(k.duration_ns) AS VARCHAR),
                  ' ns, median grid ', CAST(median(k.grid_size) AS VARCHAR), ' blocks, waves_per_sm <= ',
                  CAST(max(k.waves_per_sm) AS VARCHAR)) AS evidence,
           CAST(NULL AS DOUBLE) AS est_time_saved_ns,
           'seed heuristic, kept for comparison: ncu replay durations (see fusable chain of small kernels, launch-bound run)' AS assumption,
           'seed heuristic' AS fix_key, CAST(NULL AS VARCHAR) AS framework, 'ncu replay' AS time_basis
    FROM kernels k CROSS JOIN t
    WHERE k.duration_ns < t.tiny_kernel_ns AND (k.waves_per_sm < 1 OR k.grid_size < k.sm_count)
    GROUP BY k.kernel_id
    HAVING count(*) >= max(t.many_launches)
), calibrated AS (
    SELECT * FROM misaligned
    UNION ALL SELECT * FROM low_gemm
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
), signals AS (
    SELECT calibrated.*, 'calibrated' AS source FROM calibrated
    UNION ALL
    SELECT seed.*, 'seed heuristic' AS source FROM seed
), owners AS (
    -- each signalled kernel's library, implementation, op class and stack, for its library's knob
    SELECT DISTINCT s.kernel_id, s.library, i.implementation, s.op_class, s.framework
    FROM signals s
    JOIN (SELECT kernel_id, min(implementation) AS implementation
          FROM (SELECT kernel_id, implementation FROM kernels UNION ALL SELECT kernel_id, implementation FROM kernel_launches) u
          GROUP BY kernel_id) i ON i.kernel_id = s.kernel_id
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
            ELSE coalesce(f_stack.fix, f_any.fix) END AS fix, s.time_basis, s.source, s.framework
FROM signals s LEFT JOIN totals tot ON tot.time_basis = s.time_basis
LEFT JOIN library_fix lf ON lf.kernel_id = s.kernel_id AND lf.library = s.library AND lf.op_class = s.op_class
     AND lf.framework IS NOT DISTINCT FROM s.framework
LEFT JOIN signal_fixes f_stack ON f_stack.fix_key = s.fix_key AND f_stack.framework = s.framework
LEFT JOIN signal_fixes f_any ON f_any.fix_key = s.fix_key AND f_any.framework = '*'
ORDER BY s.source, s.signal, s.est_time_saved_ns DESC NULLS LAST, s.models DESC, s.gpu_time_ns DESC, s.subject
