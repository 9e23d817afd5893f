-- One GPU's tensor-core roofs: the dense peak of each tensor dtype its placed launches ran, highest first.
SELECT roof, avg(peak_flops_per_s) AS peak_flops_per_s
FROM roofline
WHERE level = 'launch' AND gpu = $gpu_name AND roof LIKE '% tensor' AND flops > 0 AND {selected_runs}
GROUP BY roof
ORDER BY 2 DESC
