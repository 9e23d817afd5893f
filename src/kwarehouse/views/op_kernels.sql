-- Framework op to kernels: for each framework op from NVTX (with its input shapes), the kernels it launches, how often and for how long.
-- op_time_pct is the kernel's share of all GPU time under that op (any shapes) in that model.
WITH per_kernel AS (
    SELECT model, gpu, framework_op, op_shapes, kernel_id, library, op_class, min(kernel_base) AS kernel_base,
           count(*) AS launches, CAST(sum(duration_ns) AS DOUBLE) AS gpu_time_ns,
           min(grid_size) AS min_grid_size, max(grid_size) AS max_grid_size
    FROM kernels
    WHERE framework_op IS NOT NULL
    GROUP BY model, gpu, framework_op, op_shapes, kernel_id, library, op_class
)
SELECT model, gpu, framework_op, op_shapes, kernel_id, library, op_class, kernel_base, launches, gpu_time_ns,
       100 * gpu_time_ns / NULLIF(sum(gpu_time_ns) OVER (PARTITION BY model, gpu, framework_op), 0) AS op_time_pct,
       min_grid_size, max_grid_size
FROM per_kernel
ORDER BY model, gpu, framework_op, gpu_time_ns DESC, kernel_id, op_shapes
