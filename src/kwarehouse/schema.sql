-- kwarehouse table definitions: the one source of truth for every Parquet table kwh writes.
-- The code loads this file into DuckDB, reads the column types back and checks every table it writes
-- against them (kwarehouse/schema.py). Partition columns (model, gpu) are listed here too but live in
-- the hive directory names (model=.../gpu=...), not inside the Parquet files.
-- Units: every numeric metric is stored in base units (bytes, ns, Hz, %); column names carry the unit.

-- One profiling session (one ncu report, whichever pages of it were exported).
CREATE TABLE runs (
    run_id              VARCHAR NOT NULL,   -- stable hash of the session's launches, folder and manifest
    model               VARCHAR NOT NULL,   -- partition: manifest "model", --model, or the folder name
    gpu                 VARCHAR NOT NULL,   -- partition: device name as the tool reported it, else manifest "gpu" / --gpu; without one "unknown (CC 9.0, 132 SMs)" (what is known)
    family              VARCHAR,
    task                VARCHAR,
    dtype               VARCHAR,
    batch               BIGINT,
    seq_len             BIGINT,
    compute_capability  VARCHAR,            -- "9.0": the export (ncu CC column or device attributes, nsys TARGET_INFO_GPU), else the manifest
    sm_count            BIGINT,             -- the manifest, else the export (ncu device__attribute_multiprocessor_count, nsys TARGET_INFO_GPU.smCount)
    clock_control       VARCHAR,            -- ncu --clock-control (base / none): manifest, else ncu.log beside the export ("Running with unmodified GPU clocks" = none)
    cache_control       VARCHAR,            -- ncu --cache-control (all / none) where the manifest or ncu.log says it
    replay_mode         VARCHAR,            -- ncu --replay-mode (kernel / application / range / app-range) where the manifest or ncu.log says it
    tool                VARCHAR NOT NULL,   -- "ncu", "nsys" or "torch"
    tool_version        VARCHAR,            -- ncu_version.txt, the nsys export metadata, or the torch version
    framework_versions  VARCHAR,            -- JSON object: torch, cuda, transformers, python ... from the manifest
    run_date            DATE,               -- manifest "date" when present, else the day the export records (nsys: the capture's UTC start)
    tags                MAP(VARCHAR, VARCHAR), -- --tag key=value and unrecognised manifest keys
    manifest_json       VARCHAR,            -- the manifest exactly as read (NULL without one)
    source_dir          VARCHAR NOT NULL,   -- folder the exports were read from
    source_files        VARCHAR[] NOT NULL, -- every export file that contributed, sorted
    source_sha256       VARCHAR[] NOT NULL, -- their sha256, same order
    kernel_count        BIGINT NOT NULL,
    ingested_at         TIMESTAMP NOT NULL  -- UTC
);

-- One row per profiled kernel launch, with the headline metrics as typed columns.
CREATE TABLE kernels (
    run_id                     VARCHAR NOT NULL,
    launch_id                  BIGINT NOT NULL,  -- ncu "ID": 0-based order of profiled launches
    model                      VARCHAR NOT NULL, -- partition
    gpu                        VARCHAR NOT NULL, -- partition
    kernel_name                VARCHAR NOT NULL, -- demangled: as the tool printed it, or demangled by kwh
    kernel_mangled             VARCHAR,          -- Itanium-mangled name, from a --print-kernel-base mangled export
    kernel_base                VARCHAR NOT NULL, -- qualified function name: at::native::vectorized_elementwise_kernel
    kernel_signature           VARCHAR NOT NULL, -- canonical form, same whichever tool named the kernel
    kernel_id                  VARCHAR NOT NULL, -- 16 hex digits of sha256(kernel_signature)
    kernel_display             VARCHAR,          -- readable and unique per identity: vectorized_elementwise_kernel<8, CUDAFunctor_add<bf16>> (normalize/identity.py)
    library                    VARCHAR NOT NULL, -- who dispatched it: cuBLAS, cuDNN, PyTorch ATen, Triton, CUTLASS (used directly), custom, ... or unknown
    op_class                   VARCHAR NOT NULL, -- gemm, conv, attention, elementwise, ... or unknown; one per kernel_id in a run
    implementation             VARCHAR,          -- whose kernel it is: CUTLASS, xmma, nvjet, CUB, FlashAttention, ... (normalize/implementation_rules.csv; else = library)
    math_dtype                 VARCHAR,          -- precision it computes in: fp64, fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8 or unknown (normalize/math_dtype_rules.csv; ncu tensor counters decide where exported)
    framework_op               VARCHAR,          -- innermost framework op from NVTX: aten::addmm
    framework_op_id            BIGINT,           -- its op_id (PyTorch emit_nvtx)
    framework_seq              BIGINT,           -- autograd sequence number of the nearest op that has one
    op_shapes                  VARCHAR,          -- the framework op's input shapes: [[4, 256, 768], [768, 2304]]
    nvtx_path                  VARCHAR,          -- NVTX stack, outermost first: gpt2.iteration > aten::linear > aten::addmm
    nvtx_range                 VARCHAR,          -- innermost NVTX range that is not a framework op
    process_id                 BIGINT,
    process_name               VARCHAR,
    host_name                  VARCHAR,
    context_id                 BIGINT,
    stream_id                  BIGINT,
    device_id                  BIGINT,
    compute_capability         VARCHAR,
    grid_x                     BIGINT,
    grid_y                     BIGINT,
    grid_z                     BIGINT,
    block_x                    BIGINT,
    block_y                    BIGINT,
    block_z                    BIGINT,
    grid_size                  BIGINT,           -- blocks in the grid (x*y*z, or launch__grid_size)
    block_size                 BIGINT,           -- threads per block
    registers_per_thread       BIGINT,
    shared_mem_bytes           BIGINT,           -- static + dynamic shared memory per block
    duration_ns                DOUBLE,
    elapsed_cycles             DOUBLE,
    sm_pct                     DOUBLE,           -- Compute (SM) throughput, % of peak
    dram_pct                   DOUBLE,           -- DRAM throughput, % of peak
    mem_pct                    DOUBLE,           -- memory (max of L1/L2/DRAM) throughput, % of peak
    l1_hit_pct                 DOUBLE,
    l2_hit_pct                 DOUBLE,
    achieved_occupancy_pct     DOUBLE,
    theoretical_occupancy_pct  DOUBLE,
    tensor_pipe_pct            DOUBLE,           -- tensor pipe busy, % of its peak over the cycles the SMs were active (sm__pipe_tensor_cycles_active...pct_of_peak_sustained_active): overstates use on under-filled grids
    tensor_util_pct            DOUBLE,           -- tensor pipe busy, % of its peak over the kernel's elapsed cycles (hmma/hgmma/... tensor instructions; sm__pipe_tensor_type_..._cycles_active...elapsed)
    dram_bytes                 DOUBLE,           -- DRAM bytes read + written (dram__bytes_read.sum + _write.sum, dram__bytes.sum; else ncu's rate dram__bytes.sum.per_second x duration)
    l2_bytes                   DOUBLE,           -- L2 bytes as ncu's hierarchical roofline counts them (L2 -> SM crossbar: derived__lts__lts2xbar_bytes rate x duration), else lts__t_bytes.sum, else lts__t_sectors.sum x 32
    l1_bytes                   DOUBLE,           -- L1/TEX bytes as ncu's hierarchical roofline counts them (LSU writeback: derived__l1tex__lsu_writeback_bytes_mem_lgds rate x duration), else l1tex__t_bytes.sum
    shared_bytes               DOUBLE,           -- shared-memory bytes of the kernel's instructions (smsp__sass_data_bytes_mem_shared.sum); NULL when not collected
    issue_active_pct           DOUBLE,           -- issue slots busy, % of active cycles (100 - this = stalled)
    waves_per_sm               DOUBLE,           -- waves of blocks per SM (< 1: the grid does not fill the GPU)
    blocks_limit_registers     DOUBLE,           -- blocks per SM allowed by registers (occupancy limiters)
    blocks_limit_shared_mem    DOUBLE,           -- ... by shared memory
    blocks_limit_warps         DOUBLE,           -- ... by the warp limit
    blocks_limit_blocks        DOUBLE,           -- ... by the block limit
    blocks_limit_barriers      DOUBLE,           -- ... by barriers
    sm_count                   DOUBLE,           -- SMs on the device
    flops_fp16                 DOUBLE,           -- CUDA-core FLOPs (add + mul + 2 fma), from ncu's roofline counters
    flops_fp32                 DOUBLE,
    flops_fp64                 DOUBLE,
    tensor_flops               DOUBLE,           -- tensor-core FLOPs (int8: ops), from ncu's tensor roofline counters (sm__ops_path_tensor_src_<dtype>.sum); NULL when not exported
    flops                      DOUBLE,           -- all FLOPs: CUDA-core + tensor-core
    flops_source               VARCHAR,          -- where flops come from: 'ncu tensor counters', 'op shapes' (the main kernel of a GEMM/conv/attention op without tensor counters: the op's FLOPs from its NVTX input shapes, normalize/op_flops.py; its epilogue's CUDA-core FLOPs left out, they stay in flops_fp16/32/64), 'ncu CUDA-core counters' or NULL
    achieved_flops_per_s       DOUBLE,           -- flops / duration
    arithmetic_intensity       DOUBLE,           -- flops per DRAM byte
    peak_fp32_flops_per_s      DOUBLE,           -- the device's peak (ncu roofline peaks, else device attributes)
    peak_fp64_flops_per_s      DOUBLE,
    peak_dram_bytes_per_s      DOUBLE,           -- the device's peak DRAM bandwidth
    peak_l2_bytes_per_s        DOUBLE,           -- peak L2 bandwidth of l2_bytes' kind: ncu's bytes per cycle (.peak_sustained) x the L2 clock it measured
    peak_l1_bytes_per_s        DOUBLE,           -- peak L1/TEX bandwidth of l1_bytes' kind: ncu's bytes per cycle x the L1 clock it measured
    peak_flops_per_s           DOUBLE,           -- the roof of this launch: dense tensor peak of its math dtype when it has tensor FLOPs (ncu's peak per cycle x measured SM clock, else normalize/gpu_peaks.csv), else the CUDA-core FP64 or FP32 peak
    pct_of_peak                DOUBLE,           -- achieved_flops_per_s / peak_flops_per_s, % (the peak at the SM clock ncu measured where ncu exported its per-cycle peaks); NULL for a GEMM/conv/attention kernel of a tensor dtype whose tensor work was not counted (no tensor counters, no op shapes): its CUDA-core FLOPs are its epilogue's
    useful_flops               DOUBLE,           -- the op's math from its input shapes on its main kernel (normalize/op_flops.py: 2·M·N·K, conv without channel padding, causal attention halved), whatever the counters read; NULL where the shapes left something to assume (is_causal or a conv's stride not recorded: flops_source says so); tensor_flops / useful_flops = padding factor
    sm_clock_hz                DOUBLE,           -- the SM clock ncu measured over the launch (sm__cycles_elapsed.avg.per_second)
    max_sm_clock_hz            DOUBLE,           -- the GPU's maximum (boost) SM clock (device__attribute_clock_rate)
    datasheet_peak_flops_per_s DOUBLE,           -- the published peak of the launch's roof (dense tensor peak of its dtype, else the CUDA-core FP32/FP64 peak) from normalize/gpu_peaks.csv, at the datasheet's clock
    gemm_m                     BIGINT,           -- the GEMM op's M, N, K and batch from its input shapes (main kernel of the op only; NULL for non-GEMMs)
    gemm_n                     BIGINT,
    gemm_k                     BIGINT,
    gemm_batch                 BIGINT,
    stall_barrier              DOUBLE,           -- warp stall reasons: warp cycles per issued instruction (smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio)
    stall_branch_resolving     DOUBLE,
    stall_dispatch_stall       DOUBLE,
    stall_drain                DOUBLE,
    stall_gmma                 DOUBLE,
    stall_imc_miss             DOUBLE,
    stall_lg_throttle          DOUBLE,
    stall_long_scoreboard      DOUBLE,
    stall_math_pipe_throttle   DOUBLE,
    stall_membar               DOUBLE,
    stall_mio_throttle         DOUBLE,
    stall_misc                 DOUBLE,
    stall_no_instruction       DOUBLE,
    stall_not_selected         DOUBLE,
    stall_selected             DOUBLE,
    stall_short_scoreboard     DOUBLE,
    stall_sleeping             DOUBLE,
    stall_tex_throttle         DOUBLE,
    stall_wait                 DOUBLE,
    nvtx_push_pop              VARCHAR,          -- NVTX push/pop stack as exported (ncu --nvtx)
    nvtx_start_end             VARCHAR,          -- NVTX start/end ranges as exported
    metric_count               BIGINT NOT NULL   -- rows in metrics for this launch
);

-- Every metric of every launch, long form. value is in base units; value_text keeps non-numeric cells.
CREATE TABLE metrics (
    run_id      VARCHAR NOT NULL,
    launch_id   BIGINT NOT NULL,
    model       VARCHAR NOT NULL,  -- partition
    gpu         VARCHAR NOT NULL,  -- partition
    section     VARCHAR,           -- details-page section ("GPU Speed Of Light Throughput"); NULL from raw
    metric      VARCHAR NOT NULL,  -- canonical metric name (normalize/metric_catalog.csv), whatever ncu version
    source_metric VARCHAR NOT NULL, -- the name as exported (details labels mapped back to names where known)
    label       VARCHAR,           -- details-page display name ("DRAM Throughput") when it had one
    unit        VARCHAR,           -- base unit of value ("byte", "ns", "hz", "%")
    value       DOUBLE,            -- numeric value converted to base units; NULL when not numeric
    value_text  VARCHAR,           -- the cell as exported when it is not a number ("n/a", "PolicySpread")
    source_page VARCHAR NOT NULL   -- "raw" or "details": the page the kept value came from
);

-- ncu rule results (details page): the guidance ncu printed for each launch.
CREATE TABLE rules (
    run_id            VARCHAR NOT NULL,
    launch_id         BIGINT NOT NULL,
    model             VARCHAR NOT NULL, -- partition
    gpu               VARCHAR NOT NULL, -- partition
    section           VARCHAR,          -- section identifier ("SpeedOfLight")
    rule_name         VARCHAR NOT NULL, -- "SOLBottleneck"
    rule_type         VARCHAR,          -- OPT, WRN, INF, ERR
    description       VARCHAR,
    speedup_type      VARCHAR,          -- "local" / "global"
    speedup_pct       DOUBLE            -- ncu's estimated speedup, %
);

-- One row per GPU activity on a timeline (nsys, PyTorch profiler trace): kernels, and memcpy/memset
-- where the source records them. Times are integer nanoseconds, exactly as the tool recorded them.
CREATE TABLE kernel_launches (
    run_id              VARCHAR NOT NULL,
    launch_index        BIGINT NOT NULL,   -- order on the timeline (by start, then as recorded)
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition: the run's GPU (device_name has each launch's own)
    activity            VARCHAR NOT NULL,  -- kernel, memcpy or memset
    device_id           BIGINT,
    device_name         VARCHAR,           -- the GPU this launch ran on (multi-GPU reports)
    context_id          BIGINT,
    stream_id           BIGINT,
    process_id          BIGINT,
    correlation_id      BIGINT,            -- CUPTI correlation id (links to the CUDA API call)
    start_ns            BIGINT NOT NULL,   -- tool's timestamp, ns
    duration_ns         BIGINT NOT NULL,
    grid_x              BIGINT,
    grid_y              BIGINT,
    grid_z              BIGINT,
    block_x             BIGINT,
    block_y             BIGINT,
    block_z             BIGINT,
    grid_size           BIGINT,
    block_size          BIGINT,
    registers_per_thread BIGINT,
    shared_mem_bytes    BIGINT,            -- static + dynamic shared memory per block
    bytes               BIGINT,            -- memcpy/memset size
    kernel_name         VARCHAR NOT NULL,  -- full (demangled) name
    kernel_short_name   VARCHAR,           -- the tool's short name (nsys shortName) where it has one
    kernel_mangled      VARCHAR,
    kernel_base         VARCHAR NOT NULL,
    kernel_signature    VARCHAR NOT NULL,
    kernel_id           VARCHAR NOT NULL,
    kernel_display      VARCHAR,           -- as kernels.kernel_display
    library             VARCHAR NOT NULL,
    op_class            VARCHAR NOT NULL,
    implementation      VARCHAR,           -- as kernels.implementation
    framework_op        VARCHAR,           -- the CPU op that launched it (torch trace) or innermost NVTX op
    op_shapes           VARCHAR,           -- its input shapes
    nvtx_path           VARCHAR,
    nvtx_range          VARCHAR,
    framework_op_id     BIGINT,            -- the op instance: the trace's "External id" (nsys: emit_nvtx op_id); NULL where unknown
    op_dtypes           VARCHAR,           -- the op's input element types, a JSON list: ["c10::BFloat16", "float", "Scalar"] (torch trace "Input type")
    op_args             VARCHAR,           -- the op's scalar arguments as text, a JSON list ("" for tensors): conv stride "[2, 2]", SDPA is_causal "True" (torch trace "Concrete Inputs")
    math_dtype          VARCHAR,           -- as kernels.math_dtype: the name rules, then (GEMM/conv/attention kernels) the op's input dtype
    flops               DOUBLE,            -- the op's FLOPs from its input shapes, on its main kernel only (normalize/op_flops.py); NULL elsewhere
    flops_source        VARCHAR,           -- 'op shapes' where flops is set
    achieved_flops_per_s DOUBLE,           -- flops / duration
    peak_flops_per_s    DOUBLE,            -- published dense tensor peak of math_dtype on device_name (normalize/gpu_peaks.csv; FP32: CUDA-core peak)
    pct_of_peak         DOUBLE,            -- achieved_flops_per_s / peak_flops_per_s, %
    gemm_m              BIGINT,            -- the GEMM op's M, N, K and batch (main kernel only; NULL for non-GEMMs)
    gemm_n              BIGINT,
    gemm_k              BIGINT,
    gemm_batch          BIGINT
);

-- One row per kernel (and launch shape, where the report splits by it) of a summary report
-- (nsys stats cuda_gpu_kern_sum, nvtx_kern_sum). Times in ns (converted from --timeunit).
CREATE TABLE kernel_summaries (
    run_id              VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition
    report              VARCHAR NOT NULL,  -- cuda_gpu_kern_sum, nvtx_kern_sum, ...
    nvtx_range          VARCHAR,           -- nvtx_kern_sum: the enclosing range
    grid_dims           VARCHAR,           -- GridXYZ where the report has it: "(2, 1, 1)"
    block_dims          VARCHAR,
    grid_x              BIGINT,            -- grid_dims and block_dims as numbers (normalize/launches.py, as for launch rows)
    grid_y              BIGINT,
    grid_z              BIGINT,
    block_x             BIGINT,
    block_y             BIGINT,
    block_z             BIGINT,
    instances           BIGINT NOT NULL,
    total_ns            DOUBLE NOT NULL,
    avg_ns              DOUBLE,
    median_ns           DOUBLE,
    min_ns              DOUBLE,
    max_ns              DOUBLE,
    stddev_ns           DOUBLE,
    time_pct            DOUBLE,            -- the report's own share of the total
    kernel_name         VARCHAR NOT NULL,
    kernel_base         VARCHAR NOT NULL,
    kernel_signature    VARCHAR NOT NULL,
    kernel_id           VARCHAR NOT NULL,
    kernel_display      VARCHAR,           -- as kernels.kernel_display
    library             VARCHAR NOT NULL,
    op_class            VARCHAR NOT NULL,
    implementation      VARCHAR            -- as kernels.implementation
);

-- nsys stats nvtx_sum: time spent in each NVTX range (CPU side).
CREATE TABLE nvtx_summaries (
    run_id              VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition
    nvtx_range          VARCHAR NOT NULL,
    style               VARCHAR,
    instances           BIGINT NOT NULL,
    total_ns            DOUBLE NOT NULL,
    avg_ns              DOUBLE,
    median_ns           DOUBLE,
    min_ns              DOUBLE,
    max_ns              DOUBLE,
    stddev_ns           DOUBLE,
    time_pct            DOUBLE,
    time_basis          VARCHAR            -- 'cpu range' (nvtx_sum: the range on its CPU thread) or 'gpu projection' (nvtx_gpu_proj_sum: the GPU work it launched); NULL in warehouses older than the column: 'cpu range'
);

-- nsys stats cuda_gpu_mem_time_sum and cuda_gpu_mem_size_sum, one row per kind of memory operation
-- ("[CUDA memcpy Host-to-Device]", "[CUDA memset]"): GPU time and bytes moved. Times in ns, sizes in bytes
-- (nsys prints MB with 3 decimals: a copy under 500 bytes reads 0).
CREATE TABLE memory_op_summaries (
    run_id              VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition
    operation           VARCHAR NOT NULL,
    operations          BIGINT,            -- how many times it ran ("Count")
    total_ns            DOUBLE,
    avg_ns              DOUBLE,
    median_ns           DOUBLE,
    min_ns              DOUBLE,
    max_ns              DOUBLE,
    stddev_ns           DOUBLE,
    time_pct            DOUBLE,            -- the report's own share of all memory-operation time
    total_bytes         DOUBLE,
    avg_bytes           DOUBLE,
    median_bytes        DOUBLE,
    min_bytes           DOUBLE,
    max_bytes           DOUBLE,
    stddev_bytes        DOUBLE
);

-- nsys stats cuda_api_sum: CPU time spent in each CUDA runtime/driver API function. Times in ns.
CREATE TABLE api_summaries (
    run_id              VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition
    api_name            VARCHAR NOT NULL,  -- cudaLaunchKernel, cuModuleGetLoadingMode, ...
    calls               BIGINT NOT NULL,
    total_ns            DOUBLE NOT NULL,
    avg_ns              DOUBLE,
    median_ns           DOUBLE,
    min_ns              DOUBLE,
    max_ns              DOUBLE,
    stddev_ns           DOUBLE,
    time_pct            DOUBLE
);

-- One row per NVTX range instance: nsys stats nvtx_pushpop_trace (the range on its CPU thread) and
-- nvtx_gpu_proj_trace (also its projection onto the GPU: from the first to the last GPU operation it
-- launched). Times in ns on the report's clock.
CREATE TABLE nvtx_ranges (
    run_id              VARCHAR NOT NULL,
    model               VARCHAR NOT NULL,  -- partition
    gpu                 VARCHAR NOT NULL,  -- partition
    report              VARCHAR NOT NULL,  -- nvtx_pushpop_trace or nvtx_gpu_proj_trace
    nvtx_range          VARCHAR,           -- the range's name as nsys prints it (":name" in the default domain); NULL: nvtx_gpu_proj_trace's row for GPU work outside every range
    style               VARCHAR,           -- PushPop / StartEnd (nvtx_gpu_proj_trace)
    process_id          BIGINT,
    thread_id           BIGINT,
    range_id            BIGINT,
    parent_id           BIGINT,
    level               BIGINT,            -- nesting depth, 0 outermost
    child_count         BIGINT,
    range_stack         VARCHAR,           -- range ids outermost first, ":1:3"
    start_ns            BIGINT,            -- CPU start (nvtx_gpu_proj_trace: "Orig Start")
    end_ns              BIGINT,
    duration_ns         BIGINT,
    child_duration_ns   BIGINT,            -- nvtx_pushpop_trace: time in child ranges
    gpu_start_ns        BIGINT,            -- nvtx_gpu_proj_trace: projected start on the GPU
    gpu_end_ns          BIGINT,
    gpu_duration_ns     BIGINT,
    gpu_op_count        BIGINT             -- GPU operations (kernels, memcpy, memset) the projection spans
);

-- GPU telemetry (nvidia-smi --query-gpu / dmon / pmon, dcgmi dmon, kwh's NVML sample file): one row per
-- sample, GPU (or process) and field. Each log is a run of its own (runs.tool = 'telemetry'); the
-- gpu_telemetry view attaches samples to profiled runs by GPU and time window (README: GPU telemetry).
CREATE TABLE gpu_samples (
    run_id              VARCHAR NOT NULL,  -- the telemetry run: one log file
    model               VARCHAR NOT NULL,  -- partition: manifest "model", --model, or the folder name
    gpu                 VARCHAR NOT NULL,  -- partition: the log's first GPU name, else the manifest's "gpu"
    source              VARCHAR NOT NULL,  -- nvidia-smi-query, nvidia-smi-dmon, nvidia-smi-pmon, dcgmi-dmon, nvml-samples
    line                BIGINT NOT NULL,   -- line of the log the sample is on
    timestamp_ns        BIGINT,            -- ns since the Unix epoch (UTC; nvidia-smi prints host time, taken as UTC); NULL where the log prints no time (dmon without -o DT, dcgmi dmon)
    interval_ns         BIGINT,            -- the log's sampling interval on this GPU (median gap between its samples): a sample describes (timestamp_ns - interval_ns, timestamp_ns]
    gpu_index           BIGINT,            -- nvidia-smi / NVML index (not CUDA_VISIBLE_DEVICES order)
    gpu_uuid            VARCHAR,
    gpu_name            VARCHAR,           -- as the log prints it, else the run's GPU
    gpu_model           VARCHAR,           -- gpu_peaks' gpu_model of gpu_name (normalize/gpu_names.csv); NULL when unknown
    pci_bus_id          VARCHAR,
    process_id          BIGINT,            -- pmon rows: the process
    process_name        VARCHAR,
    field               VARCHAR NOT NULL,  -- kwh's name (ingest/telemetry_fields.csv): sm_active, sm_occupancy, tensor_active, dram_active, gpu_util, sm_clock, power, memory_used, throttle_reasons ...; else as printed
    source_field        VARCHAR NOT NULL,  -- the name the tool printed: clocks.current.sm, pclk, SMACT, sm_clock_mhz
    value               DOUBLE,            -- in base units: Hz, W, byte, %, C (DCGM ratios 0-1 become %); NULL when missing ([N/A], -, N/A)
    unit                VARCHAR,           -- base unit of value
    value_text          VARCHAR            -- a cell that is not a number (pstate "P0", pmon type "C")
);

-- Daily rollup of every source's kernels (kwh rollup): per day, model, GPU, kernel identity and tool. The
-- day of a run is its run_date, else the day it was ingested (UTC). Averages are time-weighted. ncu rows
-- carry the counters; nsys and torch rows real timeline time only (their counter columns are NULL).
CREATE TABLE rollup_kernels_daily (
    day                     DATE NOT NULL,     -- partition
    model                   VARCHAR NOT NULL,
    gpu                     VARCHAR NOT NULL,
    kernel_id               VARCHAR NOT NULL,
    tool                    VARCHAR NOT NULL,  -- ncu (replay time), nsys or torch (timeline time): never added together
    library                 VARCHAR NOT NULL,
    op_class                VARCHAR NOT NULL,
    kernel_base             VARCHAR NOT NULL,
    launches                BIGINT NOT NULL,
    runs                    BIGINT NOT NULL,
    total_ns                DOUBLE NOT NULL,
    mean_ns                 DOUBLE,
    sm_pct                  DOUBLE,
    dram_pct                DOUBLE,
    mem_pct                 DOUBLE,
    l1_hit_pct              DOUBLE,
    l2_hit_pct              DOUBLE,
    achieved_occupancy_pct  DOUBLE,
    top_stall_reason        VARCHAR,           -- largest time-weighted warp stall reason ("selected" excluded)
    compute_bound_pct       DOUBLE,            -- share of the identity's time in each bottleneck class
    memory_bound_pct        DOUBLE,
    cache_inefficient_pct   DOUBLE,
    latency_bound_pct       DOUBLE,
    launch_overhead_pct     DOUBLE,
    mixed_pct               DOUBLE,
    occupancy_limited_pct   DOUBLE,
    grid_too_small_pct      DOUBLE,
    not_enough_data_pct     DOUBLE             -- (the nine classes of bottleneck_class add up to 100)
);

-- Daily rollup per library: per day, model, GPU and tool.
CREATE TABLE rollup_libraries_daily (
    day                     DATE NOT NULL,     -- partition
    model                   VARCHAR NOT NULL,
    gpu                     VARCHAR NOT NULL,
    tool                    VARCHAR NOT NULL,  -- ncu, nsys or torch
    library                 VARCHAR NOT NULL,
    launches                BIGINT NOT NULL,
    runs                    BIGINT NOT NULL,
    kernel_ids              BIGINT NOT NULL,
    total_ns                DOUBLE NOT NULL,
    time_pct                DOUBLE             -- share of the day's GPU time of that model, GPU and tool
);
