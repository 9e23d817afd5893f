-- Per model and run, how well it uses the GPU (the model_efficiency view; kwh summary's headline, the report's filtered table): MFU over the traced span and over busy time, tensor-core busy share, padding factor (executed/useful FLOPs), throttled share and where the span went (at the roof, below it, not placed, idle). ncu-only models rest on replay time.
SELECT model, left(run_id, 8) AS run, time_basis, round(mfu_pct, 1) AS mfu_pct, round(mfu_busy_pct, 1) AS mfu_busy_pct,
       round(tensor_busy_pct, 1) AS tensor_busy_pct, round(padding_factor, 2) AS padding_factor,
       round(throttled_pct, 1) AS throttled_pct, round(at_roof_pct, 1) AS at_roof_pct,
       round(below_roof_pct, 1) AS below_roof_pct, round(unplaced_pct, 1) AS unplaced_pct, round(idle_pct, 1) AS idle_pct,
       round(flops_coverage_pct, 1) AS flops_coverage_pct
FROM model_efficiency
WHERE {selected_runs}
ORDER BY model, time_basis DESC, run_id
