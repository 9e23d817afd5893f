-- The GPUs with roofline launches in the selection: one roofline chart each.
SELECT DISTINCT gpu FROM roofline WHERE level = 'launch' AND {selected_runs} ORDER BY gpu
