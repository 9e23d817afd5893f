-- Clock throttling per ncu run and kernel identity: the SM clock ncu measured on the big kernels against the GPU's maximum clock, whether they ran throttled, and the time it costs in the model's real GPU time (an upper bound).
-- Why: with unlocked clocks (ncu --clock-control none, as real runs go) long tensor-core kernels hit the
-- power limit: the corpus's 4096³ GEMMs ran at 1.52-1.60 GHz of the H100's 1.98 GHz, a 20-25 % gap between
-- the % of peak at the clock they ran at and the % of the datasheet peak. A throttled GPU is a finding of
-- its own (power cap, cooling, clocks), not a kernel to rewrite.
-- sm_clock_hz: kernels.sm_clock_hz (sm__cycles_elapsed.avg.per_second) averaged over the identity's
-- launches weighted by duration; max_sm_clock_hz: kernels.max_sm_clock_hz (device__attribute_clock_rate).
-- big: launches of at least big_kernel_ns of ncu time (the limits CTE: power management acts over tens of
-- microseconds; a short kernel's clock reads whatever the last one left). throttled: a big kernel at
-- below throttled_clock_pct of the maximum, on a run whose clocks were not locked: clocks_locked when the
-- run says --clock-control base (ncu pins the base clock: a low clock is ncu's doing), or, where the run
-- does not say, when all its launches read within 2 % of one clock below throttled_clock_pct (a pinned
-- clock; a throttled GPU's clock moves with the load: 1.52-1.97 GHz within one run here).
-- gpu_time_ns: the identity's real GPU time in the model (kernel_time: timeline where the model has one,
-- else ncu replay; time_basis says which). est_time_lost_ns = gpu_time_ns x (1 - sm_clock / max clock) of a
-- throttled kernel: what it would save at the full clock if its time scaled with the clock, as a
-- compute-bound kernel's does; a memory-bound one loses less, so read it as an upper bound.
WITH limits AS (
    SELECT 50000.0 AS big_kernel_ns,      -- 50 µs: the throttled GEMMs here run 100-180 µs, GPT-2's small ones 7-11 µs
           90.0 AS throttled_clock_pct    -- an H100 at 1.78 GHz of 1.98 is at 90 %: boost steps, not a power cap
), clocked AS (
    SELECT k.run_id, k.model, k.gpu, k.kernel_id, k.kernel_base, k.op_class, k.duration_ns, k.sm_clock_hz,
           k.max_sm_clock_hz, r.clock_control,
           max(k.sm_clock_hz) OVER (PARTITION BY k.run_id) AS run_max_clock_hz,
           min(k.sm_clock_hz) OVER (PARTITION BY k.run_id) AS run_min_clock_hz
    FROM kernels k
    JOIN runs r ON r.run_id = k.run_id
    WHERE k.sm_clock_hz > 0 AND k.max_sm_clock_hz > 0 AND k.duration_ns > 0
), per_kernel AS (
    SELECT c.run_id, c.model, c.gpu, c.kernel_id, min(c.kernel_base) AS kernel_base, min(c.op_class) AS op_class,
           count(*) AS launches, sum(c.duration_ns) AS ncu_time_ns,
           time_weighted(c.sm_clock_hz, c.duration_ns) AS sm_clock_hz,
           max(c.max_sm_clock_hz) AS max_sm_clock_hz,
           min(c.clock_control) AS clock_control,
           coalesce(min(c.clock_control) = 'base',
                    min(c.run_max_clock_hz) <= 1.02 * min(c.run_min_clock_hz)
                    AND 100.0 * min(c.run_max_clock_hz) / max(c.max_sm_clock_hz) < min(l.throttled_clock_pct))
               AS clocks_locked,
           avg(c.duration_ns) >= min(l.big_kernel_ns) AS big,
           min(l.throttled_clock_pct) AS throttled_clock_pct
    FROM clocked c
    CROSS JOIN limits l
    GROUP BY c.run_id, c.model, c.gpu, c.kernel_id
), real_time AS (
    SELECT model, gpu, kernel_id, sum(gpu_time_ns) AS gpu_time_ns, min(time_basis) AS time_basis
    FROM kernel_time
    GROUP BY model, gpu, kernel_id
), judged AS (
    SELECT p.*, 100.0 * p.sm_clock_hz / p.max_sm_clock_hz AS clock_pct_of_max,
           p.big AND NOT p.clocks_locked AND 100.0 * p.sm_clock_hz / p.max_sm_clock_hz < p.throttled_clock_pct
               AS throttled,
           coalesce(t.gpu_time_ns, CAST(p.ncu_time_ns AS DOUBLE)) AS gpu_time_ns,
           coalesce(t.time_basis, 'ncu replay') AS time_basis
    FROM per_kernel p
    LEFT JOIN real_time t ON t.model = p.model AND t.gpu = p.gpu AND t.kernel_id = p.kernel_id
)
SELECT run_id, model, gpu, kernel_id, kernel_base, op_class, launches, ncu_time_ns, sm_clock_hz, max_sm_clock_hz,
       clock_pct_of_max, big, clocks_locked, clock_control, throttled, gpu_time_ns, time_basis,
       CASE WHEN throttled THEN gpu_time_ns * (1 - sm_clock_hz / max_sm_clock_hz) ELSE 0.0 END AS est_time_lost_ns,
       CASE WHEN throttled THEN concat('SM clock ', CAST(round(sm_clock_hz / 1e9, 2) AS VARCHAR), ' GHz of ',
                                      CAST(round(max_sm_clock_hz / 1e9, 2) AS VARCHAR), ' GHz max (',
                                      CAST(CAST(round(clock_pct_of_max) AS BIGINT) AS VARCHAR),
                                      ' %) over ', CAST(launches AS VARCHAR), ' launch(es) of ',
                                      CAST(round(ncu_time_ns / launches / 1e3, 1) AS VARCHAR),
                                      ' µs: power or thermal throttling (check the power limit and cooling; ',
                                      'nvidia-smi clocks_event_reasons)')
            WHEN clocks_locked THEN 'clocks locked during profiling (--clock-control base, or one clock throughout)'
            WHEN NOT big THEN 'too short to judge the clock'
            ELSE 'at full clock'
       END AS evidence
FROM judged
