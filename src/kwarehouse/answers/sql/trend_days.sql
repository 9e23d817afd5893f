-- The days (manifest date, else ingest day) of the ncu runs in the selection: a trend needs two.
SELECT DISTINCT coalesce(r.run_date, CAST(r.ingested_at AS DATE)) AS day
FROM runs r
WHERE r.tool = 'ncu' AND r.run_id IN (SELECT run_id FROM kernels WHERE {selected_runs})
ORDER BY 1
