-- kwh report's filters on a table with model, gpu and run_id columns: the model ($model), the GPU ($gpu) and the runs of day $since or later (manifest date, else ingest day); a NULL filter keeps all.
($model IS NULL OR model = $model) AND ($gpu IS NULL OR gpu = $gpu)
AND ($since IS NULL OR run_id IN (SELECT run_id FROM runs WHERE coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))
