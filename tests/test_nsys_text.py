"""nsys console text (`nsys profile --stats=true`, `nsys stats` with the default column format), the
memory-op / CUDA API / NVTX reports of nsys stats, and NVTX range traces (issue 21, item 3).

Every capture here is real text from a public repository (tests/data/README.md names each): the
values are checked against the lines as printed, and against a second real source where the same
report was printed twice (text-nsys-derivative-proj: the --stats=true tables and the
nvtx_gpu_proj_trace of one report)."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError, KwhError
from kwarehouse.ingest import nsys_stats_csv, nsys_text
from kwarehouse.ingest.nsys_stats_csv import Block
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA, rows

A100 = DATA / "text-nsys-a100-vectoradd/stats_console.txt"          # nsys profile --stats=true, A100
DERIVATIVE = DATA / "text-nsys-derivative-proj/stats_console.txt"    # the same, another program
PROJECTION = DATA / "text-nsys-derivative-proj/nvtx_gpu_proj_trace.txt"   # nsys stats -r nvtx_gpu_proj_trace, same report
VLLM = DATA / "text-nsys-vllm-truncated/stats_column.txt"            # nsys stats 2025.5.2 stdout, names cut with …
NO_KERNELS = DATA / "text-nsys-l40s-nokernels/stats_stdout.txt"      # nsys stats stdout, kernel report SKIPPED
PUSHPOP = DATA / "csv-nsys-xla-pushpop/output_nvtx_pushpop_trace.csv"
NO_KERNEL_DATA = DATA / "bad/nsys_stats_no_kernel_data.txt"
OLD = DATA / "text-nsys-old-paddle/stats_console.txt"             # nsys 2021-era --stats=true tables
BOXED = DATA / "text-nsys-rtx3080-table/stats_table.txt"          # nsys stats --format table


def test_each_capture_is_claimed_by_its_reader_only():
    for path, name in ((A100, "nsys-text"), (DERIVATIVE, "nsys-text"), (PROJECTION, "nsys-text"), (VLLM, "nsys-text"),
                       (NO_KERNELS, "nsys-text"), (NO_KERNEL_DATA, "nsys-text"), (OLD, "nsys-text"), (BOXED, "nsys-text"),
                       (PUSHPOP, "nsys-stats-csv")):
        assert ingest.sniff(path).name == name, path
    # the CSV stats captures and the ncu console text stay with their own readers
    for path in (DATA / "nsys-stats-derived-a100/stats_stdout.csv", DATA / "text-ncu-gpt2-h100/gpt2.ncu-console.txt"):
        head = path.read_bytes()[: ingest.SNIFF_BYTES]
        assert not ingest.READERS["nsys-text"].sniff(path, head), path


def test_stats_console_values_as_printed():
    result = ingest.read(A100)
    assert (result.format, result.tool, result.page) == ("nsys-text", "nsys", "summary")
    kernel = result.summaries.row(0, named=True)
    assert result.summaries.height == 1
    assert (kernel["report"], kernel["kernel_name"]) == ("cuda_gpu_kern_sum",
                                                          "vectorAdd(const float *, const float *, float *, int)")
    # "100.0  1,830,493  1,010  1,812.4  1,824.0  1,792  2,752  35.8": thousands separators dropped, in ns
    assert [kernel[c] for c in ("time_pct", "total_ns", "instances", "avg_ns", "median_ns", "min_ns", "max_ns",
                                "stddev_ns")] == [100.0, 1830493.0, 1010, 1812.4, 1824.0, 1792.0, 2752.0, 35.8]
    nvtx = result.nvtx_summaries.rows(named=True)
    assert [(r["nvtx_range"], r["style"], r["total_ns"], r["time_basis"]) for r in nvtx] == [
        ("Profile_Loop", "PushPop", 3414647.0, "cpu range"), ("Warmup", "PushPop", 151184.0, "cpu range")]
    # cuda_api_sum is read; osrt_sum, with the same columns, is not
    api = result.tables["api_summaries"]
    assert api["api_name"].to_list() == ["cudaFree", "cudaLaunchKernel", "cudaMalloc", "cudaMemcpy",
                                         "cudaDeviceSynchronize", "cuModuleGetLoadingMode"]
    assert api.row(1, named=True)["calls"] == 1010 == kernel["instances"]   # one launch call per kernel
    memory = result.tables["memory_op_summaries"].rows(named=True)
    assert [(m["operation"], m["operations"], m["total_ns"], m["total_bytes"]) for m in memory] == [
        ("[CUDA memcpy HtoD]", 2, 2465.0, 0.0), ("[CUDA memcpy DtoH]", 1, 2176.0, 0.0)]


def test_projection_trace_agrees_with_the_stats_of_the_same_report():
    """One report printed twice: each range launched one kernel, so its GPU projection lasts exactly that
    kernel's time, and its CPU duration is nvtx_sum's time for the range."""
    stats, projection = ingest.read(DERIVATIVE), ingest.read(PROJECTION)
    ranges = projection.tables["nvtx_ranges"]
    assert set(ranges["report"]) == {"nvtx_gpu_proj_trace"} and ranges.height == 10
    named = ranges.filter(pl.col("nvtx_range").is_not_null())
    kernels = {r["kernel_name"].split("(")[0]: r for r in stats.summaries.rows(named=True)}
    cpu = {r["nvtx_range"]: r["total_ns"] for r in stats.nvtx_summaries.rows(named=True)}
    for row in named.rows(named=True):
        direction, function, _, _ = row["nvtx_range"].split(" ")       # "Forward Sine Kernel Launch"
        function = {"Exponential": "Exponential", "Sine": "Sin", "Polynomial": "Polynomial"}[function]
        kernel = kernels[f"{direction.lower()}{function}Kernel"]
        assert row["gpu_duration_ns"] == kernel["total_ns"] and row["gpu_op_count"] == kernel["instances"] == 1
        assert row["duration_ns"] == cpu[row["nvtx_range"]]
        assert row["end_ns"] == row["start_ns"] + row["duration_ns"]
        assert row["start_ns"] <= row["gpu_start_ns"]                  # the GPU work starts after its launch
    # the row for GPU work outside every range: the 27 copies of cuda_gpu_mem_time_sum
    outside = ranges.filter(pl.col("nvtx_range").is_null()).row(0, named=True)
    copies = stats.tables["memory_op_summaries"]
    assert outside["gpu_op_count"] == copies["operations"].sum() == 27
    assert outside["start_ns"] is None and outside["level"] is None and outside["process_id"] == 101690
    assert copies.filter(pl.col("operation") == "[CUDA memcpy DtoH]")["total_bytes"].item() == 147000.0  # 0.147 MB


def test_cut_names_stay_cut_and_distinct():
    result = ingest.read(VLLM)
    kernels = result.summaries
    assert kernels.height == 16 and kernels["instances"].sum() == 2942588
    cut = kernels.filter(pl.col("kernel_name").str.ends_with("\u2026"))
    marlin = cut.filter(pl.col("kernel_name").str.starts_with("void marlin::Marlin<"))
    assert cut.height == 12 and marlin.height == 6            # six Marlin variants cut to one text: six rows
    assert marlin["total_ns"].to_list()[:2] == [62589830968.0, 10817981632.0]
    whole = kernels.filter(~pl.col("kernel_name").str.ends_with("\u2026"))["kernel_name"].to_list()
    assert "ncclDevKernel_AllReduce_Sum_f16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)" in whole
    assert result.tables["memory_op_summaries"]["operation"].to_list() == [
        "[CUDA memcpy Host-to-Device]", "[CUDA memcpy Device-to-Device]", "[CUDA memcpy Device-to-Host]",
        "[CUDA memset]"]


def test_a_cut_name_is_completed_only_when_one_full_name_starts_with_it():
    """Names of the vLLM capture: a cut copy of a name printed whole elsewhere in the capture is completed;
    a cut that two full names start with is left as printed."""
    names = [r["kernel_name"] for r in ingest.read(VLLM).summaries.rows(named=True)]
    nccl = next(n for n in names if n.startswith("ncclDevKernel_AllReduce"))
    rsqrt = sorted(n for n in names if n.startswith("triton_red_fused__to_copy_add_marlin_gemm_mean_mul_pow_rsqrt_"))
    assert len(rsqrt) == 2
    header = ["Time (%)", "Total Time (ns)", "Instances", "Name"]
    whole = Block("cuda_gpu_kern_sum", header, [["1", "1", "1", nccl], ["1", "1", "1", rsqrt[0]],
                                                ["1", "1", "1", rsqrt[1]]], [1, 2, 3])
    cut_nccl, cut_rsqrt = nccl[:30] + "\u2026", rsqrt[0][:-1] + "..."
    cut = Block("cuda_gpu_kern_sum", header, [["1", "1", "1", cut_nccl], ["1", "1", "1", cut_rsqrt]], [5, 6])
    nsys_text._complete_cut_names([whole, cut])
    assert [row[3] for row in cut.rows] == [nccl, cut_rsqrt]


def test_pushpop_trace_csv_values_as_written():
    ranges = ingest.read(PUSHPOP).tables["nvtx_ranges"].rows(named=True)
    assert [r["nvtx_range"] for r in ranges] == ["TSL:XlaDumpHloModule:#module=jit__psum,program_id=0#",
                                                "TSL:XlaCompile:#module=jit__psum,program_id=0#"]
    compile_ = ranges[1]
    assert (compile_["start_ns"], compile_["end_ns"], compile_["duration_ns"], compile_["child_duration_ns"]) == (
        129469619302, 129914331259, 444711957, 169945965)
    assert (compile_["process_id"], compile_["thread_id"], compile_["level"], compile_["child_count"],
            compile_["range_id"], compile_["parent_id"], compile_["range_stack"]) == (
        2286673, 2286673, 0, 22, 125601, None, ":125601")
    assert all(r["end_ns"] - r["start_ns"] == r["duration_ns"] for r in ranges)


def test_a_report_without_kernel_data_says_exactly_that():
    with pytest.raises(InputError) as caught:
        ingest.read(NO_KERNEL_DATA)
    assert str(caught.value) == f"{NO_KERNEL_DATA}: {nsys_stats_csv.NO_KERNEL_DATA}"
    assert nsys_stats_csv.NO_KERNEL_DATA == "this nsys report has no CUDA kernel data"
    # with other tables (NVTX, API calls, copies) it is read: they are kept, no kernel rows are made up
    result = ingest.read(NO_KERNELS)
    assert result.summaries is None and result.nvtx_summaries.height == 5
    assert result.tables["api_summaries"].height == 6
    memory = result.tables["memory_op_summaries"].row(0, named=True)
    assert (memory["operation"], memory["operations"], memory["total_bytes"], memory["max_bytes"]) == (
        "[CUDA memcpy Device-to-Device]", 50, 9067000.0, 602000.0)


def test_bad_input_gets_one_line_and_the_rest_of_the_ingest_goes_in(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(A100, folder / "good.txt")
    shutil.copy(NO_KERNEL_DATA, folder / "nokernels.txt")
    lines = A100.read_text().splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if "Executing 'cuda_gpu_kern_sum'" in line) + 3
    (folder / "cut_after_header.txt").write_text("".join(lines[: header + 1]))   # header and dashes, no rows
    (folder / "cut_in_a_line.txt").write_text("".join(lines[: header + 1]) + lines[header + 1][:40])
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([folder, DATA / "text-nsys-derivative-proj", DATA / "csv-nsys-xla-pushpop"], warehouse)
    messages = sorted(report.failed)                # one line each
    assert len(report.failed) == 2, messages
    # nsys said the report holds no kernel data: nothing to store, not a failure (issue 31)
    assert [(e.path.rsplit("/", 1)[-1], e.reason) for e in report.empty] == [
        ("nokernels.txt", "this nsys report has no CUDA kernel data")]
    assert any("cut_after_header.txt:" in m and "header but no rows" in m for m in messages), messages
    assert any("cut_in_a_line.txt:" in m and "file ends in the middle of a line" in m for m in messages), messages
    assert all("\n" not in m for m in messages)
    got = rows(warehouse, "SELECT model, count(*), sum(instances) FROM kernel_summaries GROUP BY 1 ORDER BY 1")
    assert got == [("mixed", 1, 1010), ("text-nsys-derivative-proj", 9, 9)]
    # the new tables, as the views show them
    assert rows(warehouse, "SELECT report, count(*), sum(gpu_duration_ns) FROM nvtx_ranges GROUP BY 1 ORDER BY 1") == [
        ("nvtx_gpu_proj_trace", 10, 1373678 + 4416 + 4128 + 1792 + 4032 + 3840 + 1824 + 4032 + 3904 + 1888),
        ("nvtx_pushpop_trace", 2, None)]
    assert rows(warehouse, "SELECT model, sum(calls) FROM api_summaries WHERE api_name = 'cudaLaunchKernel' "
                           "GROUP BY 1 ORDER BY 1") == [("mixed", 1010), ("text-nsys-derivative-proj", 9)]
    assert rows(warehouse, "SELECT count(*), sum(operations) FROM memory_op_summaries "
                           "WHERE model = 'text-nsys-derivative-proj'") == [(2, 27)]
    assert rows(warehouse, "SELECT DISTINCT time_basis FROM nvtx_summaries") == [("cpu range",)]


def test_text_that_is_not_a_capture_is_not_claimed(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Profiling notes\n---------- ----------\nnothing here\n")
    assert ingest.sniff(notes) is None
    with pytest.raises(InputError, match=r"notes.txt: no nsys stats report table kwh reads found"):
        ingest.read(notes, format="nsys-text")
    readme = DATA / "README.md"
    assert ingest.sniff(readme) is None


def test_pre_2022_console_tables_by_title_and_unit():
    """nsys before 2022 printed "CUDA Kernel Statistics (nanoseconds)" over unit-less "Time(%)", "Average",
    "Calls", "Operations" headers, and the memory sizes in KiB."""
    result = ingest.read(OLD)
    kernels, api = result.summaries, result.tables["api_summaries"]
    assert set(kernels["report"]) == {"cuda_gpu_kern_sum"} and kernels.height == 27
    # one launch call per kernel launch, both in the same capture
    assert kernels["instances"].sum() == 136 == api.filter(pl.col("api_name") == "cudaLaunchKernel")["calls"].item()
    first = kernels.row(0, named=True)
    assert (first["total_ns"], first["avg_ns"], first["min_ns"], first["max_ns"], first["median_ns"]) == (
        58366.0, 9727.7, 2784.0, 17215.0, None)       # no median column then
    memory = {m["operation"]: m for m in result.tables["memory_op_summaries"].rows(named=True)}
    htod = memory["[CUDA memcpy HtoD]"]
    assert (htod["operations"], htod["total_ns"], htod["total_bytes"]) == (215, 279581.0, 1454.730 * 1024)


@settings(max_examples=80, deadline=20_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from([A100, DERIVATIVE, PROJECTION, VLLM, NO_KERNELS, OLD, BOXED, PUSHPOP]),
       cut=st.integers(min_value=0, max_value=8_000), noise=st.binary(max_size=64),
       where=st.floats(min_value=0, max_value=1))
def test_damaged_captures_give_a_table_or_one_clean_line(tmp_path, seed, cut, noise, where):
    """Real captures cut short and with bytes spliced in: a result, or one InputError line naming the file."""
    data = seed.read_bytes()
    data = data[: max(1, len(data) - cut)]
    at = int(where * len(data))
    path = tmp_path / seed.name
    path.write_bytes(data[:at] + noise + data[at:])
    try:
        result = ingest.read(path)
    except KwhError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return
    assert result.path == path


def test_boxed_table_format(tmp_path):
    """`nsys stats --format table` (2023.4.4): the same reports in "+---+" boxes, names cut with "…"."""
    result = ingest.read(BOXED)
    kernels = result.summaries
    assert kernels.height == 28 and kernels["instances"].sum() == 2321
    first = kernels.row(0, named=True)
    assert (first["time_pct"], first["total_ns"], first["instances"], first["median_ns"], first["stddev_ns"]) == (
        30.0, 11294113.0, 144, 58352.5, 30989.7)
    assert first["kernel_name"].endswith("const floa\u2026")
    assert "scale_f32(const float *, float *, float, float, long)" in kernels["kernel_name"].to_list()
    memory = result.tables["memory_op_summaries"]
    assert memory["operations"].to_list() == [895, 67, 4] and memory["total_bytes"].null_count() == 3
    # a box without its closing border: the capture was cut
    lines = BOXED.read_text(encoding="utf-8").splitlines(keepends=True)
    last_row = next(i for i, line in enumerate(lines) if "21,086" in line)    # the kernel box's last row
    (tmp_path / "cut.txt").write_text("".join(lines[: last_row + 1]), encoding="utf-8")
    with pytest.raises(InputError, match=r"cut.txt:\d+: the cuda_gpu_kern_sum table ends without its closing border"):
        ingest.read(tmp_path / "cut.txt")
