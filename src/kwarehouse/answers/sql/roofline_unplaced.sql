-- One GPU's kernels the roofline cannot place (tensor work not counted, no FLOP count), by ncu time; kernels doing no floating-point work are left out.
SELECT min(kernel_base), min(library), min(unplaced_reason), count(*), sum(duration_ns)
FROM roofline
WHERE level = 'launch' AND gpu = $gpu_name AND limiter IS NULL AND unplaced_reason <> 'no floating-point work' AND {selected_runs}
GROUP BY kernel_id
ORDER BY 5 DESC
LIMIT 15
