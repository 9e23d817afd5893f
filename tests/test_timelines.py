"""Timeline and summary sources: PyTorch traces, nsys SQLite and stats CSV, and .ncu-rep files."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
from decimal import Decimal

import pytest
from conftest import DATA, rows

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError
from kwarehouse.ingest import ncu_rep
from kwarehouse.normalize import identity
from kwarehouse.store.warehouse import Warehouse

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")




def trace_events(name: str) -> list[dict]:
    return json.loads((DATA / name / "trace.json").read_text(), parse_float=Decimal)["traceEvents"]


# -- PyTorch profiler traces ---------------------------------------------------------------------

@pytest.mark.parametrize("folder", ["torch-trace-gpt2", "torch-trace-gpt2_train", "torch-trace-compiled_mlp",
                                    "torch-trace-custom_cupy"])
def test_trace_gpu_events_exactly_in_integer_ns(folder):
    events = [e for e in trace_events(folder) if e.get("cat") in GPU_CATEGORIES]
    timeline = ingest.read(DATA / folder / "trace.json").timeline
    assert timeline.height == len(events)
    # exact: each microsecond decimal becomes integer nanoseconds, nothing rounded to whole us
    assert timeline["duration_ns"].sum() == sum(int(Decimal(e["dur"]) * 1000) for e in events)
    assert timeline["duration_ns"].sum() != sum(round(float(e["dur"])) * 1000 for e in events)
    assert timeline.filter(timeline["activity"] == "kernel").height == sum(e["cat"] == "kernel" for e in events)


def test_triton_launcher_records_are_not_gpu_work():
    events = trace_events("torch-trace-compiled_mlp")
    launchers = [e for e in events if e.get("cat") == "cpu_op" and "stream" in (e.get("args") or {})]
    assert launchers, "the fixture has torch.compile launcher records with a stream argument"
    timeline = ingest.read(DATA / "torch-trace-compiled_mlp/trace.json").timeline
    gpu_ns = sum(int(Decimal(e["dur"]) * 1000) for e in events if e.get("cat") in GPU_CATEGORIES)
    assert timeline["duration_ns"].sum() == gpu_ns
    assert sorted(set(timeline["activity"])) == ["kernel", "memset"]


def test_every_torch_kernel_is_linked_to_the_op_that_launched_it():
    timeline = ingest.read(DATA / "torch-trace-gpt2/trace.json").timeline
    kernels = timeline.filter(timeline["activity"] == "kernel")
    assert kernels["framework_op"].null_count() == 0
    first = kernels.row(0, named=True)
    assert (first["framework_op"], first["op_shapes"]) == ("aten::gather", "[[50257, 768], [], [1024, 768], [], [1024, 768]]")
    assert first["kernel_name"].startswith("void at::native::vectorized_gather_kernel<16, long>")
    assert (first["grid_x"], first["block_x"], first["registers_per_thread"], first["stream_id"]) == (1024, 96, 32, 7)
    assert first["nvtx_path"].endswith("aten::embedding > aten::index_select > aten::gather")
    # a kernel under autograd: the backward op of the training step
    train = ingest.read(DATA / "torch-trace-gpt2_train/trace.json").timeline
    assert train.filter(train["activity"] == "kernel")["framework_op"].null_count() == 0


def test_trace_and_ncu_of_one_model_share_kernel_ids(ingested):
    """gpt2's trace and its ncu export name the same first kernels: same identity."""
    got = rows(ingested, "SELECT t.kernel_id, t.kernel_base FROM kernel_launches t JOIN kernels k USING (model, kernel_id) "
                         "WHERE model = 'gpt2' GROUP BY ALL ORDER BY 2")
    assert [base for _, base in got] == ["at::native::vectorized_elementwise_kernel",
                                         "at::native::vectorized_gather_kernel", "elementwise_kernel_with_index"]


def test_bad_traces_get_clear_errors(tmp_path):
    (tmp_path / "cut.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    with pytest.raises(InputError, match=r"cut.json:1: not valid JSON .*; is the trace complete\?"):
        ingest.read(tmp_path / "cut.json")
    (tmp_path / "cpu.json").write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2}]}')
    with pytest.raises(InputError, match=r"cpu.json: no GPU events .* ProfilerActivity.CUDA\?"):
        ingest.read(tmp_path / "cpu.json")


