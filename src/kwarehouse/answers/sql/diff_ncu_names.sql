-- kwh diff, a side of ncu runs (list ?): each kernel identity's base name, library and op class.
SELECT kernel_id, min(kernel_base), min(library), min(op_class) FROM kernels
WHERE list_contains(?, run_id) GROUP BY kernel_id
