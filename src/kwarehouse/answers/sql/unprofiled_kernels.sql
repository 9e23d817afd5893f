-- One GPU's top kernels by real GPU time that no ncu launch on that GPU describes (kernel_time counter_match 'not profiled'): the roofline cannot show them.
SELECT min(kernel_base) AS kernel_base, min(library) AS library, min(op_class) AS op_class, sum(launches) AS launches,
       sum(gpu_time_ns) AS gpu_time_ns, string_agg(DISTINCT model, ', ' ORDER BY model) AS models, kernel_id
FROM kernel_time
WHERE gpu = $gpu_name AND counter_match = 'not profiled' AND gpu_time_ns > 0 AND {selected_models}
GROUP BY kernel_id
ORDER BY gpu_time_ns DESC, kernel_id
LIMIT 10
