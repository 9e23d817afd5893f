-- Per model, the days of its ncu runs: the report diffs the last two.
SELECT model, list(DISTINCT CAST(coalesce(run_date, CAST(ingested_at AS DATE)) AS VARCHAR)) AS days
FROM runs
WHERE tool = 'ncu' AND ($model IS NULL OR model = $model) AND ($gpu IS NULL OR gpu = $gpu)
GROUP BY model
ORDER BY model
