-- Design signals for GPU architects and library authors: memory-bound kernels with low L2 hit, GEMMs with low tensor-pipe use, register-limited kernel families, tiny grids launched many times - each with the models and share of GPU time affected.
-- Cut-offs come from bottleneck_thresholds; gpu_time_pct is the share of all GPU time in the warehouse.
-- Register-limited families count only latency-bound launches (bottleneck_class): there more resident
-- warps would hide latency, while a GEMM that runs near its throughput at low occupancy is so by design.
WITH t AS (
    SELECT max(CASE WHEN name = 'tensor_pipe_low_pct' THEN value END) AS tensor_pipe_low_pct,
           max(CASE WHEN name = 'low_occupancy_pct' THEN value END) AS low_occupancy_pct,
           max(CASE WHEN name = 'tiny_kernel_ns' THEN value END) AS tiny_kernel_ns,
           max(CASE WHEN name = 'many_launches' THEN value END) AS many_launches
    FROM bottleneck_thresholds
), fleet AS (
    SELECT CAST(sum(duration_ns) AS DOUBLE) AS total_ns FROM kernels
), low_l2 AS (
    SELECT 'memory-bound with low L2 hit' AS signal, min(kernel_base) AS subject, kernel_id, library, op_class,
           count(DISTINCT model) AS models, array_to_string(list_sort(list(DISTINCT model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('memory_pct ', CAST(round(sum(memory_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS VARCHAR),
                  ', l2_hit_pct ', CAST(round(sum(l2_hit_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted)') AS evidence
    FROM bottleneck_class
    WHERE bottleneck = 'cache-inefficient'
    GROUP BY kernel_id, library, op_class
), gemm_tensor AS (
    SELECT 'GEMM-class kernel with low tensor-pipe use' AS signal, min(kernel_base) AS subject, kernel_id, library, op_class,
           count(DISTINCT model) AS models, array_to_string(list_sort(list(DISTINCT model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('tensor_pipe_pct ', CAST(round(sum(tensor_pipe_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted) < ', CAST(max(t.tensor_pipe_low_pct) AS VARCHAR)) AS evidence
    FROM kernels CROSS JOIN t
    WHERE op_class = 'gemm' AND tensor_pipe_pct IS NOT NULL
    GROUP BY kernel_id, library, op_class
    HAVING sum(tensor_pipe_pct * duration_ns) / NULLIF(sum(duration_ns), 0) < max(t.tensor_pipe_low_pct)
), register_limited AS (
    SELECT 'register-limited occupancy in a kernel family' AS signal, kernel_base AS subject,
           CAST(NULL AS VARCHAR) AS kernel_id, min(library) AS library, min(op_class) AS op_class,
           count(DISTINCT model) AS models, array_to_string(list_sort(list(DISTINCT model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat('registers bind in ', CAST(count(*) AS VARCHAR), ' launches; achieved_occupancy_pct ',
                  CAST(round(sum(achieved_occupancy_pct * duration_ns) / NULLIF(sum(duration_ns), 0), 1) AS VARCHAR),
                  ' (time-weighted); registers_per_thread ', CAST(min(registers_per_thread) AS VARCHAR), '-',
                  CAST(max(registers_per_thread) AS VARCHAR)) AS evidence
    FROM (SELECT o.* FROM occupancy o
          JOIN bottleneck_class b ON b.run_id = o.run_id AND b.launch_id = o.launch_id
          WHERE b.bottleneck = 'latency-bound') latency_bound CROSS JOIN t
    WHERE binding_limit LIKE '%registers%' AND achieved_occupancy_pct < t.low_occupancy_pct
    GROUP BY kernel_base
), tiny_grids AS (
    SELECT 'tiny grid launched many times (fusion or CUDA Graph candidate)' AS signal, min(kernel_base) AS subject,
           kernel_id, library, op_class,
           count(DISTINCT model) AS models, array_to_string(list_sort(list(DISTINCT model)), ',') AS model_list,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           concat(CAST(count(*) AS VARCHAR), ' launches, median ', CAST(median(duration_ns) AS VARCHAR),
                  ' ns, median grid ', CAST(median(grid_size) AS VARCHAR), ' blocks, waves_per_sm <= ',
                  CAST(max(waves_per_sm) AS VARCHAR)) AS evidence
    FROM kernels CROSS JOIN t
    WHERE duration_ns < t.tiny_kernel_ns AND (waves_per_sm < 1 OR grid_size < sm_count)
    GROUP BY kernel_id, library, op_class
    HAVING count(*) >= max(t.many_launches)
), signals AS (
    SELECT * FROM low_l2
    UNION ALL SELECT * FROM gemm_tensor
    UNION ALL SELECT * FROM register_limited
    UNION ALL SELECT * FROM tiny_grids
)
SELECT signal, subject, kernel_id, library, op_class, models, model_list, launches, gpu_time_ns,
       100 * gpu_time_ns / NULLIF(fleet.total_ns, 0) AS gpu_time_pct, evidence
FROM signals CROSS JOIN fleet
ORDER BY signal, models DESC, gpu_time_ns DESC, subject
