-- What to do first across the fleet: the calibrated design signals ranked by estimated time saved, each with its fix, evidence, the models it touches and the assumption behind the estimate (kwh query what_to_fix_first --limit 10).
-- Rows come from design_signals (source 'calibrated', an estimate above zero). saves says which time an
-- estimate gives back: 'GPU kernel time' (the kernels run shorter) or 'GPU idle time' (launch_bound: the gaps
-- between kernels that CUDA Graphs remove; wall time, part of it profiler overhead). time_basis says whether
-- the time is real (timeline) or ncu's replay of the profiled launches. Estimates are upper bounds of
-- different kinds; the rank orders them, it does not add them up.
SELECT row_number() OVER (ORDER BY est_time_saved_ns DESC, signal, subject) AS rank,
       signal, subject, model_list, models, est_time_saved_ns, gpu_time_ns,
       CASE WHEN signal = 'launch-bound run (CUDA Graphs)' THEN 'GPU idle time' ELSE 'GPU kernel time' END AS saves,
       time_basis, fix, evidence, assumption
FROM design_signals
WHERE source = 'calibrated' AND est_time_saved_ns > 0
ORDER BY rank
