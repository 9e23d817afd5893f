"""Timeline ingest at its floor (issue 23): traces streamed in pieces read exactly like the plain
json.loads path, sniffing tries the byte-test guesses first, and bench/timelines.py keeps working."""

import importlib.util
import pathlib
import re
import sys
from pathlib import Path

import pytest

from kwarehouse import ingest
from kwarehouse.errors import InputError
from kwarehouse.ingest import torch_trace
from kwarehouse.ingest.nsys_stats_csv import NsysStatsCsv
from kwarehouse.ingest.nsys_text import NsysText

DATA = Path(__file__).parent / "data"
TRACES = sorted(DATA.glob("torch-trace-*/trace.json"))


def plain(path: Path):
    return torch_trace.TorchTrace()._read_whole(path)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("piece", [1 << 20, 4096, 700])
def test_a_streamed_trace_reads_exactly_like_the_whole_file(monkeypatch, trace, piece):
    # small pieces put the cuts between events everywhere, inside strings and nested args included
    monkeypatch.setattr(torch_trace, "PIECE_BYTES", piece)
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: pytest.fail("read whole"))
    streamed = torch_trace.TorchTrace().read(trace)
    monkeypatch.undo()
    whole = plain(trace)
    assert streamed.timeline.equals(whole.timeline) and streamed.gpu_name == whole.gpu_name


