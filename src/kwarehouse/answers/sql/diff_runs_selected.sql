-- kwh diff: the runs a selector names (model=gpt2,date=2026-11-23,tag.branch=main), with their tool; diff.resolve puts in the selector's conditions, one per key=value, the values bound.
SELECT run_id, tool FROM runs WHERE {selector} ORDER BY run_id
