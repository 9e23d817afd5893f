-- GPU time per ncu run, day by day, of the six kernels with the most ncu time in the selection.
SELECT k.kernel_base, CAST(coalesce(r.run_date, CAST(r.ingested_at AS DATE)) AS VARCHAR) AS day,
       sum(k.duration_ns) / count(DISTINCT k.run_id) * 1e-9 AS seconds_per_run
FROM kernels k JOIN runs r USING (run_id)
WHERE k.kernel_base IN (SELECT kernel_base FROM kernels WHERE {selected_runs} GROUP BY 1 ORDER BY sum(duration_ns) DESC LIMIT 6)
GROUP BY 1, 2
