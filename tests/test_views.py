"""The analytics views: golden outputs, and for each view one number checked by hand against the raw export."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import DATA, rows, warehouse_on

from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError, KwhError
from kwarehouse.store.warehouse import Warehouse

CUPY_RAW = DATA / "ncu-custom-cupy-h100" / "custom_cupy.raw.csv"
GPT2_RAW = DATA / "ncu-gpt2-h100" / "gpt2.raw.csv"
LLAMA_RAW = DATA / "ncu-llama-h100-variants" / "llama.raw.csv"
CUB = "cub::detail::reduce::DeviceReduceKernel"


def raw(path, kernel_index: int, metric: str) -> float:
    """A value straight from a raw export (row 2 is units), thousands separators removed; no unit conversion."""
    frame = pl.read_csv(path, skip_rows_after_header=1, infer_schema=False)
    return float(frame[metric][kernel_index].replace(",", ""))




@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cupy(request, tmp_path_factory) -> Warehouse:
    """The CuPy ncu run alone, with each catalog backend: ingested once per backend for the module's
    by-hand checks, which only read it."""
    warehouse = warehouse_on(request.param, tmp_path_factory.mktemp(f"cupy-{request.param}") / "wh", request)
    report = ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse)
    assert report.failed == []
    return warehouse


@pytest.fixture
def cupy_to_change(warehouse) -> Warehouse:
    """The CuPy ncu run alone in a warehouse of the test's own (which it may change)."""
    report = ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse)
    assert report.failed == []
    return warehouse


def test_every_view_has_a_description_and_compiles(ingested_read_only):
    assert sorted(views.all_views()) == [
        "bottleneck_class", "bottleneck_share", "cache_efficiency", "clock_throttling", "coverage",
        "design_signal_parts", "design_signals", "fusion_candidates", "gemm_efficiency", "gemm_launch_groups",
        "gpu_telemetry", "gpu_timeline", "kernel_launch_shapes", "kernel_popularity", "kernel_run_counts",
        "kernel_stalls", "kernel_time", "launch_bound", "launch_shape_correlates", "library_share",
        "model_efficiency", "ncu_kernel_counters", "ncu_kernel_rows", "nvtx_gpu_time", "occupancy",
        "op_compulsory_bytes", "op_kernels", "partition_kernels", "partition_peaks", "profiled_coverage", "rank_balance", "roofline",
        "run_framework", "shared_input_gemms", "speed_of_light", "thresholds", "time_weighted_kernels",
        "timeline_kernel_shapes", "timeline_shape_flops", "warp_stalls", "what_to_fix_first"]
    for view in views.all_views().values():
        assert len(view.description) > 30, view.name
        assert "read_parquet" not in view.sql and "SELECT *" not in view.sql.split("\n")[-8:], view.name


@pytest.mark.parametrize("name", sorted(views.all_views()))
def test_view_golden(read_only_view_rows, golden, name):
    # the view's rows over ingested_read_only, queried once per session (conftest.read_only_view_rows).
    # run ids hash the export folder's absolute path, which differs between clones; a run without a
    # manifest date has its ingest day (rank_balance.run_day); borrowed_from_run is a run id too
    columns, found = read_only_view_rows[name]
    kept = [i for i, c in enumerate(columns) if c not in ("run_id", "run_day", "borrowed_from_run")]
    golden(f"view_{name}", [columns[i] for i in kept], [tuple(row[i] for i in kept) for row in found])


def test_time_weighted_ignores_launches_without_the_counter_and_is_null_without_time():
    import duckdb
    con = duckdb.connect()
    for macro in views.all_macros().values():
        con.execute(macro.sql)
    def mean(*pairs):
        values = ", ".join(f"({x}, {w})" for x, w in pairs)
        return con.execute(f"SELECT time_weighted(x, w) FROM (VALUES {values}) t(x, w)").fetchall()[0][0]
    assert mean((10.0, 1), (40.0, 3)) == 32.5
    assert mean((10.0, 1), ("NULL", 100), (40.0, 3)) == 32.5       # not pulled towards 0 by the NULL
    assert mean(("NULL", 5), ("NULL", 1)) is None
    assert mean((10.0, 0), (40.0, 0)) is None                      # not NaN (DuckDB's weighted_avg)
    assert mean((10.0, "NULL")) is None


