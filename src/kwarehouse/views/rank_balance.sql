-- Per-rank GPU time of multi-process jobs: each rank's (process and device of a timeline run) span, busy time, compute busy time (communication kernels left out) and communication kernel time, the job's slowest rank by compute busy time and its excess over the median rank.
-- A rank is one (run, process, device) of kernel_launches; a job is the timeline runs of one model, GPU,
-- tool and day (multi-process jobs write one nsys or PyTorch export per rank; a single export holding
-- several processes or devices gives several ranks by itself). busy_ns is the union of the rank's GPU
-- activity intervals (gpu_timeline's definition). compute_busy_ns is the same union without the
-- communication kernels (op_class 'communication': NCCL all-reduce, all-gather, ...): a fast rank's
-- collective kernel is resident on the GPU while it waits for the slow rank to arrive, so busy_ns counts
-- the wait as work (in a real 2-rank DDP step on H200s, tests/data/multirank-ddp-h200, the rank with half
-- the tokens had 8.9 ms of all-reduce against 0.24 ms on the other and the larger busy_ns). The slowest
-- rank has the most compute busy time; excess_ns is its compute busy time above the job's median rank:
-- what the other ranks wait for at the next collective, if the work was meant to be balanced. A job of
-- one rank has excess 0.
WITH activity AS (
    SELECT l.run_id, l.model, l.gpu, r.tool, coalesce(r.run_date, CAST(r.ingested_at AS DATE)) AS run_day,
           l.process_id, l.device_id, l.activity, l.start_ns, l.duration_ns, l.start_ns + l.duration_ns AS end_ns,
           l.op_class = 'communication' AS communication
    FROM kernel_launches l
    JOIN runs r ON r.run_id = l.run_id
), spaced AS (
    SELECT a.*,
           max(end_ns) OVER (PARTITION BY run_id, process_id, device_id ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS busy_until,
           max(end_ns) OVER (PARTITION BY run_id, process_id, device_id, communication ORDER BY start_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS kind_busy_until
    FROM activity a
), ranks AS (
    SELECT run_id, model, gpu, tool, run_day, process_id, device_id,
           max(end_ns) - min(start_ns) AS span_ns,
           max(end_ns) - min(start_ns) - sum(CASE WHEN start_ns > busy_until THEN start_ns - busy_until ELSE 0 END)
               AS busy_ns,
           coalesce(max(CASE WHEN NOT communication THEN end_ns END) - min(CASE WHEN NOT communication THEN start_ns END)
                    - sum(CASE WHEN NOT communication AND start_ns > kind_busy_until THEN start_ns - kind_busy_until
                               ELSE 0 END), 0) AS compute_busy_ns,
           sum(CASE WHEN communication THEN duration_ns ELSE 0 END) AS communication_ns,
           count_if(activity = 'kernel') AS kernels,
           sum(CASE WHEN activity = 'kernel' THEN duration_ns ELSE 0 END) AS kernel_ns
    FROM spaced
    GROUP BY run_id, model, gpu, tool, run_day, process_id, device_id
), placed AS (
    SELECT k.*,
           count(*) OVER (PARTITION BY model, gpu, tool, run_day) AS job_ranks,
           median(compute_busy_ns) OVER (PARTITION BY model, gpu, tool, run_day) AS job_median_busy_ns,
           row_number() OVER (PARTITION BY model, gpu, tool, run_day ORDER BY compute_busy_ns DESC, run_id, process_id,
                              device_id) AS busy_rank
    FROM ranks k
)
SELECT model, gpu, tool, run_day, run_id, process_id, device_id, job_ranks, span_ns, busy_ns,
       100.0 * busy_ns / NULLIF(span_ns, 0) AS busy_pct, compute_busy_ns, communication_ns, kernels, kernel_ns,
       job_median_busy_ns, busy_rank = 1 AS slowest, compute_busy_ns - job_median_busy_ns AS excess_ns,
       100.0 * (compute_busy_ns - job_median_busy_ns) / NULLIF(job_median_busy_ns, 0) AS excess_pct
FROM placed
ORDER BY model, gpu, tool, run_day, compute_busy_ns DESC, run_id, process_id, device_id
