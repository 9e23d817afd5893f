-- kwh mcp explain_kernel: where one kernel identity sits on each GPU's roofline (roofline, level 'kernel'): roof, side, limiter, intensity and its percentage of the roof, or why it could not be placed.
SELECT gpu, roof, roof_side, limiter, arithmetic_intensity, achieved_flops_per_s, pct_of_roof, headroom_x,
       math_dtype, flops_basis, unplaced_reason
FROM roofline
WHERE level = 'kernel' AND kernel_id = $kernel_id
ORDER BY gpu