def test_views_are_in_warehouse_duckdb_too(ingested_read_only):
    import duckdb
    con = duckdb.connect(str(ingested_read_only.duckdb_path), read_only=True)
    assert con.execute("SELECT count(*) FROM kernel_popularity WHERE level = 'kernel'").fetchall()[0][0] > 0


# -- one hand-checked number per view ------------------------------------------------------------

def test_kernel_popularity_by_hand(cupy):
    saxpy_ns = raw(CUPY_RAW, 0, "gpu__time_duration.sum") * 1e3           # us -> ns
    total_ns = sum(raw(CUPY_RAW, i, "gpu__time_duration.sum") * 1e3 for i in range(4))
    (launches, models, time_ns, pct), = rows(
        cupy, "SELECT launches, models, gpu_time_ns, gpu_time_pct FROM kernel_popularity WHERE kernel_base = 'saxpy'")
    assert (launches, models) == (1, 1)
    assert time_ns == pytest.approx(saxpy_ns) and pct == pytest.approx(100 * saxpy_ns / total_ns)
    assert rows(cupy, "SELECT launches, gpu_time_pct FROM kernel_popularity WHERE level = 'library' "
                       "AND library = 'CUB/Thrust'") == [(2, pytest.approx(
        100 * (raw(CUPY_RAW, 2, "gpu__time_duration.sum") + raw(CUPY_RAW, 3, "gpu__time_duration.sum")) * 1e3 / total_ns))]


def test_library_share_by_hand(cupy):
    durations = [raw(CUPY_RAW, i, "gpu__time_duration.sum") for i in range(4)]
    (pct,), = rows(cupy, "SELECT library_pct FROM library_share WHERE library = 'CUB/Thrust'")
    assert pct == pytest.approx(100 * (durations[2] + durations[3]) / sum(durations))


def test_speed_of_light_by_hand(ingested_read_only):
    # the gather kernel runs once in gpt2 and once in llama: the fleet row weights each by its duration
    sm = [raw(p, 0, "sm__throughput.avg.pct_of_peak_sustained_elapsed") for p in (GPT2_RAW, LLAMA_RAW)]
    dur = [raw(p, 0, "gpu__time_duration.sum") for p in (GPT2_RAW, LLAMA_RAW)]
    got = rows(ingested_read_only, "SELECT model, sm_pct FROM speed_of_light WHERE kernel_base = "
                          "'at::native::vectorized_gather_kernel' AND model IN ('gpt2', 'llama') ORDER BY model")
    assert got == [("gpt2", pytest.approx(sm[0])), ("llama", pytest.approx(sm[1]))]
    (weighted,), = rows(ingested_read_only, "SELECT sum(sm_pct * gpu_time_ns) / sum(gpu_time_ns) FROM speed_of_light "
                                   "WHERE kernel_base = 'at::native::vectorized_gather_kernel' AND model IN ('gpt2', 'llama')")
    # weights are real GPU time: gpt2's from its trace, llama's (no trace) its ncu duration (us -> ns)
    (traced,), = rows(ingested_read_only, "SELECT sum(duration_ns) FROM kernel_launches WHERE model = 'gpt2' "
                                "AND kernel_base = 'at::native::vectorized_gather_kernel'")
    weights = [traced, dur[1] * 1e3]
    assert weighted == pytest.approx((sm[0] * weights[0] + sm[1] * weights[1]) / sum(weights))


def test_cache_efficiency_by_hand(cupy):
    (l2, dram_bytes, flagged), = rows(cupy, "SELECT l2_hit_pct, dram_bytes, memory_bound_low_l2_hit "
                                             "FROM cache_efficiency WHERE kernel_base = 'saxpy'")
    assert l2 == pytest.approx(raw(CUPY_RAW, 0, "lts__t_sector_hit_rate.pct"))
    assert dram_bytes == pytest.approx((raw(CUPY_RAW, 0, "dram__bytes_read.sum")
                                        + raw(CUPY_RAW, 0, "dram__bytes_write.sum")) * 1e6)   # Mbyte
    assert flagged is True   # DRAM 79.7 % >= 60 and L2 hit 34.0 % < 60


