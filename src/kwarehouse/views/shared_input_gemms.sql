-- GEMMs sharing an input on a timeline, per model and GPU: each member of a group of two or more GEMMs back to back on one stream (at most neighbour_kernels_between kernels apart) with the same op, M, K, batch and dtype, the same input A (Llama's q/k/v projections; gate_proj, SiLU, up_proj), with its place in the group: what the fleet-wide design signals fuse, one partition at a time.
-- seq: the kernel's place on its stream (run, device, stream); group_no numbers the groups of a stream;
-- starts_group 1 for a group's first member; gap_before_ns: the idle time before a member that directly
-- follows the previous one (0 otherwise); time_rank 1 for the group's longest member (the one the others fuse
-- into); elem_bytes: the size of one element of math_dtype. Its rows depend on the run's own launches only.
WITH timeline_order AS (
    -- each timeline kernel's place on its stream, and the GEMMs among them (op shapes from the trace)
    SELECT l.run_id, l.model, l.gpu, l.device_id, l.stream_id, l.start_ns, l.duration_ns, l.kernel_id, l.kernel_base, l.library,
           l.kernel_display, l.framework_op, l.gemm_m, l.gemm_n, l.gemm_k, l.gemm_batch, l.math_dtype, l.peak_flops_per_s,
           row_number() OVER (PARTITION BY l.run_id, l.device_id, l.stream_id ORDER BY l.start_ns, l.launch_index) AS seq
    FROM kernel_launches l
    WHERE l.activity = 'kernel'
), timeline_gemms AS (
    SELECT o.*,
           lag(o.seq) OVER (PARTITION BY o.run_id, o.device_id, o.stream_id ORDER BY o.seq) AS prev_seq,
           lag(o.start_ns + o.duration_ns) OVER (PARTITION BY o.run_id, o.device_id, o.stream_id ORDER BY o.seq) AS prev_end_ns,
           lag(concat(coalesce(o.framework_op, '?'), '|', CAST(o.gemm_m AS VARCHAR), '|', CAST(o.gemm_k AS VARCHAR), '|',
                      CAST(coalesce(o.gemm_batch, 1) AS VARCHAR), '|', coalesce(o.math_dtype, '?')))
               OVER (PARTITION BY o.run_id, o.device_id, o.stream_id ORDER BY o.seq) AS prev_input
    FROM timeline_order o
    WHERE o.gemm_m IS NOT NULL AND o.gemm_n IS NOT NULL AND o.gemm_k IS NOT NULL
), shared_input_links AS (
    -- a GEMM continues its predecessor's group when it is the next GEMM on the stream, at most
    -- neighbour_kernels_between other kernels later, with the same op, M, K, batch and dtype: the same input A
    -- (Llama's q/k/v projections back to back; gate_proj, the SiLU of its output, up_proj). The trace records no
    -- tensor identity, so the shared A is inferred from its shape and the adjacency; an A rewritten in between
    -- (a norm, a residual add) takes more kernels than the limit allows
    SELECT g.*,
           CASE WHEN g.prev_seq IS NOT NULL AND g.seq - g.prev_seq - 1 <= t.neighbour_kernels_between
                     AND g.prev_input = concat(coalesce(g.framework_op, '?'), '|', CAST(g.gemm_m AS VARCHAR), '|', CAST(g.gemm_k AS VARCHAR), '|',
                                               CAST(coalesce(g.gemm_batch, 1) AS VARCHAR), '|', coalesce(g.math_dtype, '?'))
                THEN 0 ELSE 1 END AS starts_group,
           CASE WHEN g.seq - g.prev_seq = 1 THEN greatest(0, g.start_ns - g.prev_end_ns) ELSE 0 END AS gap_before_ns
    FROM timeline_gemms g CROSS JOIN thresholds t
), shared_input_groups AS (
    SELECT l.*,
           sum(l.starts_group) OVER (PARTITION BY l.run_id, l.device_id, l.stream_id ORDER BY l.seq
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS group_no
    FROM shared_input_links l
), members AS (
    SELECT g.*,
           count(*) OVER (PARTITION BY g.run_id, g.device_id, g.stream_id, g.group_no) AS group_size,
           row_number() OVER (PARTITION BY g.run_id, g.device_id, g.stream_id, g.group_no
                              ORDER BY g.duration_ns DESC, g.seq) AS time_rank,
           CASE WHEN g.math_dtype = 'fp64' THEN 8 WHEN g.math_dtype IN ('fp32', 'tf32') THEN 4
                WHEN g.math_dtype IN ('bf16', 'fp16') THEN 2
                WHEN g.math_dtype IN ('fp8_e4m3', 'fp8_e5m2', 'int8') THEN 1 END AS elem_bytes
    FROM shared_input_groups g
)
SELECT run_id, model, gpu, device_id, stream_id, group_no, seq, starts_group, gap_before_ns, start_ns, duration_ns,
       kernel_id, kernel_base, kernel_display, library, framework_op, gemm_m, gemm_n, gemm_k, gemm_batch, math_dtype,
       elem_bytes, peak_flops_per_s, group_size, time_rank
FROM members
WHERE group_size > 1
ORDER BY model, gpu, run_id, device_id, stream_id, seq