# -- nsys SQLite ---------------------------------------------------------------------------------

@pytest.mark.parametrize("path, gpu, version", [
    ("nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", "NVIDIA A100-SXM4-40GB", "2022.2.1.31"),
    ("nsys-sqlite-rtx3090/report1.sqlite", "NVIDIA GeForce RTX 3090", "2025.5.1.121"),
    ("nsys-sqlite-2026-ddl/report-schema-3.25.0.sqlite", None, None),
])
def test_nsys_sqlite_rows_equal_the_source(path, gpu, version):
    con = sqlite3.connect(f"file:{DATA / path}?mode=ro", uri=True)
    counts = {table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
              for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")}
    total_ns = con.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    result = ingest.read(DATA / path)
    kernels = result.timeline.filter(result.timeline["activity"] == "kernel")
    assert kernels.height == counts["CUPTI_ACTIVITY_KIND_KERNEL"]
    assert result.timeline.filter(result.timeline["activity"] == "memcpy").height == counts["CUPTI_ACTIVITY_KIND_MEMCPY"]
    assert kernels["duration_ns"].sum() == total_ns
    assert (result.gpu_name, result.tool_version) == (gpu, version)
    assert kernels["kernel_short_name"].null_count() == 0 and kernels["kernel_mangled"].null_count() == 0


def test_nsys_names_and_nvtx_attribution():
    timeline = ingest.read(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite").timeline
    kernel = timeline.filter(timeline["activity"] == "kernel").row(0, named=True)
    assert (kernel["kernel_name"], kernel["kernel_short_name"], kernel["kernel_mangled"]) == (
        "saxpy(double *, double *, double *, double, int)", "saxpy", "_Z5saxpyPdS_S_di")
    # the push/pop range "saxpy" encloses the cudaLaunchKernel call on the same thread
    assert (kernel["nvtx_path"], kernel["nvtx_range"]) == ("saxpy", "saxpy")
    assert identity.identify(kernel["kernel_mangled"]).kernel_id == identity.identify(kernel["kernel_name"]).kernel_id
    memcpy = timeline.filter(timeline["activity"] == "memcpy").row(0, named=True)
    assert (memcpy["kernel_name"], memcpy["bytes"]) == ("[CUDA memcpy Host-to-Device]", 262144000)


def test_each_kernel_gets_its_own_gpu_on_a_multi_gpu_report(tmp_path):
    """TARGET_INFO_GPU lists two GPUs whose ids differ from the CUDA device ids; map each deviceId."""
    path = tmp_path / "two.sqlite"
    shutil.copy(DATA / "nsys-sqlite-rtx3090/report1.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("UPDATE TARGET_INFO_GPU SET name = 'GPU cuda0' WHERE cuDevice = 0")
    con.execute("UPDATE TARGET_INFO_GPU SET name = 'GPU cuda1' WHERE cuDevice = 1")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE rowid % 2 = 0")
    con.commit()
    con.close()
    timeline = ingest.read(path).timeline
    kernels = timeline.filter(timeline["activity"] == "kernel")
    names = dict(zip(kernels["device_id"].to_list(), kernels["device_name"].to_list()))
    # TARGET_INFO_CUDA_DEVICE maps (pid, cudaId) to gpuId: cudaId 0 is gpuId 1 (cuDevice 0)
    assert names == {0: "GPU cuda0", 1: "GPU cuda1"}


def test_reading_sqlite_writes_nothing_beside_it(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", folder / "r.sqlite")
    os.chmod(folder / "r.sqlite", 0o444)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    ingest.read(folder / "r.sqlite")
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


# -- nsys stats CSV ------------------------------------------------------------------------------

def test_kern_sum_header_generations_and_time_units_agree():
    folder = DATA / "nsys-stats-derived-rtx3090"
    frames = {p.name: ingest.read(p).summaries.sort("kernel_name", "grid_dims", nulls_last=True)
              for p in sorted(folder.glob("report_*.csv"))}
    current = ingest.read(folder / "stats_stdout.csv").summaries.sort("kernel_name")
    for name, frame in frames.items():
        assert frame["instances"].sum() == current["instances"].sum() == 97, name
        assert frame["total_ns"].sum() == pytest.approx(current["total_ns"].sum(), rel=1e-6), name
    usec = frames["report_cuda_gpu_kern_sum_usec.csv"]
    assert usec["total_ns"].to_list() == pytest.approx(current["total_ns"].to_list(), abs=1.0)  # 3 decimals of us
    gb = frames["report_cuda_gpu_kern_sum_gb.csv"]
    assert gb["grid_dims"].null_count() == 0 and "(1, 1, 1)" in gb["grid_dims"].to_list()


def test_stats_stdout_with_several_blocks_and_skipped_reports():
    result = ingest.read(DATA / "nsys-stats-derived-a100/stats_stdout.csv")
    assert sorted(set(result.summaries["report"])) == ["cuda_gpu_kern_sum", "nvtx_kern_sum"]
    assert result.nvtx_summaries["nvtx_range"].to_list()[:2] == ["MPI_Init", "MPI_Send"]
    assert result.timeline.height == 20 and result.gpu_name == "NVIDIA A100-SXM4-40GB"
    sqlite_timeline = ingest.read(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite").timeline
    assert result.timeline["duration_ns"].sum() == sqlite_timeline["duration_ns"].sum()
    nvtx = result.summaries.filter(result.summaries["report"] == "nvtx_kern_sum").row(0, named=True)
    assert (nvtx["nvtx_range"], nvtx["instances"]) == ("saxpy", 5)
    skipped = ingest.read(DATA / "nsys-stats-derived-rtx3090/stats_stdout.csv")
    assert skipped.nvtx_summaries is None and set(skipped.summaries["report"]) == {"cuda_gpu_kern_sum"}


def test_public_kern_sum_rows_equal_the_file(ingested):
    path = DATA / "nsys-stats-rtx5090/summary_cuda_gpu_kern_sum.csv"
    lines = path.read_text().splitlines()
    got = rows(ingested, "SELECT count(*), sum(instances), round(sum(total_ns)) FROM kernel_summaries "
                         "WHERE model = 'nsys-stats-rtx5090'")
    assert got == [(len(lines) - 1, 78016, 179072697.0)]
    assert rows(ingested, "SELECT count(*) FROM kernel_summaries WHERE model = 'nsys-stats-rtx5090' "
                          "AND (library = 'unknown' OR op_class = 'unknown')") == [(0,)]


def test_truncated_stats_csv_names_the_line(tmp_path):
    text = (DATA / "nsys-stats-derived-a100/stats_stdout.csv").read_text().splitlines()
    cut = text[:2] + [text[2][:20]]
    (tmp_path / "cut.csv").write_text("\n".join(cut) + "\n")
    with pytest.raises(InputError, match=r"cut.csv:3: row has \d+ fields, the cuda_gpu_kern_sum header has 9"):
        ingest.read(tmp_path / "cut.csv")


# -- .ncu-rep ------------------------------------------------------------------------------------

def test_ncu_rep_and_its_csv_give_the_same_rows(tmp_path):
    pytest.importorskip("ncu_report")
    rep, csv_only = Warehouse(tmp_path / "rep"), Warehouse(tmp_path / "csv")
    folder_rep, folder_csv = tmp_path / "a", tmp_path / "b"
    for folder, exports in ((folder_rep, ["compiled_mlp.ncu-rep"]), (folder_csv, ["compiled_mlp.raw.csv"])):
        folder.mkdir()
        for name in exports + ["manifest.ncu.json", "ncu_version.txt"]:
            shutil.copy(DATA / "ncu-rep-compiled-mlp" / name, folder / name)
    ingest_job.ingest([folder_rep], rep)
    ingest_job.ingest([folder_csv], csv_only)
    # every column but the process fields the report API does not expose, and the raw NVTX text
    skip = {"run_id", "process_id", "process_name", "host_name", "nvtx_push_pop"}
    columns = [c for c, in rows(rep, "SELECT column_name FROM (DESCRIBE kernels)") if c not in skip]
    a = rows(rep, f"SELECT {', '.join(columns)} FROM kernels ORDER BY launch_id")
    b = rows(csv_only, f"SELECT {', '.join(columns)} FROM kernels ORDER BY launch_id")
    assert len(a) == len(b) == 11
    for x, y in zip(a, b):
        for column, u, v in zip(columns, x, y):
            if isinstance(u, float) and isinstance(v, float):
                # the CSV prints 2 to 6 decimals of the report's full-precision values
                assert math.isclose(u, v, rel_tol=1e-5, abs_tol=0.006), column
            else:
                assert u == v, column
    metric_sql = "SELECT launch_id, metric, unit, value, value_text FROM metrics ORDER BY 1, 2"
    ma, mb = rows(rep, metric_sql), rows(csv_only, metric_sql)
    assert [r[:3] for r in ma] == [r[:3] for r in mb]
    for x, y in zip(ma, mb):
        assert (x[3] is None) == (y[3] is None) and x[4] == y[4]
        if x[3] is not None:
            assert math.isclose(x[3], y[3], rel_tol=1e-5, abs_tol=0.006), x[:2]


def test_ncu_rep_joins_the_run_of_its_csv_pages(ingested):
    assert rows(ingested, "SELECT count(*), count(DISTINCT run_id) FROM kernels WHERE model = 'compiled_mlp'") == [(11, 1)]
    (files,), = rows(ingested, "SELECT source_files FROM runs WHERE model = 'compiled_mlp' AND tool = 'ncu'")
    assert sorted(f.rsplit("/", 1)[-1] for f in files) == ["compiled_mlp.ncu-rep", "compiled_mlp.raw.csv"]


def test_ncu_rep_without_the_extra_says_what_to_install(monkeypatch):
    monkeypatch.setattr(ncu_rep, "_module", lambda: None)
    with pytest.raises(InputError, match=r'compiled_mlp.ncu-rep: an Nsight Compute report file; install the optional '
                                         r'reader with: pip install "kwarehouse\[ncu-rep\]"'):
        ingest.read(DATA / "ncu-rep-compiled-mlp/compiled_mlp.ncu-rep")


def test_nsys_rep_files_get_a_clear_error(tmp_path):
    path = tmp_path / "report1.nsys-rep"
    path.write_bytes(b"\x00\x01binary nsys report")
    with pytest.raises(InputError, match=r"report1.nsys-rep: an Nsight Systems report file; export it with "
                                         r"nsys export --type sqlite"):
        ingest.read(path)


# -- coverage and time-weighting -----------------------------------------------------------------

def test_coverage_by_hand(ingested):
    """gpt2: the trimmed trace holds 38 kernels; ncu profiled the first 3 launches, 3 identities."""
    trace = [e for e in trace_events("torch-trace-gpt2") if e.get("cat") == "kernel"]
    ncu_ids = {identity.identify(n).kernel_id for n, in rows(ingested, "SELECT kernel_name FROM kernels WHERE model = 'gpt2'")}
    covered = [e for e in trace if identity.identify(e["name"]).kernel_id in ncu_ids]
    (launches, covered_pct, time_pct), = rows(
        ingested, "SELECT timeline_launches, covered_launches_pct, covered_gpu_time_pct FROM coverage WHERE model = 'gpt2'")
    assert launches == len(trace)
    assert covered_pct == pytest.approx(100 * len(covered) / len(trace))
    assert time_pct == pytest.approx(float(100 * sum(e["dur"] for e in covered) / sum(e["dur"] for e in trace)))


def test_time_weighting_keeps_unprofiled_time(ingested):
    got = rows(ingested, "SELECT weight_source, bottleneck IS NOT NULL, sum(model_time_pct) FROM time_weighted_kernels "
                         "WHERE model = 'gpt2' GROUP BY ALL ORDER BY 1")
    assert [r[0] for r in got] == ["timeline"]
    assert sum(r[2] for r in got) == pytest.approx(100.0)
    assert rows(ingested, "SELECT DISTINCT weight_source FROM time_weighted_kernels WHERE model = 'llama'") == [("ncu",)]
    not_profiled = rows(ingested, "SELECT count(*) FROM time_weighted_kernels WHERE model = 'gpt2' "
                                  "AND bottleneck = 'not profiled' AND sm_pct IS NULL")
    assert not_profiled[0][0] > 0
