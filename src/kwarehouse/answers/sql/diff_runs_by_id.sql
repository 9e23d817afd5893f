-- kwh diff: the runs whose id starts with ? (a side named by a run id or a unique prefix of one), with their tool.
SELECT run_id, tool FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id
