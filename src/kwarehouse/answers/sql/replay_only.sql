-- The models (and GPUs) whose answers rest on ncu replay time only: no timeline on that GPU (model ? or all).
SELECT DISTINCT model, gpu FROM kernel_time WHERE time_basis = 'ncu replay' AND (? IS NULL OR model = ?)
ORDER BY model, gpu
