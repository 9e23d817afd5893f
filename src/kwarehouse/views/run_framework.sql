-- The stack (framework) each run used: PyTorch, XLA (JAX/TensorFlow), CuPy, none (a CUDA C/C++, OpenMP or OpenACC application) or NULL where nothing says, with the evidence: the fixes of the verdict views name only knobs of that stack.
-- Evidence, by framework_rules.csv (the lowest priority number wins): the manifest's "framework" key, XLA
-- kernel names, PyTorch ops (aten::) in the NVTX ranges or the trace's CPU stack, torch.compile's Triton
-- kernels and the kernels' library (a PyTorch profiler trace alone is none: it records CuPy and JAX
-- programs too). A run with no evidence of its own takes its model's, where the model's other runs agree on
-- one framework (an ncu run of a PyTorch model profiled without --nvtx has a trace beside it);
-- framework_source says whose evidence it is.
WITH names AS (
    -- each distinct value once: the rules are matched per name, not per launch
    SELECT DISTINCT run_id, 'framework_op' AS source, framework_op AS value FROM kernels WHERE framework_op IS NOT NULL
    UNION SELECT DISTINCT run_id, 'framework_op', framework_op FROM kernel_launches WHERE framework_op IS NOT NULL
    UNION SELECT DISTINCT run_id, 'library', library FROM kernels
    UNION SELECT DISTINCT run_id, 'library', library FROM kernel_launches
    UNION SELECT DISTINCT run_id, 'library', library FROM kernel_summaries
    UNION SELECT DISTINCT run_id, 'kernel', kernel_base FROM kernels
    UNION SELECT DISTINCT run_id, 'kernel', kernel_base FROM kernel_launches
    UNION SELECT DISTINCT run_id, 'kernel', kernel_base FROM kernel_summaries
    UNION SELECT run_id, 'manifest', tags['framework'] FROM runs WHERE tags['framework'] IS NOT NULL
), found AS (
    SELECT n.run_id, arg_min(f.framework, CAST(f.priority AS INTEGER)) AS framework,
           arg_min(f.evidence, CAST(f.priority AS INTEGER)) AS evidence
    FROM names n JOIN framework_rules f ON f.source = n.source AND regexp_matches(lower(n.value), f.pattern)
    GROUP BY n.run_id
), per_model AS (
    SELECT r.model, CASE WHEN count(DISTINCT f.framework) = 1 THEN min(f.framework) END AS framework,
           min(f.evidence) AS evidence
    FROM runs r JOIN found f ON f.run_id = r.run_id
    GROUP BY r.model
)
SELECT r.run_id, r.model, r.gpu, r.tool,
       coalesce(f.framework, m.framework) AS framework,
       coalesce(f.evidence, m.evidence) AS evidence,
       CASE WHEN f.framework IS NOT NULL THEN 'this run' WHEN m.framework IS NOT NULL THEN 'another run of the model' END
           AS framework_source
FROM runs r
LEFT JOIN found f ON f.run_id = r.run_id
LEFT JOIN per_model m ON m.model = r.model
ORDER BY r.model, r.gpu, r.run_id
