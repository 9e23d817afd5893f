-- Occupancy per launch: achieved vs theoretical occupancy, which limit binds (registers, shared memory, warps, blocks, barriers), whether one truly limits, and whether the kernel is a warp-specialised tensor-core kernel that runs one CTA per SM by design.
-- binding_limit names the limiter(s) allowing the fewest blocks per SM (ties joined with '+'), from ncu's
-- launch__occupancy_limit_* metrics; occupancy_gap_pct = theoretical - achieved.
-- occupancy_limiter is the limiter that really costs occupancy: its block limit is strictly the lowest
-- (a tie means removing it changes nothing) and theoretical occupancy is below 100 %. It is NULL for
-- warp-specialised kernels (warp_specialized_kernels name patterns, and one CTA per SM): producer/consumer
-- warpgroups with ~168 registers and ~200 KB of shared memory are built to run one CTA per SM.
WITH limits AS (
    SELECT *,
           least(coalesce(blocks_limit_registers, 1e9), coalesce(blocks_limit_shared_mem, 1e9),
                 coalesce(blocks_limit_warps, 1e9), coalesce(blocks_limit_blocks, 1e9),
                 coalesce(blocks_limit_barriers, 1e9)) AS blocks_per_sm
    FROM kernels
), ties AS (
    SELECT *,
           CASE WHEN blocks_limit_registers = blocks_per_sm THEN 1 ELSE 0 END
           + CASE WHEN blocks_limit_shared_mem = blocks_per_sm THEN 1 ELSE 0 END
           + CASE WHEN blocks_limit_warps = blocks_per_sm THEN 1 ELSE 0 END
           + CASE WHEN blocks_limit_blocks = blocks_per_sm THEN 1 ELSE 0 END
           + CASE WHEN blocks_limit_barriers = blocks_per_sm THEN 1 ELSE 0 END AS limiters_at_minimum
    FROM limits
), specialised AS (
    -- one row per launch whose name matches a warp-specialised pattern and that runs one CTA per SM
    -- (each distinct name is matched once: a regex per launch and pattern took seconds at 10,000 runs)
    SELECT l.run_id, l.launch_id, n.pattern
    FROM ties l
    JOIN (SELECT d.kernel_name, min(w.pattern) AS pattern
          FROM (SELECT DISTINCT kernel_name FROM ties WHERE blocks_per_sm = 1) d
          JOIN warp_specialized_kernels w ON regexp_matches(lower(d.kernel_name), w.pattern)
          GROUP BY d.kernel_name) n ON n.kernel_name = l.kernel_name
    WHERE l.blocks_per_sm = 1
), named AS (
    SELECT t.*, s.pattern AS warp_specialized_pattern,
           CASE WHEN t.blocks_per_sm >= 1e9 THEN NULL ELSE
               concat_ws('+',
                   CASE WHEN t.blocks_limit_registers = t.blocks_per_sm THEN 'registers' END,
                   CASE WHEN t.blocks_limit_shared_mem = t.blocks_per_sm THEN 'shared_mem' END,
                   CASE WHEN t.blocks_limit_warps = t.blocks_per_sm THEN 'warps' END,
                   CASE WHEN t.blocks_limit_blocks = t.blocks_per_sm THEN 'blocks' END,
                   CASE WHEN t.blocks_limit_barriers = t.blocks_per_sm THEN 'barriers' END)
           END AS binding_limit
    FROM ties t LEFT JOIN specialised s ON s.run_id = t.run_id AND s.launch_id = t.launch_id
)
SELECT run_id, launch_id, model, gpu, kernel_id, library, op_class, kernel_base,
       duration_ns, grid_size, block_size, registers_per_thread, shared_mem_bytes, waves_per_sm,
       achieved_occupancy_pct, theoretical_occupancy_pct,
       theoretical_occupancy_pct - achieved_occupancy_pct AS occupancy_gap_pct,
       blocks_limit_registers, blocks_limit_shared_mem, blocks_limit_warps, blocks_limit_blocks, blocks_limit_barriers,
       CASE WHEN blocks_per_sm >= 1e9 THEN NULL ELSE blocks_per_sm END AS blocks_per_sm,
       binding_limit,
       warp_specialized_pattern IS NOT NULL AS warp_specialized,
       CASE WHEN warp_specialized_pattern IS NULL AND limiters_at_minimum = 1
                 AND theoretical_occupancy_pct < 100 THEN binding_limit END AS occupancy_limiter,
       CASE WHEN blocks_per_sm >= 1e9 THEN 'no occupancy-limit metrics in the export'
            WHEN warp_specialized_pattern IS NOT NULL
                THEN concat('warp-specialised by design (name matches ''', warp_specialized_pattern, ''', ',
                            CAST(registers_per_thread AS VARCHAR), ' registers, 1 CTA/SM): not a limiter')
            WHEN theoretical_occupancy_pct >= 100 THEN 'theoretical occupancy 100 %: nothing limits'
            WHEN limiters_at_minimum > 1
                THEN concat(binding_limit, ' tie at ', CAST(blocks_per_sm AS VARCHAR),
                            ' blocks/SM: lowering one alone gains nothing')
            ELSE concat(binding_limit, ' strictly lowest (', CAST(blocks_per_sm AS VARCHAR), ' blocks/SM), theoretical ',
                        CAST(round(theoretical_occupancy_pct, 1) AS VARCHAR), ' %')
       END AS limiter_evidence
FROM named
ORDER BY model, gpu, run_id, launch_id
