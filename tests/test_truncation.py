"""Exports cut short (still being copied, or truncated) are refused, never ingested as complete runs;
huge inputs are refused before they are read; gzip-compressed exports read like the plain ones.

Every damaged file here is a real export of tests/data cut (or compressed) by the test itself."""

from __future__ import annotations

import gzip
import pathlib
import shutil
from pathlib import Path

import pytest

from kwarehouse import ingest
from kwarehouse.errors import InputError
from kwarehouse.ingest import base, ncu_csv

DATA = Path(__file__).parent / "data"
PERCENTS = range(10, 100, 10)

# (export, whether it is a line-based CSV where a cut exactly at a row end reads as a shorter file)
EXPORTS = {
    "ncu raw": (DATA / "ncu-gpt2-h100/gpt2.raw.csv", True),
    "ncu details": (DATA / "ncu-gpt2-h100/gpt2.details.csv", True),
    "ncu details stdout": (DATA / "ncu-cupy-h100-stdout/stdout.details.csv", True),
    "ncu-rep": (DATA / "ncu-rep-compiled-mlp/compiled_mlp.ncu-rep", False),
    # not line-based in that sense: a cut at a line end inside a table or a launch is refused too
    "ncu text": (DATA / "text-ncu-gpt2-h100/gpt2.ncu-console.txt", False),
    "nsys stats": (DATA / "nsys-stats-rtx5090/summary_cuda_gpu_kern_sum.csv", True),
    "nsys stats stdout": (DATA / "nsys-stats-derived-a100/stats_stdout.csv", True),
    "nsys sqlite": (DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite", False),
    "nsys sqlite 2026": (DATA / "nsys-sqlite-2026-ddl/report-schema-3.25.0.sqlite", False),
    "torch trace": (DATA / "torch-trace-gpt2/trace.json", False),
}


def rows(result) -> int:
    """What a read gives, counted: rows of every table (a details page cut among its last launch's
    rule rows has all its launches and metrics, and fewer rules)."""
    tables = (result.launches, result.metrics, result.rules, result.timeline, result.summaries,
              result.nvtx_summaries)
    return sum(table.height for table in tables if table is not None)


def refused(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        ingest.read(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def cut(source: Path, target: Path, size: int) -> Path:
    target.write_bytes(source.read_bytes()[:size])
    return target


def needs(source: Path) -> None:
    if source.suffix == ".ncu-rep":
        pytest.importorskip("ncu_report")


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_tenth_cut_is_refused(tmp_path, name):
    source, line_based = EXPORTS[name]
    needs(source)
    full = rows(ingest.read(source))
    data = source.read_bytes()
    for percent in PERCENTS:
        size = len(data) * percent // 100
        path = cut(source, tmp_path / source.name, size)
        if line_based and data[size - 1:size] == b"\n":
            assert rows(ingest.read(path)) < full, f"{percent}%"    # cut exactly at a row end
        else:
            refused(path)


@pytest.mark.parametrize("name", [n for n, (_, line_based) in sorted(EXPORTS.items()) if line_based])
def test_a_csv_cut_mid_row_is_refused_and_one_cut_at_a_row_end_reads_shorter(tmp_path, name):
    source, _ = EXPORTS[name]
    data = source.read_bytes()
    full = rows(ingest.read(source))
    last_row = data.rstrip(b"\n").rfind(b"\n") + 1          # where the file's last line starts
    mid = last_row + (len(data) - last_row) // 2
    message = refused(cut(source, tmp_path / source.name, mid))
    assert "ends in the middle of a" in message and "still being copied" in message
    # a cut exactly after a row: structurally a complete, shorter file (the pipeline sees a later,
    # longer file extend it); never more rows than the full file
    shorter = cut(source, tmp_path / source.name, last_row)
    try:
        assert rows(ingest.read(shorter)) < full
    except InputError as exc:
        assert "cut short" in str(exc)                        # a details page's last launch, partial


def test_a_details_page_cut_inside_its_last_launch_is_refused(tmp_path):
    source = DATA / "ncu-gpt2-h100/gpt2.details.csv"
    lines = source.read_bytes().splitlines(keepends=True)
    second_launch = next(i for i, line in enumerate(lines) if line.startswith(b'"1",'))
    path = tmp_path / source.name
    path.write_bytes(b"".join(lines[:second_launch + 10]))   # 10 rows of launch 1, then the cut
    message = refused(path)
    assert f"{path}:{second_launch + 10}: the last launch (ID 1) has 10 of the 75 metric rows" in message
    path.write_bytes(b"".join(lines[:second_launch]))        # cut between launches: launch 0 whole
    assert ingest.read(path).launches.height == 1


def test_a_raw_row_cut_after_a_whole_cell_is_refused(tmp_path):
    source = DATA / "ncu-gpt2-h100/gpt2.raw.csv"
    data = source.read_bytes()
    at = data.rindex(b'","', 0, len(data) - 100) + 1          # just after a closing quote in the last row
    message = refused(cut(source, tmp_path / source.name, at))
    assert ":5: file ends in the middle of a row" in message


def test_an_ncu_rep_with_no_results_or_cut_at_a_block_boundary(tmp_path):
    pytest.importorskip("ncu_report")
    source = DATA / "ncu-rep-compiled-mlp/compiled_mlp.ncu-rep"
    assert "holds no kernel results; truncated?" in refused(cut(source, tmp_path / source.name, 145))
    # 149,936 bytes is the end of the block holding the first result: a complete report of 1 launch
    result = ingest.read(cut(source, tmp_path / source.name, 149_936))
    assert result.launches.height == 1 and result.metrics.height == 815
    assert "ends inside a block header at byte 149,936 of 149,937" in refused(cut(source, tmp_path / source.name,
                                                                                 149_937))


def test_an_sqlite_file_that_is_not_whole_pages_is_refused(tmp_path):
    source = DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite"
    path = cut(source, tmp_path / source.name, 100_000)
    assert "an SQLite file cut short: 100,000 of the 425,984 bytes" in refused(path)
    with pytest.raises(InputError, match=r"cut short: 100,000 of the 425,984 bytes .*nsys export --type sqlite"):
        ingest.read(path, format="nsys-sqlite")


# -- bounded memory --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ncu raw", "ncu details", "nsys stats", "torch trace"])
def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch, name):
    source, _ = EXPORTS[name]
    monkeypatch.setattr(base, "MAX_READ_BYTES", source.stat().st_size - 1)
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: pytest.fail("read whole"))
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, **kw: pytest.fail("read whole"))
    assert "GB is more than kwh reads from one export" in refused(source)


