-- kwh report's filters on kernel_time-like views (model and gpu, no run_id): they add up all of a model's runs, so $since keeps the models with a run of that day or later rather than cutting their runs.
($model IS NULL OR model = $model) AND ($gpu IS NULL OR gpu = $gpu)
AND ($since IS NULL OR model IN (SELECT model FROM runs WHERE coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))
