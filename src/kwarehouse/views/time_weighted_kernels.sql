-- ncu counters weighted by where GPU time really goes: per model, GPU and kernel identity, its share of real GPU time (timelines: nsys, PyTorch traces) beside the ncu counters and dominant bottleneck class of that identity, borrowed from other runs or models where this model's ncu did not profile it.
-- One query then answers "what share of fleet GPU time is memory-bound" (sum weight_ns by bottleneck).
-- Counters come from kernel_time, shape by shape (exact grid/block/op shapes first, then the identity;
-- this model's ncu runs first, then other models' on the same GPU: borrowed_from_model, counter_age_days).
-- Unmatched identities: a timeline kernel that no ncu run on that GPU profiled keeps its time, with NULL
-- counters and bottleneck 'not profiled', so shares stay shares of all GPU time; an ncu kernel of a model
-- and GPU with no timeline at all is weighted by its ncu durations (weight_source 'ncu', time_basis
-- 'ncu replay'); an ncu kernel that the model's timelines never ran gets weight 0 ('not in timeline').
-- bottleneck: the class (bottleneck_class) holding most of the identity's time, each shape's real time
-- split by the classes of the ncu launches its counters came from.
WITH ncu AS (
    -- each kernel's ncu launches and time, counted per partition (partition_kernels) rather than launch by launch
    SELECT model, gpu, kernel_id, ncu_launches AS launches, ncu_ns AS gpu_time_ns
    FROM partition_kernels
    WHERE ncu_launches > 0
), classes AS (
    -- bottleneck_class read once (a CTE referenced twice is computed once; a view named twice is not)
    SELECT run_id, model, gpu, kernel_id, bottleneck, sum(duration_ns) AS ns
    FROM bottleneck_class
    GROUP BY run_id, model, gpu, kernel_id, bottleneck
), class_by_run AS (
    SELECT run_id, kernel_id, bottleneck, sum(ns) AS ns,
           sum(sum(ns)) OVER (PARTITION BY run_id, kernel_id) AS kernel_ns
    FROM classes
    GROUP BY run_id, kernel_id, bottleneck
), class_by_model AS (
    SELECT model, gpu, kernel_id, bottleneck, sum(ns) AS ns,
           sum(sum(ns)) OVER (PARTITION BY model, gpu, kernel_id) AS kernel_ns
    FROM classes
    GROUP BY model, gpu, kernel_id, bottleneck
), shapes AS (
    SELECT kt.*, CASE WHEN kt.counter_match = 'not in timeline' THEN kt.ncu_ns_per_launch ELSE kt.gpu_time_ns END AS w
    FROM kernel_time kt
), shape_classes AS (
    -- counters borrowed from one run: that run's classes of the kernel; the model's own ncu launches
    -- (several runs): the model's classes
    SELECT s.model, s.gpu, s.kernel_id, c.bottleneck, s.w * c.ns / NULLIF(c.kernel_ns, 0) AS ns
    FROM shapes s JOIN class_by_run c ON c.run_id = s.borrowed_from_run AND c.kernel_id = s.kernel_id
    WHERE s.borrowed_from_run IS NOT NULL
    UNION ALL
    SELECT s.model, s.gpu, s.kernel_id, c.bottleneck, s.w * c.ns / NULLIF(c.kernel_ns, 0) AS ns
    FROM shapes s JOIN class_by_model c ON c.model = s.model AND c.gpu = s.gpu AND c.kernel_id = s.kernel_id
    WHERE s.borrowed_from_run IS NULL AND s.counter_source = 'this model'
), dominant AS (
    SELECT model, gpu, kernel_id, arg_max(bottleneck, ns) AS bottleneck
    FROM (SELECT model, gpu, kernel_id, bottleneck, sum(ns) AS ns FROM shape_classes
          GROUP BY model, gpu, kernel_id, bottleneck) per_class
    GROUP BY model, gpu, kernel_id
), per_kernel AS (
    SELECT model, gpu, kernel_id, min(library) AS library, min(op_class) AS op_class, min(kernel_base) AS kernel_base,
           min(time_basis) AS time_basis, max(counter_match) AS any_match,
           sum(CASE WHEN time_basis = 'timeline' THEN launches END) AS timeline_launches,
           sum(CASE WHEN time_basis = 'timeline' THEN gpu_time_ns END) AS timeline_gpu_time_ns,
           sum(gpu_time_ns) AS weight_ns,
           100 * sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END)
               / NULLIF(sum(gpu_time_ns), 0) AS counter_coverage_pct,
           arg_max(counter_match, w) AS counter_match,
           min(CASE WHEN counter_source = 'other model' THEN borrowed_from_model END) AS borrowed_from_model,
           max(counter_age_days) AS counter_age_days,
           time_weighted(sm_pct, w) AS sm_pct,
           time_weighted(dram_pct, w) AS dram_pct,
           time_weighted(mem_pct, w) AS mem_pct,
           time_weighted(l2_hit_pct, w) AS l2_hit_pct,
           time_weighted(achieved_occupancy_pct, w) AS achieved_occupancy_pct,
           time_weighted(tensor_pipe_pct, w) AS tensor_pipe_pct
    FROM shapes
    GROUP BY model, gpu, kernel_id
), weighted AS (
    SELECT p.*,
           CASE WHEN p.time_basis = 'ncu replay' THEN 'ncu'
                WHEN p.any_match = 'not in timeline' THEN 'not in timeline' ELSE 'timeline' END AS weight_source,
           CASE WHEN p.counter_match = 'not profiled' THEN 'not profiled' ELSE d.bottleneck END AS bottleneck,
           n.launches AS ncu_launches, n.gpu_time_ns AS ncu_gpu_time_ns
    FROM per_kernel p
    LEFT JOIN dominant d ON d.model = p.model AND d.gpu = p.gpu AND d.kernel_id = p.kernel_id
    LEFT JOIN ncu n ON n.model = p.model AND n.gpu = p.gpu AND n.kernel_id = p.kernel_id
)
SELECT model, gpu, kernel_id, library, op_class, kernel_base, weight_source, weight_ns,
       100 * weight_ns / NULLIF(sum(weight_ns) OVER (PARTITION BY model, gpu), 0) AS model_time_pct,
       100 * weight_ns / NULLIF(sum(weight_ns) OVER (), 0) AS fleet_time_pct,
       timeline_launches, timeline_gpu_time_ns, ncu_launches, ncu_gpu_time_ns, bottleneck,
       sm_pct, dram_pct, mem_pct, l2_hit_pct, achieved_occupancy_pct, tensor_pipe_pct,
       time_basis, counter_coverage_pct, counter_match, borrowed_from_model, counter_age_days
FROM weighted
ORDER BY model, gpu, weight_ns DESC, kernel_id
