-- The kernel lists' common CTEs (kwh kernels, kwh summary's top kernels): displays, each kernel identity's readable name (from its ncu launches or its timeline launches); verdicts, the bottleneck verdict and fix of its longest ncu launch.
displays AS (
    SELECT kernel_id, min(kernel_display) AS kernel_display
    FROM (SELECT kernel_id, kernel_display FROM kernels UNION ALL SELECT kernel_id, kernel_display FROM kernel_launches)
    GROUP BY kernel_id),
verdicts AS (
    -- a launch without a duration (an ncu --metrics list) still has a verdict: "not enough data: ..."
    SELECT kernel_id, arg_max(CASE WHEN bottleneck = 'not enough data' THEN decided_by
                                   ELSE bottleneck || coalesce(' (' || limiting_unit || ')', '') END,
                              coalesce(duration_ns, -1)) AS bottleneck,
           arg_max(fix, coalesce(duration_ns, -1)) AS fix
    FROM bottleneck_class GROUP BY kernel_id)