def test_what_the_stream_does_not_expect_is_read_or_refused_by_the_plain_path(tmp_path):
    source = (DATA / "torch-trace-gpt2/trace.json").read_bytes()
    # an event that is not an object: json.loads skips it; the streaming path hands the file over
    path = tmp_path / "trace.json"
    path.write_bytes(source.replace(b'"traceEvents": [', b'"traceEvents": [1, ', 1))
    assert torch_trace.TorchTrace().read(path).timeline.equals(plain(DATA / "torch-trace-gpt2/trace.json").timeline)
    # cut short: the plain path's words, with the line
    path.write_bytes(source[: len(source) // 2])
    with pytest.raises(InputError, match=r"trace.json:\d+: not valid JSON .* ends before its closing brace"):
        ingest.read(path)


def test_a_trace_is_claimed_before_the_text_sniffers_run(monkeypatch):
    for reader in (NsysText, NsysStatsCsv):
        monkeypatch.setattr(reader, "sniff", lambda self, path, head: pytest.fail("text sniffer ran"))
    assert ingest.sniff(TRACES[0]).name == "torch-trace"
    assert ingest.sniff(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite").name == "nsys-sqlite"


def test_the_timelines_bench_runs_at_its_smallest_size(tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "bench_timelines", Path(__file__).resolve().parents[1] / "bench" / "timelines.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["timelines.py", "--repeat", "1", str(TRACES[0]),
                                      str(DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite"), "--nsys-copies", "2"])
    bench.main()
    out = capsys.readouterr().out
    assert "| torch-trace |" in out and "derived-x2.sqlite | nsys-sqlite |" in out


def test_the_fixed_cost_bench_compares_whole_processes(tmp_path, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "bench_timelines", Path(__file__).resolve().parents[1] / "bench" / "timelines.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["timelines.py", "--fixed-cost", "--repeat", "1", str(TRACES[0])])
    bench.main()
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {TRACES[0]} |"))
    kwh_cpu, floor_cpu, hta, ratio = (cell.strip() for cell in row.split("|")[3:7])
    assert float(kwh_cpu.split()[0]) > 0 and float(floor_cpu.split()[0]) > 0 and hta == "-" and float(ratio) > 0


STATS_CAPTURES = sorted(DATA.glob("nsys-stats-*/*.csv"))


@pytest.mark.parametrize("capture", STATS_CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stats_blocks_read_alike_column_by_column_and_row_by_row(capture):
    from kwarehouse.ingest import nsys_stats_csv
    lines = nsys_stats_csv.read_text(capture, "nsys stats output")
    blocks = NsysStatsCsv()._blocks(capture, lines)
    for block in blocks:
        if block.report == "cuda_gpu_trace":
            assert nsys_stats_csv._trace_by_column(block).equals(nsys_stats_csv._trace_by_row(capture, block))
        elif block.report in ("cuda_gpu_kern_sum", "nvtx_kern_sum", "nvtx_sum", "nvtx_gpu_proj_sum"):
            columns = (nsys_stats_csv.NVTX_SUMMARY_COLUMNS if block.report.startswith("nvtx_") and
                       block.report != "nvtx_kern_sum" else nsys_stats_csv.SUMMARY_COLUMNS)
            assert nsys_stats_csv._summary_by_column(block, columns).equals(
                nsys_stats_csv._summary_by_row(capture, block, columns))


def test_a_bad_stats_gpu_trace_cell_is_named_by_its_row_and_column(tmp_path):
    # the column-wise path hands a block with a bad cell to the row-by-row one, which names the first
    # bad cell in row order: here row 21's Ctx, although a later row's Start is bad too
    lines = (DATA / "nsys-stats-derived-a100/stats_stdout.csv").read_text().splitlines(keepends=True)
    lines[20] = lines[20].replace(",1,,7,", ",one,,7,")
    lines[22] = "x" + lines[22]
    path = tmp_path / "stats_stdout.csv"
    path.write_text("".join(lines))
    # each bad row is its own warning and is left out; the other rows are read (issue 31.2)
    result = ingest.read(path)
    assert re.search(r"stats_stdout.csv:21: 'one' is not a number \(column Ctx of cuda_gpu_trace\)", result.warnings[0])
    assert "stats_stdout.csv:23:" in result.warnings[1]
    clean = ingest.read(DATA / "nsys-stats-derived-a100/stats_stdout.csv")
    assert result.timeline.height == clean.timeline.height - 2


@pytest.mark.parametrize("edit, error", [
    (lambda cells: cells.__setitem__(2, "many"), r"summary_cuda_gpu_kern_sum.csv:4: 'many' is not a number "
                                                 r"\(column Instances of cuda_gpu_kern_sum\)"),
    (lambda cells: cells.__setitem__(1, ""), r"summary_cuda_gpu_kern_sum.csv:4: cuda_gpu_kern_sum row without "
                                             r"instances or total time"),
    (lambda cells: cells.__setitem__(8, ""), r"summary_cuda_gpu_kern_sum.csv:4: cuda_gpu_kern_sum row without "
                                             r"a kernel name"),
])
def test_a_bad_stats_summary_cell_is_named_by_its_row(tmp_path, edit, error):
    """A summary block with a bad cell (real RTX 5090 export; row 4 edited) goes the row-by-row way,
    which words what is wrong and names the line (a later row's bad cell does not win)."""
    import csv
    import io
    text = (DATA / "nsys-stats-rtx5090/summary_cuda_gpu_kern_sum.csv").read_text()
    rows = list(csv.reader(io.StringIO(text)))
    edit(rows[3])
    rows[5][3] = "n/a?"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path = tmp_path / "summary_cuda_gpu_kern_sum.csv"
    path.write_text(out.getvalue())
    result = ingest.read(path)          # the bad rows are warnings and left out, the others read
    assert re.search(error, result.warnings[0]) and "summary_cuda_gpu_kern_sum.csv:6:" in result.warnings[1]


def test_an_nsys_export_is_opened_once_for_its_sniff_and_its_read(monkeypatch, tmp_path):
    import shutil

    from kwarehouse.ingest import nsys_sqlite
    opened = []
    real = nsys_sqlite.connect_read_only
    monkeypatch.setattr(nsys_sqlite, "connect_read_only", lambda path: opened.append(path) or real(path))
    export = DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite"
    assert ingest.read(export).timeline.equals(nsys_sqlite.NsysSqlite().read(export).timeline)
    assert len(opened) == 2        # ingest.read's sniff and read share one; a reader of its own opens one
    # a file replaced between the sniff and the read is opened again, and read as it is now
    copy = tmp_path / "report.sqlite"
    shutil.copyfile(export, copy)
    reader = ingest.sniff(copy)
    shutil.copyfile(DATA / "nsys-sqlite-rtx3090/report1.sqlite", copy)
    opened.clear()
    assert ingest.read_with(reader, copy).timeline.height == 136 and len(opened) == 1


def test_a_trace_whose_events_start_past_the_first_guess_bytes_is_still_a_trace(tmp_path):
    source = TRACES[0].read_bytes()
    path = tmp_path / "trace.json"
    path.write_bytes(b"{" + b" " * (ingest.GUESS_BYTES + 10) + source.lstrip()[1:])
    assert ingest.sniff(path).name == "torch-trace"
    assert ingest.read(path).timeline.equals(plain(TRACES[0]).timeline)


def test_nsys_exports_sniffed_and_read_in_threads_side_by_side():
    from concurrent.futures import ThreadPoolExecutor
    exports = [DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", DATA / "nsys-sqlite-rtx3090/report1.sqlite"] * 8
    with ThreadPoolExecutor(4) as pool:
        heights = list(pool.map(lambda path: ingest.read(path).timeline.height, exports))
    assert heights == [20, 136] * 8
