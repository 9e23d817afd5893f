-- Which GEMMs waste the most GPU time against the efficiency similar well-shaped GEMMs reach on the same GPU? Misaligned, tiny or wave-quantised shapes first by estimated time saved (an estimate: see estimate_basis).
SELECT model, gpu, op, m, n, k, batch, math_dtype, kernel_base, launches,
       round(gpu_time_ns / 1e3, 1) AS gpu_time_us, round(tflops, 1) AS tflops, round(pct_of_peak, 1) AS pct_of_peak,
       misaligned, tiny, round(wave_fill_pct, 1) AS wave_fill_pct,
       round(est_time_saved_ns / 1e3, 1) AS est_time_saved_us,
       round(100.0 * est_time_saved_ns / NULLIF(gpu_time_ns, 0), 1) AS est_saved_pct,
       evidence, estimate_basis, time_basis
FROM gemm_efficiency
ORDER BY est_time_saved_ns DESC NULLS LAST, gpu_time_ns DESC, model, kernel_id, m, n, k
