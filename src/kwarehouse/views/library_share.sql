-- Share of real GPU time by library and op class, per model and GPU (library_pct adds up the library over its op classes); timeline time where the model has one, else ncu replay time (time_basis), and the share of it with ncu counters.
-- Time and launches come from kernel_time: a model's timelines (nsys, PyTorch traces) when it has any on
-- that GPU, else its ncu launches (replayed durations: small kernels read 1.6-2.5x long).
-- counter_coverage_pct: share of the row's GPU time whose kernels have ncu counters (this model's or borrowed).
WITH per_class AS (
    SELECT model, gpu, library, op_class, sum(launches) AS launches, sum(gpu_time_ns) AS gpu_time_ns,
           sum(CASE WHEN counter_match <> 'not profiled' THEN gpu_time_ns ELSE 0 END) AS counted_ns,
           min(time_basis) AS time_basis
    FROM kernel_time
    GROUP BY model, gpu, library, op_class
)
SELECT model, gpu, library, op_class, launches, gpu_time_ns,
       100 * gpu_time_ns / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu), 0) AS op_class_pct,
       100 * sum(gpu_time_ns) OVER (PARTITION BY model, gpu, library)
           / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu), 0) AS library_pct,
       time_basis, 100 * counted_ns / NULLIF(gpu_time_ns, 0) AS counter_coverage_pct
FROM per_class
ORDER BY model, gpu, gpu_time_ns DESC, library, op_class
