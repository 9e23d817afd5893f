-- Compulsory bytes of each ncu launch's framework op: the unique bytes it must read and write (inputs + output, from the op's input shapes and element size), the floor of its DRAM traffic, for the reuse test of the bottleneck classes.
-- Only for streaming op classes (elementwise, copy/transpose, normalization, softmax, reduction, gather/scatter)
-- where the output follows from the inputs: the largest input's size (elementwise, normalization, softmax),
-- already among the inputs (aten::copy_ writes its first input), self written back (in-place ops), the sum of
-- the inputs (aten::cat), or next to nothing (reductions). GEMMs, convolutions and
-- attention reuse their inputs by design and are judged on FLOPs instead. Up to 6 tensors of up to 6 dims are
-- read from op_shapes ("[[4, 256, 768], [768], []]"; "[]" is a scalar). Each tensor's element size comes from
-- the element types a PyTorch trace of the same model recorded for the same op and shapes
-- (kernel_launches.op_dtypes: ["c10::BFloat16", "float", "Scalar"]), else from the kernel's math dtype
-- (a dtype-converting copy then counts at its compute dtype); compulsory_basis says which.
WITH trace_dtypes AS (
    SELECT model, gpu, framework_op, op_shapes, min(op_dtypes) AS op_dtypes
    FROM kernel_launches
    WHERE op_dtypes IS NOT NULL AND op_shapes IS NOT NULL
    GROUP BY model, gpu, framework_op, op_shapes
), ops AS (
    SELECT k.run_id, k.launch_id, k.model, k.gpu, k.kernel_id, k.framework_op, k.op_shapes, k.op_class, k.math_dtype,
           d.op_dtypes,
           CASE k.math_dtype WHEN 'fp64' THEN 8 WHEN 'fp32' THEN 4 WHEN 'tf32' THEN 4 WHEN 'bf16' THEN 2 WHEN 'fp16' THEN 2
                             WHEN 'fp8_e4m3' THEN 1 WHEN 'fp8_e5m2' THEN 1 WHEN 'int8' THEN 1 END AS element_bytes
    FROM kernels k
    LEFT JOIN trace_dtypes d ON d.model = k.model AND d.gpu = k.gpu AND d.framework_op = k.framework_op
         AND d.op_shapes = k.op_shapes
    WHERE k.op_shapes IS NOT NULL
      AND k.op_class IN ('elementwise', 'copy/transpose', 'normalization', 'softmax', 'reduction', 'gather/scatter/index')
), distinct_ops AS (
    -- the shapes are parsed once per distinct op, not once per launch (millions at 10,000 runs)
    SELECT DISTINCT framework_op, op_shapes, op_class, math_dtype, element_bytes, op_dtypes FROM ops
), tensors AS (
    -- the k-th tensor's dims as text ('4, 256, 768'), '' when it is a scalar or absent
    SELECT *,
           regexp_extract(op_shapes, '^\[\[([0-9, ]*)\]', 1) AS t0,
           regexp_extract(op_shapes, '^\[(?:\[[0-9, ]*\], ){1}\[([0-9, ]*)\]', 1) AS t1,
           regexp_extract(op_shapes, '^\[(?:\[[0-9, ]*\], ){2}\[([0-9, ]*)\]', 1) AS t2,
           regexp_extract(op_shapes, '^\[(?:\[[0-9, ]*\], ){3}\[([0-9, ]*)\]', 1) AS t3,
           regexp_extract(op_shapes, '^\[(?:\[[0-9, ]*\], ){4}\[([0-9, ]*)\]', 1) AS t4,
           regexp_extract(op_shapes, '^\[(?:\[[0-9, ]*\], ){5}\[([0-9, ]*)\]', 1) AS t5,
           regexp_extract(coalesce(op_dtypes, ''), '^\["([^"]*)"', 1) AS d0,
           regexp_extract(coalesce(op_dtypes, ''), '^\[(?:"[^"]*", ){1}"([^"]*)"', 1) AS d1,
           regexp_extract(coalesce(op_dtypes, ''), '^\[(?:"[^"]*", ){2}"([^"]*)"', 1) AS d2,
           regexp_extract(coalesce(op_dtypes, ''), '^\[(?:"[^"]*", ){3}"([^"]*)"', 1) AS d3,
           regexp_extract(coalesce(op_dtypes, ''), '^\[(?:"[^"]*", ){4}"([^"]*)"', 1) AS d4,
           regexp_extract(coalesce(op_dtypes, ''), '^\[(?:"[^"]*", ){5}"([^"]*)"', 1) AS d5
    FROM distinct_ops
), unnested AS (
    -- one row per (launch, tensor position k) with the k-th tensor's dims
    SELECT framework_op, op_shapes, op_class, math_dtype, element_bytes, op_dtypes, k,
           op_dtypes IS NOT NULL AS traced,
           CASE k WHEN 0 THEN t0 WHEN 1 THEN t1 WHEN 2 THEN t2 WHEN 3 THEN t3 WHEN 4 THEN t4 ELSE t5 END AS dims,
           CASE k WHEN 0 THEN d0 WHEN 1 THEN d1 WHEN 2 THEN d2 WHEN 3 THEN d3 WHEN 4 THEN d4 ELSE d5 END AS dtype
    FROM tensors CROSS JOIN (VALUES (0), (1), (2), (3), (4), (5)) AS positions (k)
), sized AS (
    SELECT framework_op, op_shapes, op_class, math_dtype, element_bytes, op_dtypes, k,
           traced,
           coalesce(CASE WHEN dtype IN ('c10::BFloat16', 'c10::Half') THEN 2 WHEN dtype IN ('float', 'int', 'unsigned int') THEN 4
                         WHEN dtype IN ('double', 'long int', 'long', 'int64_t') THEN 8
                         WHEN dtype IN ('bool', 'unsigned char', 'signed char') OR dtype LIKE 'c10::Float8%' THEN 1 END,
                    element_bytes) AS tensor_element_bytes,
           CASE WHEN dims = '' THEN 0 ELSE
               coalesce(TRY_CAST(nullif(split_part(dims, ', ', 1), '') AS DOUBLE), 1)
               * coalesce(TRY_CAST(nullif(split_part(dims, ', ', 2), '') AS DOUBLE), 1)
               * coalesce(TRY_CAST(nullif(split_part(dims, ', ', 3), '') AS DOUBLE), 1)
               * coalesce(TRY_CAST(nullif(split_part(dims, ', ', 4), '') AS DOUBLE), 1)
               * coalesce(TRY_CAST(nullif(split_part(dims, ', ', 5), '') AS DOUBLE), 1)
               * coalesce(TRY_CAST(nullif(split_part(dims, ', ', 6), '') AS DOUBLE), 1) END AS numel
    FROM unnested
), per_op AS (
    SELECT framework_op, op_shapes, op_class, math_dtype, element_bytes, op_dtypes,
           sum(numel) AS input_numel, bool_or(traced) AS traced,
           -- a tensor whose element size nobody knows makes the op's bytes unknown
           count(CASE WHEN numel > 0 AND tensor_element_bytes IS NULL THEN 1 END) AS unsized_tensors,
           sum(numel * tensor_element_bytes) AS input_bytes,
           max(numel * tensor_element_bytes) AS largest_input_bytes,
           max(CASE WHEN k = 0 THEN numel * tensor_element_bytes END) AS first_input_bytes
    FROM sized
    GROUP BY framework_op, op_shapes, op_class, math_dtype, element_bytes, op_dtypes
), launch_ops AS (
    SELECT o.run_id, o.launch_id, o.model, o.gpu, o.kernel_id, o.framework_op, o.op_shapes, o.op_class, o.math_dtype,
           o.element_bytes, p.input_numel, p.traced, p.unsized_tensors, p.input_bytes, p.largest_input_bytes,
           p.first_input_bytes
    FROM ops o
    JOIN per_op p ON coalesce(p.framework_op, '') = coalesce(o.framework_op, '') AND p.op_shapes = o.op_shapes AND p.op_class = o.op_class
     AND coalesce(p.math_dtype, '') = coalesce(o.math_dtype, '') AND coalesce(p.element_bytes, 0) = coalesce(o.element_bytes, 0)
     AND coalesce(p.op_dtypes, '') = coalesce(o.op_dtypes, '')
)
SELECT run_id, launch_id, model, gpu, kernel_id, framework_op, op_shapes, op_class, math_dtype,
       input_bytes, output_bytes, input_bytes + output_bytes AS compulsory_bytes,
       concat(framework_op, ' ', op_shapes, CASE WHEN traced THEN ' with the element types of the trace'
                                                 ELSE concat(' x ', CAST(element_bytes AS VARCHAR), ' B (', math_dtype, ')') END,
              ': ', output_rule) AS compulsory_basis
FROM (
    SELECT *,
           -- copy_(self, src): self is only written, so the inputs already hold the output; an in-place op
           -- (add_, mul_) reads and writes self; cat writes the sum of its inputs; a reduction next to nothing
           CASE WHEN framework_op = 'aten::copy_' THEN 0
                WHEN framework_op = 'aten::cat' THEN input_bytes
                WHEN op_class = 'reduction' THEN 0
                WHEN right(framework_op, 1) = '_' THEN first_input_bytes
                ELSE largest_input_bytes END AS output_bytes,
           CASE WHEN framework_op = 'aten::copy_' THEN 'source read + destination written'
                WHEN framework_op = 'aten::cat' THEN 'inputs + output = their sum'
                WHEN op_class = 'reduction' THEN 'inputs + a reduced output'
                WHEN right(framework_op, 1) = '_' THEN 'inputs + self written back (in place)'
                ELSE 'inputs + output = the largest input' END AS output_rule
    FROM launch_ops
) sized_op
WHERE unsized_tensors = 0 AND input_numel > 0
