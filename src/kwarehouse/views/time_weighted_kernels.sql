-- ncu counters weighted by where GPU time really goes: per model, GPU and kernel identity, its share of timeline GPU time (nsys, PyTorch traces) beside the ncu counters and dominant bottleneck class of that identity.
-- One query then answers "what share of fleet GPU time is memory-bound" (sum weight_ns by bottleneck).
-- Unmatched identities: a timeline kernel that ncu never profiled keeps its time, with NULL counters
-- and bottleneck 'not profiled', so shares stay shares of all GPU time; an ncu kernel of a model
-- and GPU with no timeline at all is weighted by its ncu durations (weight_source 'ncu'); an ncu
-- kernel that the model's timelines never ran gets weight 0 (weight_source 'not in timeline').
WITH timeline AS (
    SELECT model, gpu, kernel_id, min(library) AS library, min(op_class) AS op_class,
           min(kernel_base) AS kernel_base, count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           count(DISTINCT run_id) AS runs
    FROM kernel_launches
    WHERE activity = 'kernel'
    GROUP BY model, gpu, kernel_id
), timeline_models AS (
    SELECT DISTINCT model, gpu FROM timeline
), ncu AS (
    SELECT model, gpu, kernel_id, min(library) AS library, min(op_class) AS op_class, min(kernel_base) AS kernel_base,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           sum(sm_pct * duration_ns) / NULLIF(sum(CASE WHEN sm_pct IS NOT NULL THEN duration_ns END), 0) AS sm_pct,
           sum(dram_pct * duration_ns) / NULLIF(sum(CASE WHEN dram_pct IS NOT NULL THEN duration_ns END), 0) AS dram_pct,
           sum(mem_pct * duration_ns) / NULLIF(sum(CASE WHEN mem_pct IS NOT NULL THEN duration_ns END), 0) AS mem_pct,
           sum(l2_hit_pct * duration_ns) / NULLIF(sum(CASE WHEN l2_hit_pct IS NOT NULL THEN duration_ns END), 0) AS l2_hit_pct,
           sum(achieved_occupancy_pct * duration_ns)
               / NULLIF(sum(CASE WHEN achieved_occupancy_pct IS NOT NULL THEN duration_ns END), 0) AS achieved_occupancy_pct,
           sum(tensor_pipe_pct * duration_ns)
               / NULLIF(sum(CASE WHEN tensor_pipe_pct IS NOT NULL THEN duration_ns END), 0) AS tensor_pipe_pct
    FROM kernels
    GROUP BY model, gpu, kernel_id
), classes AS (
    SELECT model, gpu, kernel_id, bottleneck, sum(duration_ns) AS ns
    FROM bottleneck_class
    GROUP BY model, gpu, kernel_id, bottleneck
), dominant AS (
    SELECT model, gpu, kernel_id, arg_max(bottleneck, ns) AS bottleneck
    FROM classes
    GROUP BY model, gpu, kernel_id
), joined AS (
    SELECT coalesce(t.model, n.model) AS model, coalesce(t.gpu, n.gpu) AS gpu, coalesce(t.kernel_id, n.kernel_id) AS kernel_id,
           coalesce(n.library, t.library) AS library, coalesce(n.op_class, t.op_class) AS op_class,
           coalesce(n.kernel_base, t.kernel_base) AS kernel_base,
           t.launches AS timeline_launches, t.gpu_time_ns AS timeline_gpu_time_ns,
           n.launches AS ncu_launches, n.gpu_time_ns AS ncu_gpu_time_ns,
           n.sm_pct, n.dram_pct, n.mem_pct, n.l2_hit_pct, n.achieved_occupancy_pct, n.tensor_pipe_pct,
           CASE WHEN t.kernel_id IS NOT NULL THEN 'timeline'
                WHEN tm.model IS NULL THEN 'ncu'
                ELSE 'not in timeline' END AS weight_source
    FROM timeline t
    FULL OUTER JOIN ncu n ON n.model = t.model AND n.gpu = t.gpu AND n.kernel_id = t.kernel_id
    LEFT JOIN timeline_models tm ON tm.model = coalesce(t.model, n.model) AND tm.gpu = coalesce(t.gpu, n.gpu)
), weighted AS (
    SELECT j.*,
           CASE j.weight_source WHEN 'timeline' THEN j.timeline_gpu_time_ns
                                WHEN 'ncu' THEN j.ncu_gpu_time_ns ELSE 0 END AS weight_ns,
           CASE WHEN j.ncu_launches IS NULL THEN 'not profiled' ELSE d.bottleneck END AS bottleneck
    FROM joined j
    LEFT JOIN dominant d ON d.model = j.model AND d.gpu = j.gpu AND d.kernel_id = j.kernel_id
)
SELECT model, gpu, kernel_id, library, op_class, kernel_base, weight_source, weight_ns,
       100 * weight_ns / NULLIF(sum(weight_ns) OVER (PARTITION BY model, gpu), 0) AS model_time_pct,
       100 * weight_ns / NULLIF(sum(weight_ns) OVER (), 0) AS fleet_time_pct,
       timeline_launches, timeline_gpu_time_ns, ncu_launches, ncu_gpu_time_ns, bottleneck,
       sm_pct, dram_pct, mem_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct
FROM weighted
ORDER BY model, gpu, weight_ns DESC, kernel_id
