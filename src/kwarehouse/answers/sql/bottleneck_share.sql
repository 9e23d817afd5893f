-- Each model's real GPU time split by bottleneck class (the bottleneck_share view), as shares of that model's time.
SELECT model, bottleneck, share_pct FROM bottleneck_share WHERE {selected_models} AND gpu_time_ns > 0 ORDER BY model, share_pct DESC
