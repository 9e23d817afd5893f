-- Bottleneck of each launch (compute-bound, memory-bound, cache-inefficient, latency-bound, occupancy-limited, grid-too-small, launch-overhead or mixed; 'not enough data' where the export lacks a metric the verdict needs, named in missing_data), its limiting unit (tensor, fma, alu, fp64, xu, issue; dram, l2, l1; grid, latency, registers, launch), the seed heuristic's class, ncu's own SOLBottleneck verdict, whether they agree, the evidence and the first fix to try for the run's stack.
-- Rules, first match wins, cut-offs from bottleneck_thresholds (ncu's SOLBottleneck rule uses the same 60/80/10):
--   no duration (neither ncu's nor a timeline's)                -> not enough data (an ncu --metrics list)
--   real duration < tiny_kernel_ns                              -> launch-overhead (unit launch); real = median
--       duration of the same kernel and launch shape in a timeline (nsys/PyTorch) of the model, else ncu's
--       (ncu replays small kernels 1.6-2.5x longer than they run)
--   SM or memory SOL missing                                    -> not enough data (no SpeedOfLight section)
--   SM or memory SOL >= compute_pct/memory_pct:
--     tensor pipe >= tensor_roof_pct                            -> compute-bound (tensor): at the compute roof,
--                                                                  whatever memory unit reads busier
--     both < 80 and within balanced_pct of each other           -> mixed (unit 'compute unit+memory level')
--     SM >= memory                                              -> compute-bound, unit = busiest pipe (tensor,
--                                                                  fp64, fma, alu, xu) or 'issue' when none is
--                                                                  within 10 points of the SM SOL
--     memory level DRAM and DRAM bytes > reuse_factor x compulsory -> cache-inefficient (a reuse failure)
--     otherwise                                                 -> memory-bound, unit = busiest level of ncu's
--                                                                  memory SOL breakdown: dram, l2 (lts__*), l1
--                                                                  (l1tex__*: LSU wavefronts, data banks, ...)
--   no waves per SM                                             -> not enough data (no LaunchStats section)
--   waves per SM < full_wave_pct / 100 (0.85)                   -> grid-too-small (unit grid): SMs left idle; a
--       single wave at least that full (128 tiles on 132 SMs: 0.97) fills the GPU, whatever ncu's grid rule
--       says (it fires on any grid with fewer blocks than SMs): at most 1 - waves to win, other limits decide
--   no achieved occupancy                                       -> not enough data (no Occupancy section: the
--                                                                  occupancy test below cannot be made)
--   a strict occupancy limiter (occupancy view) and achieved occupancy < low_occupancy_pct
--                                                               -> occupancy-limited (unit registers, shared_mem, ...)
--   otherwise                                                   -> latency-bound (unit latency; warp_stalls says on what)
-- decided_by of a 'not enough data' launch reads "not enough data: <what is missing>". fix comes from
-- bottleneck_fixes for the class, unit and the run's stack (run_framework: PyTorch, XLA, CuPy; '*' rows
-- for any): no torch.compile for a CUDA C, OpenMP or CuPy application.
-- Where that fix edits the kernel's code (edits_kernel) and the kernel's library owns it (a library_fixes row for
-- its library, implementation, op class and stack: cuBLAS, cuDNN, Inductor, XLA, NCCL, ...), the fix is that
-- library's knob instead: its user cannot recompile cuDNN's depthwise convolution or an Inductor template.
-- Compulsory bytes (unique inputs + output of the op, from the framework op's shapes and dtype) come from
-- op_compulsory_bytes; where they are unknown there is no reuse test and no launch is cache-inefficient.
-- seed_class is the seed heuristic exactly as the project began with it (issue 5): SM % >= 60 and DRAM % >= 60
-- -> Mixed; SM >= 60 -> Compute; DRAM >= 60 -> Memory; both low and issue slots idle >= 30 % ->
-- Latency-Occupancy; otherwise Mixed.
WITH run_frameworks AS (
    -- run_framework read once (it scans four tables; DuckDB computes a CTE read twice once)
    SELECT run_id, framework FROM run_framework
), unit_metrics AS (
    -- per launch: the busiest unit of each memory level in ncu's memory SOL breakdown, the compute pipes
    -- (all % of peak over elapsed cycles) and DRAM bytes where only a rate was exported
    SELECT run_id, launch_id,
           max(CASE WHEN metric LIKE 'l1tex%' THEN value END) AS l1_pct,
           max(CASE WHEN metric LIKE 'lts%' THEN value END) AS l2_pct,
           max(CASE WHEN metric = 'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed' THEN value END) AS fma_pct,
           max(CASE WHEN metric = 'sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed' THEN value END) AS alu_pct,
           max(CASE WHEN metric = 'sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed' THEN value END) AS fp64_pct,
           max(CASE WHEN metric = 'sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed' THEN value END) AS xu_pct,
           max(CASE WHEN metric = 'sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed' THEN value END) AS issue_pct,
           max(CASE WHEN metric = 'dram__bytes.sum.per_second' THEN value END) AS dram_bytes_per_s
    FROM metrics
    WHERE metric IN (
        'l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed',
        'l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed',
        'l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed',
        'l1tex__data_pipe_tex_wavefronts.avg.pct_of_peak_sustained_elapsed',
        'l1tex__f_wavefronts.avg.pct_of_peak_sustained_elapsed',
        'l1tex__lsu_writeback_active.avg.pct_of_peak_sustained_elapsed',
        'l1tex__lsuin_requests.avg.pct_of_peak_sustained_elapsed',
        'l1tex__m_l1tex2xbar_req_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'l1tex__m_xbar2l1tex_read_sectors.avg.pct_of_peak_sustained_elapsed',
        'l1tex__tex_writeback_active.avg.pct_of_peak_sustained_elapsed',
        'l1tex__texin_sm2tex_req_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'l1tex__tmain_requests.avg.pct_of_peak_sustained_elapsed',
        'lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'lts__d_sectors.avg.pct_of_peak_sustained_elapsed',
        'lts__d_sectors_fill_device.avg.pct_of_peak_sustained_elapsed',
        'lts__d_sectors_fill_sysmem.avg.pct_of_peak_sustained_elapsed',
        'lts__lts2xbar_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'lts__t_sectors.avg.pct_of_peak_sustained_elapsed',
        'lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed',
        'lts__xbar2lts_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_elapsed',
        'sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_elapsed',
        'sm__instruction_throughput.avg.pct_of_peak_sustained_elapsed',
        'dram__bytes.sum.per_second')
    GROUP BY run_id, launch_id
), ncu_rule AS (
    -- ncu's SOLBottleneck verdict, parsed from its text (the rule names the busiest memory unit)
    SELECT run_id, launch_id,
           CASE WHEN description LIKE '%grid is too small%' OR description LIKE '%grids that are too small%' THEN 'grid-too-small'
                WHEN description LIKE '%low compute throughput and memory bandwidth%' THEN 'latency'
                WHEN description LIKE '%well-balanced%' THEN 'balanced'
                WHEN description LIKE '%DRAM bottleneck%' OR description LIKE '%analyzing DRAM %' THEN 'memory:dram'
                WHEN description LIKE '%L2 bottleneck%' OR description LIKE '%analyzing L2 %' THEN 'memory:l2'
                WHEN description LIKE '%L1 bottleneck%' OR description LIKE '%analyzing L1 %' THEN 'memory:l1'
                WHEN description LIKE 'Compute is more heavily%' OR description LIKE '%analyzing workloads in the Compute%' THEN 'compute'
                WHEN description LIKE 'Memory is more heavily%' OR description LIKE '%in the Memory Workload%' THEN 'memory'
           END AS ncu_verdict
    FROM rules
    WHERE rule_name = 'SOLBottleneck'
), timeline_shape AS (
    SELECT model, gpu, kernel_id, grid_size, block_size, median(duration_ns) AS real_ns, count(*) AS real_launches
    FROM kernel_launches WHERE activity = 'kernel'
    GROUP BY model, gpu, kernel_id, grid_size, block_size
), timeline_kernel AS (
    SELECT model, gpu, kernel_id, median(duration_ns) AS real_ns, count(*) AS real_launches
    FROM kernel_launches WHERE activity = 'kernel'
    GROUP BY model, gpu, kernel_id
), measured AS (
    SELECT k.run_id, k.launch_id, k.model, k.gpu, k.kernel_id, k.library, k.implementation, k.op_class, k.kernel_base, k.duration_ns,
           k.sm_pct, k.dram_pct, k.mem_pct, k.l2_hit_pct, k.achieved_occupancy_pct, k.issue_active_pct,
           k.waves_per_sm, k.grid_size, k.sm_count, k.tensor_util_pct,
           greatest(coalesce(k.dram_pct, k.mem_pct), coalesce(k.mem_pct, k.dram_pct)) AS memory_pct,
           100 - k.issue_active_pct AS issue_idle_pct,
           u.l1_pct, u.l2_pct, u.fma_pct, u.alu_pct, u.fp64_pct, u.xu_pct, u.issue_pct,
           coalesce(k.dram_bytes, u.dram_bytes_per_s * k.duration_ns / 1e9) AS dram_bytes,
           c.compulsory_bytes, c.compulsory_basis,
           o.warp_specialized, o.occupancy_limiter, o.limiter_evidence,
           n.ncu_verdict,
           coalesce(ts.real_ns, tk.real_ns) AS timeline_ns,
           CASE WHEN ts.real_ns IS NOT NULL THEN concat('timeline median of ', CAST(ts.real_launches AS VARCHAR), ' launches of this shape')
                WHEN tk.real_ns IS NOT NULL THEN concat('timeline median of ', CAST(tk.real_launches AS VARCHAR), ' launches of this kernel')
                ELSE 'ncu (no timeline)' END AS duration_basis,
           -- the busiest pipe and its name; tensor first on ties (it is what tensor kernels are for)
           greatest(coalesce(k.tensor_util_pct, 0), coalesce(u.fp64_pct, 0), coalesce(u.fma_pct, 0),
                    coalesce(u.alu_pct, 0), coalesce(u.xu_pct, 0)) AS top_pipe_pct
    FROM kernels k
    LEFT JOIN unit_metrics u ON u.run_id = k.run_id AND u.launch_id = k.launch_id
    LEFT JOIN occupancy o ON o.run_id = k.run_id AND o.launch_id = k.launch_id
    LEFT JOIN op_compulsory_bytes c ON c.run_id = k.run_id AND c.launch_id = k.launch_id
    LEFT JOIN ncu_rule n ON n.run_id = k.run_id AND n.launch_id = k.launch_id
    LEFT JOIN timeline_shape ts ON ts.model = k.model AND ts.gpu = k.gpu AND ts.kernel_id = k.kernel_id
         AND ts.grid_size = k.grid_size AND ts.block_size = k.block_size
    LEFT JOIN timeline_kernel tk ON tk.model = k.model AND tk.gpu = k.gpu AND tk.kernel_id = k.kernel_id
), units AS (
    SELECT m.*,
           coalesce(m.timeline_ns, m.duration_ns) AS real_duration_ns,
           CASE WHEN m.top_pipe_pct < coalesce(m.sm_pct, 0) - 10 THEN 'issue'
                WHEN coalesce(m.tensor_util_pct, 0) = m.top_pipe_pct THEN 'tensor'
                WHEN coalesce(m.fp64_pct, 0) = m.top_pipe_pct THEN 'fp64'
                WHEN coalesce(m.fma_pct, 0) = m.top_pipe_pct THEN 'fma'
                WHEN coalesce(m.alu_pct, 0) = m.top_pipe_pct THEN 'alu'
                ELSE 'xu' END AS compute_unit,
           CASE WHEN m.l1_pct IS NULL AND m.l2_pct IS NULL THEN
                    CASE WHEN m.dram_pct >= m.mem_pct - 0.01 THEN 'dram' ELSE 'memory' END
                WHEN coalesce(m.dram_pct, 0) >= coalesce(m.l2_pct, 0) AND coalesce(m.dram_pct, 0) >= coalesce(m.l1_pct, 0) THEN 'dram'
                WHEN coalesce(m.l2_pct, 0) >= coalesce(m.l1_pct, 0) THEN 'l2'
                ELSE 'l1' END AS memory_unit,
           m.dram_bytes / NULLIF(m.compulsory_bytes, 0) AS dram_to_compulsory
    FROM measured m
), gaps AS (
    -- the first metric a rule needs that the launch lacks, in the order the rules below test them
    SELECT u.*,
           CASE WHEN u.real_duration_ns IS NULL
                    THEN 'no duration (gpu__time_duration, in ncu''s SpeedOfLight section) and no timeline of this kernel'
                WHEN u.real_duration_ns < t.tiny_kernel_ns THEN NULL
                WHEN u.sm_pct IS NULL AND u.mem_pct IS NULL
                    THEN 'no SM or memory throughput (ncu''s SpeedOfLight section)'
                WHEN u.sm_pct IS NULL THEN 'no SM throughput (sm__throughput, in ncu''s SpeedOfLight section)'
                WHEN u.mem_pct IS NULL
                    THEN 'no memory throughput (gpu__compute_memory_throughput, in ncu''s SpeedOfLight section)'
                WHEN u.sm_pct >= t.compute_pct OR u.mem_pct >= t.memory_pct THEN NULL
                WHEN u.waves_per_sm IS NULL
                    THEN 'no waves per SM (launch__waves_per_multiprocessor, in ncu''s LaunchStats section)'
                WHEN u.waves_per_sm < t.full_wave_pct / 100 THEN NULL
                WHEN u.achieved_occupancy_pct IS NULL
                    THEN 'no achieved occupancy (sm__warps_active, in ncu''s Occupancy section)'
           END AS missing_data
    FROM units u CROSS JOIN thresholds t
), classified AS (
    SELECT u.*,
           CASE WHEN u.missing_data IS NOT NULL THEN 'not enough data'
                WHEN u.real_duration_ns < t.tiny_kernel_ns THEN 'launch-overhead'
                WHEN u.sm_pct >= t.compute_pct OR u.mem_pct >= t.memory_pct THEN
                    CASE WHEN u.tensor_util_pct >= t.tensor_roof_pct THEN 'compute-bound'
                         WHEN u.sm_pct < 80 AND u.mem_pct < 80 AND abs(u.sm_pct - u.mem_pct) < t.balanced_pct THEN 'mixed'
                         WHEN u.sm_pct >= u.mem_pct THEN 'compute-bound'
                         WHEN u.memory_unit = 'dram' AND u.dram_to_compulsory > t.reuse_factor THEN 'cache-inefficient'
                         ELSE 'memory-bound' END
                WHEN u.waves_per_sm < t.full_wave_pct / 100 THEN 'grid-too-small'
                WHEN u.occupancy_limiter IS NOT NULL AND u.achieved_occupancy_pct < t.low_occupancy_pct THEN 'occupancy-limited'
                ELSE 'latency-bound' END AS bottleneck,
           CASE WHEN u.sm_pct IS NULL OR u.dram_pct IS NULL THEN NULL
                WHEN u.sm_pct >= t.seed_compute_pct AND u.dram_pct >= t.seed_dram_pct THEN 'Mixed'
                WHEN u.sm_pct >= t.seed_compute_pct THEN 'Compute'
                WHEN u.dram_pct >= t.seed_dram_pct THEN 'Memory'
                WHEN u.issue_idle_pct >= t.stall_pct THEN 'Latency-Occupancy'
                ELSE 'Mixed' END AS seed_class,
           u.tensor_util_pct >= t.tensor_roof_pct AS at_tensor_roof,
           t.tiny_kernel_ns, t.reuse_factor, t.dram_roof_pct, t.low_occupancy_pct, t.full_wave_pct
    FROM gaps u CROSS JOIN thresholds t
), united AS (
    SELECT c.*,
           CASE c.bottleneck
                WHEN 'not enough data' THEN NULL
                WHEN 'launch-overhead' THEN 'launch'
                WHEN 'compute-bound' THEN CASE WHEN c.at_tensor_roof THEN 'tensor' ELSE c.compute_unit END
                WHEN 'memory-bound' THEN c.memory_unit
                WHEN 'cache-inefficient' THEN c.memory_unit
                WHEN 'mixed' THEN CASE WHEN c.sm_pct IS NULL THEN NULL ELSE concat(c.compute_unit, '+', c.memory_unit) END
                WHEN 'grid-too-small' THEN 'grid'
                WHEN 'occupancy-limited' THEN c.occupancy_limiter
                ELSE 'latency' END AS limiting_unit,
           concat('L1 ', coalesce(CAST(round(c.l1_pct, 1) AS VARCHAR), '?'), ' %, L2 ', coalesce(CAST(round(c.l2_pct, 1) AS VARCHAR), '?'),
                  ' %, DRAM ', coalesce(CAST(round(c.dram_pct, 1) AS VARCHAR), '?'), ' %') AS memory_levels,
           concat('tensor ', coalesce(CAST(round(c.tensor_util_pct, 1) AS VARCHAR), '?'), ' %, FMA ',
                  coalesce(CAST(round(c.fma_pct, 1) AS VARCHAR), '?'), ' %, ALU ', coalesce(CAST(round(c.alu_pct, 1) AS VARCHAR), '?'),
                  ' %, FP64 ', coalesce(CAST(round(c.fp64_pct, 1) AS VARCHAR), '?'), ' %') AS pipes
    FROM classified c
), library_fix AS (
    -- library_fixes.csv: of the rows matching a kernel's library, implementation, op class and stack, the one
    -- naming the most (implementation, then op class, then stack)
    SELECT o.library, o.implementation, o.op_class, o.framework,
           arg_max(lf.fix, CASE WHEN lf.implementation <> '*' THEN 4 ELSE 0 END + CASE WHEN lf.op_class <> '*' THEN 2 ELSE 0 END
                           + CASE WHEN lf.framework <> '*' THEN 1 ELSE 0 END) AS fix
    FROM (SELECT DISTINCT k.library, k.implementation, k.op_class, rf.framework
          FROM kernels k LEFT JOIN run_frameworks rf ON rf.run_id = k.run_id) o
    JOIN library_fixes lf ON lf.library = o.library AND lf.implementation IN ('*', o.implementation)
         AND lf.op_class IN ('*', o.op_class) AND lf.framework IN ('*', o.framework)
    GROUP BY o.library, o.implementation, o.op_class, o.framework
), judged AS (
    SELECT j.*,
           CASE WHEN j.ncu_verdict IS NULL OR j.bottleneck = 'not enough data' THEN NULL
                WHEN j.ncu_verdict = 'compute' THEN j.bottleneck = 'compute-bound'
                WHEN j.ncu_verdict LIKE 'memory:%' THEN
                    (j.bottleneck IN ('memory-bound', 'cache-inefficient') AND j.limiting_unit = substr(j.ncu_verdict, 8))
                    OR (j.bottleneck = 'compute-bound' AND j.at_tensor_roof)
                WHEN j.ncu_verdict = 'memory' THEN j.bottleneck IN ('memory-bound', 'cache-inefficient')
                WHEN j.ncu_verdict = 'balanced' THEN j.bottleneck = 'mixed'
                WHEN j.ncu_verdict = 'latency' THEN j.bottleneck IN ('latency-bound', 'occupancy-limited')
                WHEN j.ncu_verdict = 'grid-too-small' THEN j.bottleneck = 'grid-too-small'
           END AS agrees_with_ncu
    FROM united j
)
SELECT j.run_id, j.launch_id, j.model, j.gpu, j.kernel_id, j.library, j.op_class, j.kernel_base,
       j.bottleneck, j.limiting_unit, j.seed_class, j.ncu_verdict, j.agrees_with_ncu,
       CASE WHEN j.agrees_with_ncu THEN NULL
            WHEN j.ncu_verdict IS NULL THEN 'no SOLBottleneck rule in the export'
            WHEN j.bottleneck = 'not enough data' THEN concat('ncu says ', j.ncu_verdict, '; kwh cannot judge: ', j.missing_data)
            WHEN j.bottleneck = 'launch-overhead'
                THEN concat('ncu judges its replayed launch (', CAST(CAST(j.duration_ns AS BIGINT) AS VARCHAR),
                            ' ns); the real launch (', CAST(CAST(j.real_duration_ns AS BIGINT) AS VARCHAR),
                            ' ns) is shorter than the launch cost, which no change inside the kernel removes')
            WHEN j.bottleneck = 'compute-bound' AND j.at_tensor_roof
                THEN 'ncu names the busiest memory unit; the tensor pipe is at its roof'
            ELSE concat('ncu says ', j.ncu_verdict, '; kwh finds ', j.bottleneck, ' (', coalesce(j.limiting_unit, '?'), ')')
       END AS disagreement,
       CASE j.bottleneck
            WHEN 'not enough data' THEN concat('not enough data: ', j.missing_data)
            WHEN 'launch-overhead'
                THEN concat('real duration ', CAST(CAST(j.real_duration_ns AS BIGINT) AS VARCHAR), ' ns (', j.duration_basis,
                            ') < ', CAST(CAST(j.tiny_kernel_ns AS BIGINT) AS VARCHAR), ' ns; ncu replay ',
                            CAST(CAST(j.duration_ns AS BIGINT) AS VARCHAR), ' ns')
            WHEN 'compute-bound'
                THEN concat('SM ', CAST(round(j.sm_pct, 1) AS VARCHAR), ' % vs memory ', CAST(round(j.mem_pct, 1) AS VARCHAR),
                            ' %; busiest: ', j.limiting_unit, CASE WHEN j.at_tensor_roof THEN ' (at the tensor roof)' ELSE '' END,
                            '; pipes: ', j.pipes, '; memory: ', j.memory_levels)
            WHEN 'mixed'
                THEN concat('SM ', CAST(round(j.sm_pct, 1) AS VARCHAR), ' % and memory ', CAST(round(j.mem_pct, 1) AS VARCHAR),
                            ' % within 10 points, both < 80; pipes: ', j.pipes, '; memory: ', j.memory_levels)
            WHEN 'cache-inefficient'
                THEN concat('memory ', CAST(round(j.mem_pct, 1) AS VARCHAR), ' % at DRAM; moves ',
                            CAST(round(j.dram_bytes / 1e6, 2) AS VARCHAR), ' MB, ', CAST(round(j.dram_to_compulsory, 2) AS VARCHAR),
                            'x its compulsory ', CAST(round(j.compulsory_bytes / 1e6, 2) AS VARCHAR), ' MB (', j.compulsory_basis,
                            ') > ', CAST(j.reuse_factor AS VARCHAR), 'x')
            WHEN 'memory-bound'
                THEN concat('memory ', CAST(round(j.mem_pct, 1) AS VARCHAR), ' % vs SM ', CAST(round(j.sm_pct, 1) AS VARCHAR),
                            ' %; busiest level: ', j.limiting_unit, ' (', j.memory_levels, ')',
                            CASE WHEN j.limiting_unit = 'dram' AND j.dram_pct >= j.dram_roof_pct THEN '; at the DRAM roof' ELSE '' END,
                            CASE WHEN j.limiting_unit <> 'dram' THEN ''
                                 WHEN j.compulsory_bytes IS NULL THEN '; compulsory bytes unknown: no reuse test'
                                 ELSE concat('; moves ', CAST(round(j.dram_to_compulsory, 2) AS VARCHAR), 'x its compulsory ',
                                             CAST(round(j.compulsory_bytes / 1e6, 2) AS VARCHAR), ' MB: no reuse failure') END)
            WHEN 'grid-too-small'
                THEN concat('SM ', CAST(round(j.sm_pct, 1) AS VARCHAR), ' %, memory ', CAST(round(j.mem_pct, 1) AS VARCHAR),
                            ' % < 60 with ', CAST(round(j.waves_per_sm, 2) AS VARCHAR), ' waves per SM (',
                            CAST(j.grid_size AS VARCHAR), ' blocks, ', CAST(CAST(j.sm_count AS BIGINT) AS VARCHAR), ' SMs)')
            WHEN 'occupancy-limited'
                THEN concat('SM ', CAST(round(j.sm_pct, 1) AS VARCHAR), ' %, memory ', CAST(round(j.mem_pct, 1) AS VARCHAR),
                            ' % < 60; ', j.limiter_evidence, '; achieved ', CAST(round(j.achieved_occupancy_pct, 1) AS VARCHAR),
                            ' % < ', CAST(j.low_occupancy_pct AS VARCHAR))
            ELSE concat('SM ', CAST(round(j.sm_pct, 1) AS VARCHAR), ' %, memory ', CAST(round(j.mem_pct, 1) AS VARCHAR),
                        ' % < 60 with ', CAST(round(j.waves_per_sm, 2) AS VARCHAR), ' waves per SM',
                        CASE WHEN j.waves_per_sm < 1 THEN concat(' (', CAST(j.grid_size AS VARCHAR), ' blocks on ',
                                                                 CAST(CAST(j.sm_count AS BIGINT) AS VARCHAR), ' SMs fill the GPU)')
                             ELSE '' END,
                        ': warps stalled, issue slots idle ',
                        -- issue activity is in the SchedulerStats section, which a short section list leaves out
                        CASE WHEN j.issue_idle_pct IS NULL THEN 'not measured (no SchedulerStats section)'
                             ELSE concat(CAST(round(j.issue_idle_pct, 1) AS VARCHAR), ' %') END, ' (see warp_stalls)')
       END AS decided_by,
       -- a library's own kernel gets its library's knob where the class's fix would edit the kernel's code
       CASE WHEN coalesce(f_unit_stack.edits_kernel, f_unit.edits_kernel, f_stack.edits_kernel, f_any.edits_kernel) = 'true'
                 AND lf.fix IS NOT NULL THEN lf.fix
            ELSE coalesce(f_unit_stack.fix, f_unit.fix, f_stack.fix, f_any.fix) END AS fix, j.missing_data, rf.framework,
       j.duration_ns, j.real_duration_ns, j.duration_basis, j.sm_pct, j.dram_pct, j.mem_pct, j.memory_pct,
       j.l1_pct, j.l2_pct, j.l2_hit_pct, j.tensor_util_pct, j.fma_pct, j.alu_pct, j.fp64_pct, j.issue_pct,
       j.issue_idle_pct, j.achieved_occupancy_pct, j.waves_per_sm, j.dram_bytes, j.compulsory_bytes,
       j.dram_to_compulsory, j.warp_specialized
FROM judged j
LEFT JOIN run_frameworks rf ON rf.run_id = j.run_id
LEFT JOIN library_fix lf ON lf.library = j.library AND lf.implementation = j.implementation AND lf.op_class = j.op_class
     AND lf.framework IS NOT DISTINCT FROM rf.framework
LEFT JOIN bottleneck_fixes f_unit_stack ON f_unit_stack.bottleneck = j.bottleneck AND f_unit_stack.limiting_unit = j.limiting_unit
     AND f_unit_stack.framework = rf.framework
LEFT JOIN bottleneck_fixes f_unit ON f_unit.bottleneck = j.bottleneck AND f_unit.limiting_unit = j.limiting_unit
     AND f_unit.framework = '*'
LEFT JOIN bottleneck_fixes f_stack ON f_stack.bottleneck = j.bottleneck AND f_stack.limiting_unit = '*'
     AND f_stack.framework = rf.framework
LEFT JOIN bottleneck_fixes f_any ON f_any.bottleneck = j.bottleneck AND f_any.limiting_unit = '*' AND f_any.framework = '*'
ORDER BY j.model, j.gpu, j.run_id, j.launch_id
