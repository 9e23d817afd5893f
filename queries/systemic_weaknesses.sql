-- Where are the systemic weaknesses? Each design signal with how many kernels, models and how much fleet GPU time it touches.
SELECT signal, count(*) AS kernels_or_families, max(models) AS most_models_for_one_kernel,
       round(sum(gpu_time_pct), 2) AS gpu_time_pct
FROM design_signals
GROUP BY signal
ORDER BY gpu_time_pct DESC
