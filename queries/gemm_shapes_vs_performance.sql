-- How does performance relate to launch shapes? For each framework GEMM op and input shapes: the kernel chosen, its grid, duration, SM % and tensor-pipe use.
SELECT k.model, k.framework_op, k.op_shapes, k.kernel_base, k.grid_size, k.block_size, k.registers_per_thread,
       count(*) AS launches, round(avg(k.duration_ns) / 1e3, 2) AS mean_duration_us,
       round(avg(k.sm_pct), 1) AS sm_pct, round(avg(k.tensor_pipe_pct), 1) AS tensor_pipe_pct
FROM kernels k
WHERE k.op_class = 'gemm'
GROUP BY k.model, k.framework_op, k.op_shapes, k.kernel_base, k.grid_size, k.block_size, k.registers_per_thread
ORDER BY k.model, mean_duration_us DESC
