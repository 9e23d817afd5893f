-- kwh mcp what_to_fix_first: the fleet's ranked fixes (what_to_fix_first), or those touching one model, with their evidence, the basis of the saving and the assumption behind it.
SELECT rank, signal, subject, model_list AS models, est_time_saved_ns, gpu_time_ns, saves, time_basis, fix,
       evidence, assumption, basis
FROM what_to_fix_first
WHERE $model IS NULL OR list_contains(string_split(model_list, ','), $model)
ORDER BY rank
