-- The kernel-time design signals per model (design_signals, source 'calibrated', basis 'kernel time'): a row naming several models split over them by each model's real GPU time in its kernel (the split design_signals caps savings with; a row without a kernel is its one model's), with its time and estimated saving as shares of that model's GPU time on the row's time basis (kernel_time), never the fleet's. Idle-time signals are apart (idle_signals.sql).
WITH model_time AS (
    SELECT model, time_basis, sum(gpu_time_ns) AS gpu_time_ns FROM kernel_time GROUP BY model, time_basis
), model_kernel_time AS (
    SELECT model, time_basis, kernel_id, sum(gpu_time_ns) AS gpu_time_ns
    FROM kernel_time GROUP BY model, time_basis, kernel_id
), signal_rows AS (
    SELECT row_number() OVER (ORDER BY signal, subject, kernel_id, time_basis, model_list) AS row_id, *
    FROM design_signals
    WHERE source = 'calibrated' AND basis = 'kernel time'
), per_model AS (
    SELECT s.*, m.model, coalesce(k.gpu_time_ns, 0) AS weight_ns,
           count(*) OVER (PARTITION BY s.row_id) AS row_models,
           sum(coalesce(k.gpu_time_ns, 0)) OVER (PARTITION BY s.row_id) AS row_weight_ns
    FROM signal_rows s
    CROSS JOIN unnest(string_split(s.model_list, ',')) AS m(model)
    LEFT JOIN model_kernel_time k ON k.model = m.model AND k.time_basis = s.time_basis AND k.kernel_id = s.kernel_id
), shares AS (
    SELECT p.*,
           CASE WHEN p.row_weight_ns > 0 THEN p.weight_ns / p.row_weight_ns ELSE 1.0 / p.row_models END AS model_share
    FROM per_model p
)
SELECT s.model, s.signal, s.subject, s.time_basis,
       round(s.gpu_time_ns * s.model_share / 1e3, 1) AS gpu_time_us,
       round(100 * s.gpu_time_ns * s.model_share / nullif(t.gpu_time_ns, 0), 2) AS pct_of_model_gpu_time,
       round(s.est_time_saved_ns * s.model_share / 1e3, 1) AS est_saved_us,
       round(100 * s.est_time_saved_ns * s.model_share / nullif(t.gpu_time_ns, 0), 2) AS est_saved_pct_of_model_gpu_time,
       s.model_list AS all_models, s.fix, s.evidence, s.assumption
FROM shares s
LEFT JOIN model_time t ON t.model = s.model AND t.time_basis = s.time_basis
WHERE ($model IS NULL OR s.model = $model)
  AND ($since IS NULL OR s.model IN (SELECT model FROM runs WHERE coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))
ORDER BY s.model, s.est_time_saved_ns * s.model_share DESC NULLS LAST, s.gpu_time_ns * s.model_share DESC, s.signal, s.subject
