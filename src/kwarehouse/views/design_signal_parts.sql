-- Design signals judged on ncu launches, per model, GPU and kernel identity: for each signal (DRAM-bound with reuse failure, register-limited occupancy, grid too small, partial last wave, GEMM/conv/attention at low tensor efficiency, and the seed's four), the launches of this partition it judges and the sums its fleet-wide row adds up: launches, real time, estimate, floor and the counters of its evidence.
-- Each row's selection, real time (time_basis, real_ns: a launch's ncu duration scaled to the timeline time
-- of its kernel where the model has a timeline on that GPU), estimate and cut-offs are those of the
-- fleet-wide design signals, which this view serves: they read these rows, not every launch, so a commit
-- recomputes only the partitions it changed. Counters (dram_pct, sm_pct, ...): time-weighted over the launches
-- with that counter, *_weight_ns: their ncu duration (NULL where the signal does not use the counter).
-- floor_ns (ncu replay rows): the summed floor of the launches (max of the DRAM floor: compulsory bytes at the
-- DRAM peak, and the compute floor: FLOPs at achievable_tensor_pct or achievable_cuda_core_pct of their roof),
-- floor_basis that of the launch with the highest floor (max_floor_ns). A timeline row's floor takes the
-- GPU's L2 size and L2 peak over every partition, so it is not summed here: the row holds launches of one
-- floor_bytes, dram_floor_ns, warm_compute_floor_ns (the compute floor at the GPU's highest clock;
-- clock_scaled where the measured clock was lower), achievable_pct and roof, and launch_scale (real launches
-- per ncu launch). The seed's tiny-grid signal keeps one row per duration_ns and grid_size, for its medians.
WITH timeline_time AS (
    -- each kernel's time and launches on the partition's timelines (nsys, PyTorch traces; an nsys stats run
    -- without launch rows through its kernel summary): what the real-GPU-time view's timeline rows add up
    SELECT model, gpu, kernel_id, sum(gpu_time_ns) AS timeline_ns, CAST(sum(launches) AS DOUBLE) AS timeline_launches
    FROM (SELECT model, gpu, kernel_id, CAST(1 AS BIGINT) AS launches, CAST(duration_ns AS DOUBLE) AS gpu_time_ns
          FROM kernel_launches
          WHERE activity = 'kernel'
          UNION ALL
          SELECT model, gpu, kernel_id, CAST(instances AS BIGINT) AS launches, CAST(total_ns AS DOUBLE) AS gpu_time_ns
          FROM kernel_summaries
          WHERE report = 'cuda_gpu_kern_sum' AND run_id NOT IN (SELECT DISTINCT run_id FROM kernel_launches)) t
    GROUP BY model, gpu, kernel_id
), timeline_models AS (
    SELECT DISTINCT model, gpu FROM timeline_time
), real_weights AS (
    -- per kernel: how much real time (and how many real launches) one ns (one launch) of its ncu replays
    -- stands for (0 for a kernel the model's timelines never ran); 1 where the model has no timeline on that GPU
    SELECT n.model, n.gpu, n.kernel_id,
           CASE WHEN tm.model IS NULL THEN 'ncu replay' ELSE 'timeline' END AS time_basis,
           CASE WHEN tm.model IS NULL THEN 1.0 ELSE coalesce(r.timeline_ns / NULLIF(n.ncu_ns, 0), 0.0) END AS time_scale,
           CASE WHEN tm.model IS NULL THEN 1.0 ELSE coalesce(r.timeline_launches, 0.0) / n.ncu_launches END AS launch_scale
    FROM (SELECT model, gpu, kernel_id, ncu_ns, CAST(ncu_launches AS DOUBLE) AS ncu_launches
          FROM partition_kernels WHERE ncu_launches > 0) n
    LEFT JOIN timeline_models tm ON tm.model = n.model AND tm.gpu = n.gpu
    LEFT JOIN timeline_time r ON r.model = n.model AND r.gpu = n.gpu AND r.kernel_id = n.kernel_id
), launch_floors AS (
    -- each ncu launch's floor, the time it cannot beat: max(memory floor: the bytes it must move (its op's
    -- compulsory bytes; a GEMM's A, B and C once) at the DRAM peak, compute floor: its FLOPs (the op's from
    -- shapes, else executed ones from the counters) at achievable_tensor_pct of its tensor roof or
    -- achievable_cuda_core_pct of its CUDA-core roof). A tensor kernel whose tensor work was not counted has no
    -- compute floor (its counted FLOPs are its epilogue's); a launch with neither keeps floor 0. For a timeline
    -- (warm caches, no clock measured) the ingredients: its bytes and the compute floor at the highest clock
    SELECT f.run_id, f.launch_id, f.grid_size, f.sm_count, f.bytes, f.dram_floor_ns, f.compute_floor_ns,
           f.compute_floor_ns * f.clock_ratio AS warm_compute_floor_ns, f.clock_ratio < 1 AS clock_scaled,
           f.achievable_pct, f.roof,
           greatest(coalesce(f.dram_floor_ns, 0), coalesce(f.compute_floor_ns, 0)) AS floor_ns,
           CASE WHEN f.dram_floor_ns IS NULL AND f.compute_floor_ns IS NULL THEN 'none known'
                WHEN coalesce(f.dram_floor_ns, 0) >= coalesce(f.compute_floor_ns, 0) THEN 'DRAM: compulsory bytes at the DRAM peak'
                ELSE concat('compute: FLOPs at ', CAST(f.achievable_pct AS VARCHAR), ' % of the ', f.roof, ' peak') END AS floor_basis
    FROM (
        SELECT b.*, b.bytes / NULLIF(b.peak_dram_bytes_per_s, 0) * 1e9 AS dram_floor_ns
        FROM (
            SELECT k.run_id, k.launch_id, k.grid_size, k.sm_count, k.peak_dram_bytes_per_s,
                   coalesce(c.compulsory_bytes,
                            CAST(k.gemm_batch AS DOUBLE) * (CAST(k.gemm_m AS DOUBLE) * k.gemm_k + CAST(k.gemm_k AS DOUBLE) * k.gemm_n
                                                            + CAST(k.gemm_m AS DOUBLE) * k.gemm_n)
                                * CASE WHEN k.math_dtype = 'fp64' THEN 8 WHEN k.math_dtype IN ('fp32', 'tf32') THEN 4
                                       WHEN k.math_dtype IN ('bf16', 'fp16') THEN 2
                                       WHEN k.math_dtype IN ('fp8_e4m3', 'fp8_e5m2', 'int8') THEN 1 END) AS bytes,
                   CASE WHEN k.flops > 0 AND NOT coalesce(k.op_class IN ('gemm', 'conv', 'attention')
                                                          AND k.flops_source = 'ncu CUDA-core counters'
                                                          AND coalesce(k.math_dtype, 'unknown') NOT IN ('fp32', 'fp64'), false)
                        THEN k.flops / NULLIF(k.peak_flops_per_s * CASE WHEN k.peak_flops_per_s IN (k.peak_fp32_flops_per_s, k.peak_fp64_flops_per_s)
                                                                        THEN t.achievable_cuda_core_pct ELSE t.achievable_tensor_pct END / 100.0, 0) * 1e9
                   END AS compute_floor_ns,
                   -- the measured clock over the highest, where the roof is ncu's peak per cycle x that clock (tensor
                   -- counters): the compute floor at the highest clock (a timeline measures none)
                   CASE WHEN k.flops_source = 'ncu tensor counters'
                        THEN coalesce(least(1.0, k.sm_clock_hz / NULLIF(k.max_sm_clock_hz, 0)), 1.0) ELSE 1.0 END AS clock_ratio,
                   CASE WHEN k.peak_flops_per_s IN (k.peak_fp32_flops_per_s, k.peak_fp64_flops_per_s) THEN t.achievable_cuda_core_pct
                        ELSE t.achievable_tensor_pct END AS achievable_pct,
                   CASE WHEN k.peak_flops_per_s = k.peak_fp64_flops_per_s THEN 'fp64 CUDA-core'
                        WHEN k.peak_flops_per_s = k.peak_fp32_flops_per_s THEN 'fp32 CUDA-core'
                        ELSE concat(coalesce(k.math_dtype, 'unknown'), ' dense tensor') END AS roof
            FROM kernels k CROSS JOIN thresholds t
            LEFT JOIN op_compulsory_bytes c ON c.run_id = k.run_id AND c.launch_id = k.launch_id
        ) b
    ) f
), weighted AS (
    -- each ncu launch with its real time and floor: summed where the floor is the launch's own (ncu replay),
    -- its ingredients kept where it needs the GPU's L2 (timeline)
    SELECT k.run_id, k.launch_id, w.time_basis, k.duration_ns * w.time_scale AS real_ns, w.launch_scale,
           CASE WHEN w.time_basis = 'ncu replay' THEN lf.floor_ns * w.launch_scale END AS real_floor_ns,
           CASE WHEN w.time_basis = 'ncu replay' THEN lf.floor_basis END AS floor_basis,
           CASE WHEN w.time_basis = 'timeline' THEN lf.bytes END AS floor_bytes,
           CASE WHEN w.time_basis = 'timeline' THEN lf.dram_floor_ns END AS dram_floor_ns,
           CASE WHEN w.time_basis = 'timeline' THEN lf.warm_compute_floor_ns END AS warm_compute_floor_ns,
           CASE WHEN w.time_basis = 'timeline' THEN lf.clock_scaled END AS clock_scaled,
           CASE WHEN w.time_basis = 'timeline' THEN lf.achievable_pct END AS achievable_pct,
           CASE WHEN w.time_basis = 'timeline' THEN lf.roof END AS roof,
           lf.grid_size, lf.sm_count
    FROM kernels k
    JOIN real_weights w ON w.model = k.model AND w.gpu = k.gpu AND w.kernel_id = k.kernel_id
    JOIN launch_floors lf ON lf.run_id = k.run_id AND lf.launch_id = k.launch_id
), launches AS (
    -- bottleneck_class and occupancy read once; the launch-judged signals below work from this
    SELECT b.run_id, b.launch_id, b.model, b.gpu, b.kernel_id, b.library, b.op_class, b.kernel_base, b.bottleneck,
           b.limiting_unit, b.seed_class, b.duration_ns, b.sm_pct, b.dram_pct, b.mem_pct, b.memory_pct, b.l2_hit_pct,
           b.waves_per_sm, b.dram_bytes, b.compulsory_bytes, b.dram_to_compulsory, b.achieved_occupancy_pct,
           o.occupancy_limiter, o.limiter_evidence, o.binding_limit, o.registers_per_thread,
           w.time_basis, w.real_ns, w.launch_scale, w.real_floor_ns, w.floor_basis, w.floor_bytes, w.dram_floor_ns, w.warm_compute_floor_ns, w.clock_scaled, w.achievable_pct, w.roof, w.grid_size, w.sm_count
    FROM bottleneck_class b JOIN occupancy o ON o.run_id = b.run_id AND o.launch_id = b.launch_id
    JOIN weighted w ON w.run_id = b.run_id AND w.launch_id = b.launch_id
), tensor_launches AS (
    -- ncu launches of conv and attention kernels, and GEMM kernels without a framework op (the GEMM efficiency view
    -- covers those with one)
    SELECT k.model, k.gpu, k.kernel_id, k.kernel_base, k.library, k.op_class, k.duration_ns, k.flops, k.framework_op,
           k.op_shapes, k.math_dtype,
           CASE WHEN k.flops_source = 'ncu tensor counters' THEN k.pct_of_peak
                WHEN regexp_matches(lower(k.kernel_name), '(hmma|1688|16816|s884|h884|cutlass_75|cutlass_80)')
                    THEN k.tensor_util_pct / 2
                ELSE k.tensor_util_pct END AS tensor_efficiency_pct,
           CASE WHEN k.flops_source = 'ncu tensor counters' THEN 'tensor FLOPs / dense peak (ncu tensor counters)'
                WHEN regexp_matches(lower(k.kernel_name), '(hmma|1688|16816|s884|h884|cutlass_75|cutlass_80)')
                    THEN 'tensor pipe % of elapsed cycles / 2 (mma.sync kernel)'
                ELSE 'tensor pipe % of elapsed cycles' END AS efficiency_basis,
           w.time_basis, w.real_ns, w.launch_scale, w.real_floor_ns, w.floor_basis, w.floor_bytes, w.dram_floor_ns, w.warm_compute_floor_ns, w.clock_scaled, w.achievable_pct, w.roof, w.grid_size, w.sm_count
    FROM kernels k
    JOIN weighted w ON w.run_id = k.run_id AND w.launch_id = k.launch_id
    WHERE (k.op_class IN ('conv', 'attention') OR (k.op_class = 'gemm' AND k.framework_op IS NULL))
      AND k.tensor_util_pct IS NOT NULL
), judged AS (
    -- one row per launch and signal that judges it, with that signal's estimate for the launch
    SELECT 'DRAM-bound with reuse failure' AS signal, b.model, b.gpu, b.kernel_id, b.kernel_base, b.library, b.op_class,
           b.time_basis, b.duration_ns, b.real_ns, b.launch_scale, b.real_floor_ns, b.floor_basis, b.floor_bytes,
           b.dram_floor_ns, b.warm_compute_floor_ns, b.clock_scaled, b.achievable_pct, b.roof,
           b.real_ns * (1 - 1 / b.dram_to_compulsory) AS est_ns,
           b.dram_pct, b.dram_bytes, b.compulsory_bytes, CAST(NULL AS DOUBLE) AS sm_pct, CAST(NULL AS DOUBLE) AS mem_pct,
           CAST(NULL AS DOUBLE) AS occupancy_pct, CAST(NULL AS DOUBLE) AS tensor_efficiency_pct,
           CAST(NULL AS DOUBLE) AS memory_pct, CAST(NULL AS DOUBLE) AS l2_hit_pct, CAST(NULL AS DOUBLE) AS tensor_pipe_pct,
           CAST(NULL AS DOUBLE) AS waves_per_sm, CAST(NULL AS BIGINT) AS grid_size, CAST(NULL AS DOUBLE) AS sm_count,
           CAST(NULL AS BIGINT) AS registers_per_thread, CAST(NULL AS VARCHAR) AS limiter_evidence,
           CAST(NULL AS VARCHAR) AS bottleneck, CAST(NULL AS VARCHAR) AS efficiency_basis,
           CAST(NULL AS VARCHAR) AS framework_op, CAST(NULL AS VARCHAR) AS op_shapes, CAST(NULL AS VARCHAR) AS math_dtype,
           CAST(NULL AS DOUBLE) AS tiny_duration_ns, CAST(NULL AS BIGINT) AS tiny_grid_size
    FROM launches b
    WHERE b.bottleneck = 'cache-inefficient'
    UNION ALL
    SELECT 'register-limited occupancy', o.model, o.gpu, o.kernel_id, o.kernel_base, o.library, o.op_class,
           o.time_basis, o.duration_ns, o.real_ns, o.launch_scale, o.real_floor_ns, o.floor_basis, o.floor_bytes,
           o.dram_floor_ns, o.warm_compute_floor_ns, o.clock_scaled, o.achievable_pct, o.roof,
           o.real_ns * r.speedup_pct / 100,
           NULL, NULL, NULL, NULL, NULL, o.achieved_occupancy_pct, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           o.registers_per_thread, o.limiter_evidence, o.bottleneck, NULL, NULL, NULL, NULL, NULL, NULL
    FROM launches o
    LEFT JOIN rules r ON r.run_id = o.run_id AND r.launch_id = o.launch_id AND r.rule_name = 'TheoreticalOccupancy'
         AND r.speedup_type = 'global'
    WHERE o.occupancy_limiter = 'registers' AND o.bottleneck IN ('latency-bound', 'occupancy-limited')
    UNION ALL
    SELECT 'grid too small to fill the GPU', b.model, b.gpu, b.kernel_id, b.kernel_base, b.library, b.op_class,
           b.time_basis, b.duration_ns, b.real_ns, b.launch_scale, b.real_floor_ns, b.floor_basis, b.floor_bytes,
           b.dram_floor_ns, b.warm_compute_floor_ns, b.clock_scaled, b.achievable_pct, b.roof,
           b.real_ns * (1 - least(b.grid_size, b.sm_count) / b.sm_count),
           NULL, NULL, NULL, b.sm_pct, b.mem_pct, NULL, NULL, NULL, NULL, NULL, b.waves_per_sm, b.grid_size, b.sm_count,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM launches b CROSS JOIN thresholds t
    -- a grid that covers full_wave_pct of the SMs (128 tiles on 132 SMs: 97 %) fills the GPU
    WHERE b.bottleneck = 'grid-too-small' AND 100.0 * least(b.grid_size, b.sm_count) / b.sm_count < t.full_wave_pct
    UNION ALL
    SELECT 'partial last wave (wave quantization)', b.model, b.gpu, b.kernel_id, b.kernel_base, b.library, b.op_class,
           b.time_basis, b.duration_ns, b.real_ns, b.launch_scale, b.real_floor_ns, b.floor_basis, b.floor_bytes,
           b.dram_floor_ns, b.warm_compute_floor_ns, b.clock_scaled, b.achievable_pct, b.roof,
           b.real_ns * (ceil(b.waves_per_sm) - b.waves_per_sm) / ceil(b.waves_per_sm),
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, b.waves_per_sm, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM launches b CROSS JOIN thresholds t
    -- more than one wave, the last one less than full_wave_pct full (88-99 % full last waves save little)
    WHERE b.bottleneck NOT IN ('launch-overhead', 'grid-too-small') AND b.waves_per_sm > 1
      AND 100.0 * (b.waves_per_sm - ceil(b.waves_per_sm) + 1) < t.full_wave_pct
      -- a streaming kernel at the DRAM roof shares the bandwidth among fewer blocks in its last wave: no tail cost
      AND NOT (b.bottleneck IN ('memory-bound', 'cache-inefficient') AND b.limiting_unit = 'dram')
    UNION ALL
    SELECT 'GEMM/conv/attention at low tensor efficiency', l.model, l.gpu, l.kernel_id, l.kernel_base, l.library, l.op_class,
           l.time_basis, l.duration_ns, l.real_ns, l.launch_scale, l.real_floor_ns, l.floor_basis, l.floor_bytes,
           l.dram_floor_ns, l.warm_compute_floor_ns, l.clock_scaled, l.achievable_pct, l.roof,
           l.real_ns * greatest(0, 1 - l.tensor_efficiency_pct / t.tensor_efficiency_target_pct),
           NULL, NULL, NULL, NULL, NULL, NULL, l.tensor_efficiency_pct, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, l.efficiency_basis, l.framework_op, l.op_shapes, l.math_dtype, NULL, NULL
    FROM tensor_launches l CROSS JOIN thresholds t
    WHERE coalesce(l.flops, t.trivial_gemm_flops) >= t.trivial_gemm_flops
    UNION ALL
    -- the seed's signals as it computed them, on ncu durations: memory = max(DRAM %, memory SOL %) >= memory_pct
    -- with L2 hit < l2_hit_pct; tensor pipe on GEMM kernels (fleet-wide mean below tensor_pipe_low_pct);
    -- registers among the binding limits (ties included) on Latency-Occupancy launches with low achieved
    -- occupancy (grouped by kernel_base: kernel_id NULL); tiny grids (launched many times fleet-wide)
    SELECT 'memory-bound with low L2 hit', b.model, b.gpu, b.kernel_id, b.kernel_base, b.library, b.op_class,
           'ncu replay', b.duration_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, b.memory_pct, b.l2_hit_pct, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM launches b CROSS JOIN thresholds t
    WHERE b.memory_pct >= t.memory_pct AND b.l2_hit_pct < t.l2_hit_pct AND b.duration_ns >= t.tiny_kernel_ns
    UNION ALL
    SELECT 'GEMM-class kernel with low tensor-pipe use', k.model, k.gpu, k.kernel_id, k.kernel_base, k.library, k.op_class,
           'ncu replay', k.duration_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, k.tensor_pipe_pct, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM kernels k
    WHERE k.op_class = 'gemm' AND k.tensor_pipe_pct IS NOT NULL
    UNION ALL
    SELECT 'register-limited occupancy in a kernel family', o.model, o.gpu, NULL, o.kernel_base, o.library, o.op_class,
           'ncu replay', o.duration_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, o.achieved_occupancy_pct, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           o.registers_per_thread, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    FROM launches o CROSS JOIN thresholds t
    WHERE o.seed_class = 'Latency-Occupancy' AND o.binding_limit LIKE '%registers%'
      AND o.achieved_occupancy_pct < t.low_occupancy_pct
    UNION ALL
    SELECT 'tiny grid launched many times (fusion or CUDA Graph candidate)', k.model, k.gpu, k.kernel_id, k.kernel_base,
           k.library, k.op_class, 'ncu replay', k.duration_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, k.waves_per_sm, NULL, NULL,
           NULL, NULL, NULL, NULL, NULL, NULL, NULL, k.duration_ns, k.grid_size
    FROM kernels k CROSS JOIN thresholds t
    WHERE k.duration_ns < t.tiny_kernel_ns AND (k.waves_per_sm < 1 OR k.grid_size < k.sm_count)
)
SELECT model, gpu, kernel_id, kernel_base, time_basis, signal, tiny_duration_ns, tiny_grid_size,
       min(library) AS library, min(op_class) AS op_class,
       count(*) AS launches, sum(launch_scale) AS real_launches, CAST(sum(duration_ns) AS DOUBLE) AS ncu_ns,
       sum(real_ns) AS real_ns, sum(est_ns) AS est_time_saved_ns,
       sum(real_floor_ns) AS floor_ns, arg_max(floor_basis, real_floor_ns) AS floor_basis, max(real_floor_ns) AS max_floor_ns,
       max(launch_scale) AS launch_scale, floor_bytes, dram_floor_ns, warm_compute_floor_ns, clock_scaled, achievable_pct, roof,
       sum(dram_pct * duration_ns) / NULLIF(sum(CASE WHEN dram_pct IS NOT NULL THEN duration_ns END), 0) AS dram_pct,
       sum(CASE WHEN dram_pct IS NOT NULL THEN duration_ns END) AS dram_weight_ns,
       sum(dram_bytes) AS dram_bytes, sum(compulsory_bytes) AS compulsory_bytes,
       sum(sm_pct * duration_ns) / NULLIF(sum(CASE WHEN sm_pct IS NOT NULL THEN duration_ns END), 0) AS sm_pct,
       sum(CASE WHEN sm_pct IS NOT NULL THEN duration_ns END) AS sm_weight_ns,
       sum(mem_pct * duration_ns) / NULLIF(sum(CASE WHEN mem_pct IS NOT NULL THEN duration_ns END), 0) AS mem_pct,
       sum(CASE WHEN mem_pct IS NOT NULL THEN duration_ns END) AS mem_weight_ns,
       sum(occupancy_pct * duration_ns) / NULLIF(sum(CASE WHEN occupancy_pct IS NOT NULL THEN duration_ns END), 0) AS achieved_occupancy_pct,
       sum(CASE WHEN occupancy_pct IS NOT NULL THEN duration_ns END) AS achieved_occupancy_weight_ns,
       sum(tensor_efficiency_pct * duration_ns) / NULLIF(sum(CASE WHEN tensor_efficiency_pct IS NOT NULL THEN duration_ns END), 0) AS tensor_efficiency_pct,
       sum(CASE WHEN tensor_efficiency_pct IS NOT NULL THEN duration_ns END) AS tensor_efficiency_weight_ns,
       sum(memory_pct * duration_ns) / NULLIF(sum(CASE WHEN memory_pct IS NOT NULL THEN duration_ns END), 0) AS memory_pct,
       sum(CASE WHEN memory_pct IS NOT NULL THEN duration_ns END) AS memory_weight_ns,
       sum(l2_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l2_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l2_hit_pct,
       sum(CASE WHEN l2_hit_pct IS NOT NULL THEN duration_ns END) AS l2_hit_weight_ns,
       sum(tensor_pipe_pct * duration_ns) / NULLIF(sum(CASE WHEN tensor_pipe_pct IS NOT NULL THEN duration_ns END), 0) AS tensor_pipe_pct,
       sum(CASE WHEN tensor_pipe_pct IS NOT NULL THEN duration_ns END) AS tensor_pipe_weight_ns,
       min(waves_per_sm) AS min_waves_per_sm, max(waves_per_sm) AS max_waves_per_sm,
       min(100.0 * (waves_per_sm - ceil(waves_per_sm) + 1)) AS min_last_wave_pct,
       max(100.0 * (waves_per_sm - ceil(waves_per_sm) + 1)) AS max_last_wave_pct,
       min(grid_size) AS min_grid_size, max(grid_size) AS max_grid_size, max(sm_count) AS sm_count,
       min(registers_per_thread) AS min_registers_per_thread, max(registers_per_thread) AS max_registers_per_thread,
       min(limiter_evidence) AS limiter_evidence, min(bottleneck) AS bottleneck, min(efficiency_basis) AS efficiency_basis,
       min(framework_op) AS framework_op, min(op_shapes) AS op_shapes, min(math_dtype) AS math_dtype
FROM judged
GROUP BY model, gpu, kernel_id, kernel_base, time_basis, signal, tiny_duration_ns, tiny_grid_size,
         floor_bytes, dram_floor_ns, warm_compute_floor_ns, clock_scaled, achievable_pct, roof
ORDER BY model, gpu, signal, kernel_id, kernel_base
