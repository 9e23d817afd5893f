-- The idle-time items of what_to_fix_first (basis other than 'kernel time': launch-bound runs), never added to kernel time: per model the idle time a fix would give back (per run, averaged over the model's timeline runs), its basis (measured under the profiler, an upper bound; or without the profiler), its share of the run's span and the CPU launch interval seen in the trace (launch_bound, the run rows).
WITH runs_ AS (
    SELECT model, avg(est_saved_pct_of_span) AS est_saved_pct_of_span, avg(launch_interval_ns) AS launch_interval_ns,
           avg(gap_median_ns) AS gap_median_ns, avg(unprofiled_span_ns) AS unprofiled_span_ns
    FROM launch_bound
    WHERE subject_kind = 'run'
    GROUP BY model
)
SELECT f.rank, f.model_list AS model, f.signal, f.subject, f.basis, round(f.est_time_saved_ns / 1e3, 1) AS est_saved_us,
       round(r.est_saved_pct_of_span, 1) AS est_saved_pct_of_span, round(r.launch_interval_ns / 1e3, 1) AS launch_interval_us,
       round(r.gap_median_ns / 1e3, 1) AS gap_median_us, round(r.unprofiled_span_ns / 1e3, 1) AS unprofiled_span_us,
       f.fix, f.evidence, f.assumption
FROM what_to_fix_first f
LEFT JOIN runs_ r ON r.model = f.model_list
WHERE f.basis <> 'kernel time'
  AND ($model IS NULL OR list_contains(string_split(f.model_list, ','), $model))
  AND ($since IS NULL OR f.model_list IN (SELECT model FROM runs WHERE coalesce(run_date, CAST(ingested_at AS DATE)) >= CAST($since AS DATE)))
ORDER BY f.rank
