-- Which framework ops cost the most GPU time, and through which kernels? (needs exports made with NVTX, e.g. torch emit_nvtx)
SELECT model, framework_op, sum(launches) AS launches, round(sum(gpu_time_ns) / 1e3, 1) AS gpu_time_us,
       count(DISTINCT kernel_id) AS distinct_kernels
FROM op_kernels
GROUP BY model, framework_op
ORDER BY model, gpu_time_us DESC
