-- kwh mcp: the models the warehouse holds runs of.
SELECT DISTINCT model FROM runs ORDER BY model