def test_warp_stalls_by_hand(cupy):
    stall_metric = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    frame = pl.read_csv(CUPY_RAW, skip_rows_after_header=1, infer_schema=False)
    reasons = {c.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio"):
               float(frame[c][0]) for c in frame.columns
               if c.startswith("smsp__average_warps_issue_stalled_") and c.endswith("_per_issue_active.ratio")}
    stalls = {r: v for r, v in reasons.items() if r != "selected"}
    top = max(stalls, key=stalls.get)
    got = rows(cupy, "SELECT reason, stall_cycles_per_issue, stall_share_pct, top_reason FROM warp_stalls "
                      "WHERE level = 'kernel' AND kernel_base = 'saxpy' AND reason = ?", [top])
    assert got == [(top, pytest.approx(raw(CUPY_RAW, 0, stall_metric.format(top))),
                    pytest.approx(100 * stalls[top] / sum(stalls.values())), top)]
    assert len(rows(cupy, "SELECT * FROM warp_stalls WHERE level = 'kernel' AND kernel_base = 'saxpy'")) == len(reasons)


def test_every_stall_reason_has_a_kernels_column_and_warp_stalls_reads_it(ingested_read_only):
    """The catalog's stall metrics, the kernels stall_<reason> columns, their headline mapping and the
    reasons warp_stalls unpivots (in kernel_stalls, each partition's sums it adds up) are one list, and
    each column holds its launch's metric value."""
    from kwarehouse import normalize, schema
    catalog = {m.removeprefix("smsp__average_warps_issue_stalled_").removesuffix("_per_issue_active.ratio")
               for m in normalize.metric_catalog()["metric"]
               if m.startswith("smsp__average_warps_issue_stalled_") and m.endswith("_per_issue_active.ratio")}
    columns = {c.removeprefix("stall_") for c, _ in schema.tables()["kernels"].sql_types if c.startswith("stall_")}
    headline = {c.removeprefix("stall_") for c in normalize.headline_metrics() if c.startswith("stall_")}
    view = views.view_named("kernel_stalls").sql
    assert "kernel_stalls" in views.reads(views.view_named("warp_stalls"))
    assert len(catalog) >= 19 and catalog == columns == headline
    assert all(f"('{r}')" in view and f"WHEN '{r}' THEN k.stall_{r}" in view for r in columns)
    mismatched = rows(ingested_read_only, " UNION ALL ".join(
        f"SELECT '{r}', count(*) FROM kernels k JOIN metrics m USING (run_id, launch_id) "
        f"WHERE m.metric = 'smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio' "
        f"AND m.value IS DISTINCT FROM k.stall_{r}" for r in sorted(columns)))
    assert [r for r, n in mismatched if n] == []
    assert rows(ingested_read_only, "SELECT count(*) > 0 FROM kernels WHERE stall_long_scoreboard > 0") == [(True,)]


def test_occupancy_by_hand(cupy):
    limits = {name: raw(CUPY_RAW, 2, f"launch__occupancy_limit_{name}")
              for name in ("registers", "shared_mem", "warps", "blocks", "barriers")}
    fewest = min(limits.values())
    expected = "+".join(n for n in ("registers", "shared_mem", "warps", "blocks", "barriers") if limits[n] == fewest)
    assert rows(cupy, "SELECT binding_limit, blocks_per_sm FROM occupancy WHERE kernel_base = ?", [CUB]) == [
        (expected, fewest)]
    assert expected == "registers+warps"


def test_roofline_by_hand(cupy):
    (ai, achieved, peak, bw, ridge, fraction, side), = rows(
        cupy, "SELECT arithmetic_intensity, achieved_flops_per_s, peak_flops_per_s, peak_dram_bytes_per_s, "
              "ridge_point, fraction_of_roof, roof_side FROM roofline WHERE level = 'launch' AND kernel_base = 'naive_sgemm'")
    dram = (raw(CUPY_RAW, 1, "dram__bytes_read.sum") + raw(CUPY_RAW, 1, "dram__bytes_write.sum")) * 1e6
    seconds = raw(CUPY_RAW, 1, "gpu__time_duration.sum") * 1e-6
    flops = 2 * 1024 ** 3                   # N**3 FMAs of the N = 1024 naive SGEMM, two FLOPs each
    assert ai == pytest.approx(flops / dram, rel=0.01) and achieved == pytest.approx(flops / seconds, rel=0.01)
    # peaks: ncu's roofline metrics, FMA/cycle x 2 x SM clock and bytes/cycle x DRAM clock
    assert peak == pytest.approx(raw(CUPY_RAW, 1, "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained")
                                 * 2 * raw(CUPY_RAW, 1, "sm__cycles_elapsed.avg.per_second") * 1e9)      # Ghz
    assert bw == pytest.approx(raw(CUPY_RAW, 1, "dram__bytes.sum.peak_sustained") * 1e3                   # Kbyte/cycle
                               * raw(CUPY_RAW, 1, "dram__cycles_elapsed.avg.per_second") * 1e9)
    assert ridge == pytest.approx(peak / bw) and side == "compute"
    assert fraction == pytest.approx(achieved / peak)


