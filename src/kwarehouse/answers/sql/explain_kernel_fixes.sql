-- kwh mcp explain_kernel: the design signals of one kernel identity (design_signals) with the fix, the estimated time saved and its bounds (the floor, the most that can be saved), the evidence and the assumption behind the estimate.
SELECT signal, model_list AS models, fix, est_time_saved_ns, gpu_time_ns, floor_ns, bound_ns, basis, source,
       evidence, assumption
FROM design_signals
WHERE kernel_id = $kernel_id AND ($model IS NULL OR list_contains(string_split(model_list, ','), $model))
ORDER BY est_time_saved_ns DESC NULLS LAST, signal
