-- Which kernels are most popular across models? The kernel identities used by the most models, with their share of fleet GPU time.
SELECT popularity_rank, kernel_base, library, op_class, models, runs, launches,
       round(gpu_time_pct, 2) AS gpu_time_pct, kernel_id
FROM kernel_popularity
WHERE level = 'kernel'
ORDER BY popularity_rank
LIMIT 25
