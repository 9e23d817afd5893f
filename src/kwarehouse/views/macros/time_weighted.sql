-- time_weighted(x, weight): the mean of x weighted by weight (a duration) over the rows where x is known; NULL where those weigh nothing
-- One definition for the ~50 columns (views, kwh rollup, answers) that average a counter over kernel time:
-- a launch without the counter must not pull the mean towards 0, and no time at all gives NULL, not
-- inf or NaN. DuckDB's weighted_avg gives NaN for zero total weight, and Spark has neither it nor
-- macros: spark.py expands each call from this text. A macro is expanded where a query is bound, so it
-- costs nothing at run time (a shared view of these averages cost 0.2 s per read: bench/RESULTS.md).
CREATE OR REPLACE MACRO time_weighted(x, weight) AS
    sum(x * weight) / NULLIF(sum(CASE WHEN x IS NOT NULL THEN weight END), 0);