def test_bottleneck_class_by_hand(cupy):
    got = {k: (b, u) for k, b, u in rows(cupy, "SELECT kernel_base, bottleneck, limiting_unit FROM bottleneck_class")}
    # saxpy: memory SOL 79.7 % = DRAM 79.7 % (ncu: "DRAM bottleneck"); naive_sgemm: memory SOL 93.2 % from the
    # L1 LSU wavefronts (DRAM 0.6 %) above SM 62.1 % (ncu: "Start by analyzing L1"); the CUB reduction at DRAM
    # 81.4 %; the single-tile CUB kernel runs 3.2 us < 5 us (no timeline in this warehouse: ncu's duration)
    assert got == {"saxpy": ("memory-bound", "dram"), "naive_sgemm": ("memory-bound", "l1"),
                   CUB: ("memory-bound", "dram"),
                   "cub::detail::reduce::DeviceReduceSingleTileKernel": ("launch-overhead", "launch")}
    (decided, seed, verdict, agrees), = rows(cupy, "SELECT decided_by, seed_class, ncu_verdict, agrees_with_ncu "
                                                   "FROM bottleneck_class WHERE kernel_base = 'saxpy'")
    assert decided == ("memory 79.7 % vs SM 33.8 %; busiest level: dram (L1 15.1 %, L2 44.8 %, DRAM 79.7 %); "
                       "at the DRAM roof; compulsory bytes unknown: no reuse test")
    assert (seed, verdict, agrees) == ("Memory", None, None)      # a raw page alone carries no ncu rules
    sgemm = raw(CUPY_RAW, 1, "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed")
    assert rows(cupy, "SELECT l1_pct FROM bottleneck_class WHERE kernel_base = 'naive_sgemm'") == [(pytest.approx(sgemm),)]


def test_thresholds_are_changed_without_editing_sql(cupy_to_change):
    cupy = cupy_to_change
    (cupy.root / "views").mkdir()
    (cupy.root / "views" / "bottleneck_thresholds.csv").write_text("name,value\nmemory_pct,85\ntiny_kernel_ns,1000\n")
    got = dict(rows(cupy, "SELECT kernel_base, bottleneck FROM bottleneck_class"))
    assert got["saxpy"] == "latency-bound" and got[CUB] == "latency-bound"      # 79.7 and 81.4 % < 85
    assert got["naive_sgemm"] == "memory-bound"                                   # L1 93.2 %
    assert got["cub::detail::reduce::DeviceReduceSingleTileKernel"] == "grid-too-small"   # 3.2 us, 1 block
    (cupy.root / "views" / "bottleneck_thresholds.csv").write_text("name,value\nl2_hit,10\n")
    with pytest.raises(InputError, match=r"bottleneck_thresholds.csv:2: unknown threshold 'l2_hit'"):
        cupy.connect()


def test_thresholds_view_has_every_threshold_with_its_override(cupy_to_change):
    cupy = cupy_to_change
    (cupy.root / "views").mkdir()
    (cupy.root / "views" / "bottleneck_thresholds.csv").write_text("name,value\nmemory_pct,85\n")
    con = cupy.connect()
    cursor = con.execute("SELECT * FROM thresholds")
    got = dict(zip([d[0] for d in cursor.description], cursor.fetchall()[0]))
    defaults = {name: value for name, value, _ in views.thresholds()}
    assert got == {**defaults, "memory_pct": 85.0}


