-- Occupancy per launch: achieved vs theoretical occupancy, which limit binds (registers, shared memory, warps, blocks, barriers), registers per thread, block size and shared memory.
-- binding_limit names the limiter(s) allowing the fewest blocks per SM (ties joined with '+'), from ncu's
-- launch__occupancy_limit_* metrics; occupancy_gap_pct = theoretical - achieved.
WITH limits AS (
    SELECT *,
           least(coalesce(blocks_limit_registers, 1e9), coalesce(blocks_limit_shared_mem, 1e9),
                 coalesce(blocks_limit_warps, 1e9), coalesce(blocks_limit_blocks, 1e9),
                 coalesce(blocks_limit_barriers, 1e9)) AS blocks_per_sm
    FROM kernels
)
SELECT run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base,
       duration_ns, grid_size, block_size, registers_per_thread, shared_mem_bytes, waves_per_sm,
       achieved_occupancy_pct, theoretical_occupancy_pct,
       theoretical_occupancy_pct - achieved_occupancy_pct AS occupancy_gap_pct,
       blocks_limit_registers, blocks_limit_shared_mem, blocks_limit_warps, blocks_limit_blocks, blocks_limit_barriers,
       CASE WHEN blocks_per_sm >= 1e9 THEN NULL ELSE blocks_per_sm END AS blocks_per_sm,
       CASE WHEN blocks_per_sm >= 1e9 THEN NULL ELSE
           concat_ws('+',
               CASE WHEN blocks_limit_registers = blocks_per_sm THEN 'registers' END,
               CASE WHEN blocks_limit_shared_mem = blocks_per_sm THEN 'shared_mem' END,
               CASE WHEN blocks_limit_warps = blocks_per_sm THEN 'warps' END,
               CASE WHEN blocks_limit_blocks = blocks_per_sm THEN 'blocks' END,
               CASE WHEN blocks_limit_barriers = blocks_per_sm THEN 'barriers' END)
       END AS binding_limit
FROM limits
ORDER BY model, gpu, run_id, launch_id