def test_a_giant_row_after_a_valid_header_is_refused_without_reading_the_file_whole(tmp_path, monkeypatch):
    lines = (DATA / "ncu-gpt2-h100/gpt2.raw.csv").read_bytes().splitlines(keepends=True)
    path = tmp_path / "giant.raw.csv"
    with open(path, "wb") as handle:
        handle.writelines(lines[:2])
        for _ in range(6):                                     # 6 MB of one row, no newline
            handle.write(b"x" * (1 << 20))
    monkeypatch.setattr(ncu_csv, "MAX_LINE_BYTES", 2 << 20)
    monkeypatch.setattr(pathlib.Path, "read_bytes", lambda self: pytest.fail("read whole"))
    assert f"{path}:3: a 6 MB line; no ncu export has rows like it" in refused(path)


# -- gzip ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_a_gzipped_export_reads_like_the_plain_one(tmp_path, name):
    source, _ = EXPORTS[name]
    needs(source)
    packed = tmp_path / (source.name + ".gz")
    packed.write_bytes(gzip.compress(source.read_bytes()))
    plain, unpacked = ingest.read(source), ingest.read(packed)
    assert unpacked.path == packed and unpacked.format == plain.format
    for table in ("launches", "metrics", "rules", "timeline", "summaries"):
        a, b = getattr(plain, table), getattr(unpacked, table)
        assert (a is None and b is None) or a.equals(b), table
    assert ingest.read(packed, format=plain.format).format == plain.format


