-- kwh diff, a side of ncu runs (list ?): the bottleneck class holding most of each kernel identity's time.
SELECT kernel_id, arg_max(bottleneck, ns) FROM (
    SELECT kernel_id, bottleneck, coalesce(sum(duration_ns), 0) AS ns FROM bottleneck_class
    WHERE list_contains(?, run_id) GROUP BY ALL)
GROUP BY kernel_id
