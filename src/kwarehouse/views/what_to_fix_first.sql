-- What to do first across the fleet: the calibrated design signals ranked by estimated time saved, each with its fix, evidence, the models it touches, the basis of the saving and the assumption behind the estimate (kwh query what_to_fix_first --limit 10).
-- Rows come from design_signals (source 'calibrated', an estimate above zero). basis says which time an
-- estimate gives back, and the bases never add up: 'kernel time' (the kernels run shorter; each saving at
-- most the kernel's time above its floor, one kernel's signals sharing that bound, a model's savings within its
-- GPU time), 'idle time without the profiler' (launch_bound with an un-profiled timing of the same iterations)
-- or 'idle time measured under the profiler, an upper bound' (launch_bound from the profiled gaps, which the
-- profiler stretches: these rank after the others, since an un-profiled timing must back them before CUDA
-- Graphs lead a fix list). saves keeps the older two words (GPU kernel time / GPU idle time). time_basis says
-- whether the time is real (timeline) or ncu's replay of the profiled launches.
-- Estimates equal but for the last bits of their sums (two signals of one kernel, each capped at its bound)
-- rank by signal and subject: the estimate is ranked to the thousandth of a ns, below which float sums in
-- another order differ.
SELECT row_number() OVER (ORDER BY CASE WHEN basis = 'idle time measured under the profiler, an upper bound' THEN 1 ELSE 0 END,
                                   round(est_time_saved_ns, 3) DESC, signal, subject) AS rank,
       signal, subject, model_list, models, est_time_saved_ns, gpu_time_ns,
       CASE WHEN basis = 'kernel time' THEN 'GPU kernel time' ELSE 'GPU idle time' END AS saves,
       time_basis, fix, evidence, assumption, basis
FROM design_signals
WHERE source = 'calibrated' AND est_time_saved_ns > 0
ORDER BY rank