def test_gzip_cut_short_bombs_and_inner_errors_name_the_gz_file(tmp_path, monkeypatch):
    source = DATA / "ncu-gpt2-h100/gpt2.raw.csv"
    data = gzip.compress(source.read_bytes())
    path = tmp_path / "gpt2.raw.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    assert "compressed file ends early (still being copied, or truncated?)" in refused(path)
    # the content cut mid-row, then compressed whole: the CSV reader's error, naming the .gz file
    path.write_bytes(gzip.compress(source.read_bytes()[:50_000]))
    assert f"{path}:3: file ends in the middle of a row" in refused(path)
    # a small file that decompresses past the limit is stopped at the limit
    path.write_bytes(gzip.compress(source.read_bytes() * 20))
    monkeypatch.setattr(base, "MAX_READ_BYTES", 1 << 20)
    assert "decompresses to more than" in refused(path)
    # gzip holding something else
    path.write_bytes(gzip.compress(b"hello\n"))
    assert "gzip-compressed, but what it holds is not a recognised export" in refused(path)


def test_a_gzipped_export_is_ingested_from_a_folder(tmp_path):
    from kwarehouse.jobs import ingest as ingest_job
    from kwarehouse.store.warehouse import Warehouse
    folder = tmp_path / "runs" / "gpt2"
    shutil.copytree(DATA / "ncu-gpt2-h100", folder)
    for name in ("gpt2.raw.csv", "gpt2.details.csv", "gpt2.raw.mangled.csv", "gpt2.details.mangled.csv"):
        (folder / (name + ".gz")).write_bytes(gzip.compress((folder / name).read_bytes()))
        (folder / name).unlink()
    report = ingest_job.ingest([tmp_path / "runs"], Warehouse(tmp_path / "wh"))
    assert report.failed == [] and [r.kernels for r in report.runs] == [3]
    assert not list(tmp_path.glob("runs/**/kwh-gunzip-*"))


def test_a_complete_raw_page_saved_without_its_final_newline_is_read(tmp_path):
    """Every field of the last row is there and closed: a complete file, not a cut one."""
    full = (DATA / "ncu-gpt2-h100" / "gpt2.raw.csv").read_bytes()
    whole = cut(DATA / "ncu-gpt2-h100" / "gpt2.raw.csv", tmp_path / "whole.raw.csv", len(full) - 1)
    assert rows(ingest.read(whole)) == rows(ingest.read(DATA / "ncu-gpt2-h100" / "gpt2.raw.csv"))
    short = cut(DATA / "ncu-gpt2-h100" / "gpt2.raw.csv", tmp_path / "short.raw.csv", len(full) - 3)
    assert "middle of a row" in refused(short)


@pytest.mark.parametrize("source", [DATA / "verdicts-ncu-h100/gpt2/gpt2.details.csv",
                                    DATA / "ncu-rtx5090-details/ncu-details-with-rules_rtx5090-cc12.0_llm-perf-opt-kernel0001.csv"],
                         ids=["h100", "rtx5090"])
def test_every_row_end_cut_of_a_one_launch_details_page_is_refused_or_ends_a_section(tmp_path, source):
    """Issue 32: a page of one launch cut inside it was read as complete (28 of 73 metric rows, exit 0):
    no other launch shows what a whole one holds. Now every cut at a row end is refused as cut short,
    except where it falls between two sections (or inside the rows the user chose with --metrics),
    which a page exported with fewer sections also looks like."""
    lines = source.read_bytes().splitlines(keepends=True)
    sections = ingest.read(source).metrics["section"].to_list()
    section_ends = {i + 1 for i in range(len(sections)) if i + 1 == len(sections) or sections[i + 1] != sections[i]}
    path = tmp_path / source.name
    refused_cuts = 0
    for kept in range(2, len(lines)):
        path.write_bytes(b"".join(lines[:kept]))
        try:
            read = ingest.read(path).metrics.height
        except InputError as exc:
            assert "cut short" in str(exc), str(exc)
            refused_cuts += 1
            continue
        assert read in section_ends or sections[read - 1] == "Command line profiler metrics", (kept, read)
    assert refused_cuts > len(lines) // 2
