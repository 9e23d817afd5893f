-- kwh diff, a side of timeline runs (list ?, given twice): each kernel identity's base name, library and op class, from its launches and kernel summaries.
SELECT kernel_id, min(kernel_base), min(library), min(op_class) FROM (
    SELECT kernel_id, kernel_base, library, op_class FROM kernel_launches WHERE list_contains(?, run_id)
    UNION ALL
    SELECT kernel_id, kernel_base, library, op_class FROM kernel_summaries WHERE list_contains(?, run_id))
GROUP BY kernel_id
