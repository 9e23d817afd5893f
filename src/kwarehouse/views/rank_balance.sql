-- Per-rank GPU time of multi-process jobs: each rank's (process and device of a timeline run) span, busy time and kernel time, the job's slowest rank and its excess over the median rank.
-- A rank is one (run, process, device) of kernel_launches; a job is the timeline runs of one model, GPU,
-- tool and day (multi-process jobs write one nsys or PyTorch export per rank; a single export holding
-- several processes or devices gives several ranks by itself). busy_ns is the union of the rank's GPU
-- activity intervals (gpu_timeline's definition). The slowest rank has the most busy time; excess_ns is
-- its busy time above the job's median rank: what the other ranks wait for at the next collective, if
-- the work was meant to be balanced. A job of one rank has excess 0.
WITH activity AS (
    SELECT l.run_id, l.model, l.gpu, r.tool, coalesce(r.run_date, CAST(r.ingested_at AS DATE)) AS run_day,
           l.process_id, l.device_id, l.activity, l.start_ns, l.duration_ns, l.start_ns + l.duration_ns AS end_ns
    FROM kernel_launches l
    JOIN runs r ON r.run_id = l.run_id
), spaced AS (
    SELECT a.*,
           max(end_ns) OVER (PARTITION BY run_id, process_id, device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until
    FROM activity a
), ranks AS (
    SELECT run_id, model, gpu, tool, run_day, process_id, device_id,
           max(end_ns) - min(start_ns) AS span_ns,
           max(end_ns) - min(start_ns) - sum(CASE WHEN start_ns > busy_until THEN start_ns - busy_until ELSE 0 END)
               AS busy_ns,
           count_if(activity = 'kernel') AS kernels,
           sum(CASE WHEN activity = 'kernel' THEN duration_ns ELSE 0 END) AS kernel_ns
    FROM spaced
    GROUP BY run_id, model, gpu, tool, run_day, process_id, device_id
), placed AS (
    SELECT k.*,
           count(*) OVER (PARTITION BY model, gpu, tool, run_day) AS job_ranks,
           median(busy_ns) OVER (PARTITION BY model, gpu, tool, run_day) AS job_median_busy_ns,
           row_number() OVER (PARTITION BY model, gpu, tool, run_day ORDER BY busy_ns DESC, run_id, process_id,
                              device_id) AS busy_rank
    FROM ranks k
)
SELECT model, gpu, tool, run_day, run_id, process_id, device_id, job_ranks, span_ns, busy_ns,
       100.0 * busy_ns / NULLIF(span_ns, 0) AS busy_pct, kernels, kernel_ns, job_median_busy_ns,
       busy_rank = 1 AS slowest, busy_ns - job_median_busy_ns AS excess_ns,
       100.0 * (busy_ns - job_median_busy_ns) / NULLIF(job_median_busy_ns, 0) AS excess_pct
FROM placed
ORDER BY model, gpu, tool, run_day, busy_rank
