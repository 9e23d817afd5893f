-- The peaks ncu reported per model, GPU and math dtype of its launches (the highest DRAM and L2 bandwidth, and the dense peak at the GPU's highest SM clock where ncu's tensor counters give the peak per cycle), with the partition's SM count, compute capability (of its ncu launches and of its runs) and L2 size: a GPU's peak over the fleet is the highest of its partitions' rows.
-- One row per math dtype of the partition's ncu launches (NULL included); a partition without ncu
-- launches has one row, with its runs' compute capability and NULL peaks. l2_cache_bytes
-- (device__attribute_l2_cache_size, 50 MiB on the H100 SXM) and run_compute_capability are the
-- partition's, the same on each of its rows. clock_peak_flops_per_s: ncu's tensor peak per cycle x
-- max_sm_clock_hz (540,672 BF16 FLOP/cycle x 1.98 GHz = 1,070 TFLOP/s on the H100 SXM).
WITH partitions AS (
    SELECT model, gpu, max(compute_capability) AS run_compute_capability FROM runs GROUP BY model, gpu
), l2 AS (
    SELECT model, gpu, max(value) AS l2_cache_bytes
    FROM metrics WHERE metric = 'device__attribute_l2_cache_size'
    GROUP BY model, gpu
), dtypes AS (
    SELECT model, gpu, math_dtype, count(*) AS launches, max(sm_count) AS sm_count,
           max(compute_capability) AS compute_capability,
           max(peak_dram_bytes_per_s) AS peak_dram_bytes_per_s, max(peak_l2_bytes_per_s) AS peak_l2_bytes_per_s,
           max(CASE WHEN sm_clock_hz > 0 AND max_sm_clock_hz > 0 AND flops_source = 'ncu tensor counters'
                    THEN peak_flops_per_s / sm_clock_hz * max_sm_clock_hz END) AS clock_peak_flops_per_s
    FROM kernels
    GROUP BY model, gpu, math_dtype
)
SELECT p.model, p.gpu, d.math_dtype, coalesce(d.launches, 0) AS launches, d.sm_count, d.compute_capability,
       p.run_compute_capability, d.peak_dram_bytes_per_s, d.peak_l2_bytes_per_s, d.clock_peak_flops_per_s,
       l.l2_cache_bytes
FROM partitions p
LEFT JOIN dtypes d ON d.model = p.model AND d.gpu = p.gpu
LEFT JOIN l2 l ON l.model = p.model AND l.gpu = p.gpu
ORDER BY p.model, p.gpu, d.math_dtype