def test_design_signals_by_hand(cupy):
    got = rows(cupy, "SELECT subject, models, model_list, launches, gpu_time_pct, evidence FROM design_signals "
                      "WHERE signal = 'GEMM-class kernel with low tensor-pipe use'")
    durations = [raw(CUPY_RAW, i, "gpu__time_duration.sum") for i in range(4)]
    tensor = raw(CUPY_RAW, 1, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    assert got == [("naive_sgemm", 1, "custom_cupy", 1, pytest.approx(100 * durations[1] / sum(durations)),
                    f"tensor_pipe_pct {round(tensor, 1)} (time-weighted) < 20.0")]


def test_op_kernels_by_hand(ingested_read_only):
    got = rows(ingested_read_only, "SELECT framework_op, op_shapes, launches, gpu_time_ns, op_time_pct FROM op_kernels "
                          "WHERE model = 'gpt2' AND kernel_base = 'at::native::vectorized_gather_kernel'")
    assert got == [("aten::gather", "[[50257, 768], [], [1024, 768], [], [1024, 768]]", 1,
                    pytest.approx(raw(GPT2_RAW, 0, "gpu__time_duration.sum") * 1e3), 100.0)]


def test_launch_shape_correlates_by_hand(ingested_read_only):
    # the same gather kernel ran with different grids in gpt2 and llama: two points on a line
    grids = [raw(p, 0, "launch__grid_size") for p in (GPT2_RAW, LLAMA_RAW)]
    durations = [raw(p, 0, "gpu__time_duration.sum") * 1e3 for p in (GPT2_RAW, LLAMA_RAW)]
    (launches, slope, corr, slowest), = rows(
        ingested_read_only, "SELECT launches, ns_per_block, corr_duration_grid, slowest_grid_size FROM launch_shape_correlates "
                  "WHERE kernel_base = 'at::native::vectorized_gather_kernel'")
    assert launches == 2 and grids[0] != grids[1]
    assert slope == pytest.approx((durations[1] - durations[0]) / (grids[1] - grids[0]))
    assert corr == pytest.approx(1.0 if slope > 0 else -1.0)
    assert slowest == grids[durations.index(max(durations))]


# -- names ---------------------------------------------------------------------------------------

def test_a_misspelled_view_suggests_the_right_one():
    with pytest.raises(KwhError, match=r"no view named 'bottlenek_class'; did you mean bottleneck_class or bottleneck_share\?"):
        views.view_named("bottlenek_class")
    with pytest.raises(KwhError, match=r"no view named 'zzz'; kwh views lists them"):
        views.view_named("zzz")


def _partition_rows(con, view: str, model: str, gpu: str) -> list[str]:
    # floats to 9 significant digits: parallel sums differ in the last bits from run to run
    found = con.execute(f'SELECT * FROM "{view}" WHERE model = ? AND gpu = ?', [model, gpu]).fetchall()
    return sorted(repr(tuple(float(f"{x:.9g}") if isinstance(x, float) else x for x in row)) for row in found)


def test_partition_local_views_need_only_their_partition(ingested_read_only):
    # publish keeps PARTITION_LOCAL views as tables and recomputes only the partitions a commit changed: a
    # view's rows for one (model, gpu) must be those it gives over that partition's base rows alone. Checked
    # on a partition with a timeline beside ncu runs and on one without (tools/locality.py does it at scale)
    import duckdb
    from kwarehouse import schema
    from kwarehouse.store import bind
    full = ingested_read_only.connect()
    timeline = set(full.execute("SELECT DISTINCT model, gpu FROM kernel_launches").fetchall())
    ncu = full.execute("SELECT DISTINCT model, gpu FROM kernels ORDER BY ALL").fetchall()
    picked = [p for p in ncu if p in timeline][:1] + [p for p in ncu if p not in timeline][:1]
    assert len(picked) == 2
    for model, gpu in picked:
        alone = duckdb.connect()
        alone.execute(f"ATTACH '{ingested_read_only.duckdb_path}' AS pub (READ_ONLY)")
        only = "model = '{}' AND gpu = '{}'".format(model.replace("'", "''"), gpu.replace("'", "''"))
        for table in schema.tables():
            # the rollups are daily sums over every partition, read by no view
            where = "" if table.startswith("rollup") else f" WHERE {only}"
            alone.execute(f'CREATE VIEW "{table}" AS SELECT * FROM pub."{table}"{where}')
        bind.add_reference_tables(alone)
        views.create_all(alone, ingested_read_only.root)
        for view in views.PARTITION_LOCAL:
            assert _partition_rows(alone, view, model, gpu) == _partition_rows(full, view, model, gpu), (view, model, gpu)
        alone.close()
    full.close()
