-- kwh mcp kwh://metric-catalog: every canonical metric with its unit, the other names ncu versions give it and what it means.
SELECT metric, unit, aliases, description FROM metric_catalog ORDER BY metric
