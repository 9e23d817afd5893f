"""Content decides (issue 21): every file under an ingested folder is sniffed; names only say what a
file that no reader claims is (run metadata, a note or log skipped by kind, or a broken export)."""

from __future__ import annotations

import shutil

import pytest

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.build.report import IngestReport
from kwarehouse.build import sources
from kwarehouse.errors import InputError
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA, rows

CAPTURE = DATA / "ncu-cupy-h100-stdout/stdout.details.csv"   # real `ncu --csv ... > file 2>&1`


def _folder(tmp_path, *names):
    folder = tmp_path / "runs" / "cupy"
    folder.mkdir(parents=True)
    shutil.copy(DATA / "ncu-cupy-h100-stdout/ncu_version.txt", folder)
    shutil.copy(DATA / "ncu-gpt2-h100/manifest.ncu.json", folder)
    for name in names:
        shutil.copy(CAPTURE, folder / name)
    return folder


@pytest.mark.parametrize("name", ["profile.txt", "ncu.log"])
def test_a_capture_saved_as_txt_or_log_is_read_like_the_csv(tmp_path, name):
    folder = _folder(tmp_path, name)
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert report.ok and report.skipped == []
    assert [(r.kernels, [f.rsplit("/", 1)[-1] for f in r.files]) for r in report.runs] == [(3, [name])]
    as_csv = Warehouse(tmp_path / "csv")
    ingest_job.ingest([_folder(tmp_path / "csv-src", "stdout.details.csv")], as_csv)
    query = "SELECT launch_id, metric, value, value_text FROM metrics ORDER BY ALL"
    assert rows(Warehouse(tmp_path / "wh"), query) == rows(as_csv, query) != []


def test_files_no_reader_claims_are_named_by_kind_and_never_fail(tmp_path):
    folder = _folder(tmp_path, "out.txt")
    shutil.copy(DATA / "README.md", folder / "README.md")                 # notes
    shutil.copy(DATA / "ncu-cupy-h100-stdout/gpu.txt", folder / "gpu.txt")  # tool output kwh does not read
    (folder / "empty.log").touch()
    (folder / "settings.json").write_text('{"note": "not a trace"}\n')
    shutil.copy(DATA / "bad/garbage.bin", folder / "blob.dat")
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert report.ok and [r.kernels for r in report.runs] == [3]
    assert sorted((p.rsplit("/", 1)[-1], why) for p, why in report.skipped) == [
        ("README.md", "not a profiler export (text)"),
        ("blob.dat", "no reader for this kind of file"),
        ("empty.log", "not a profiler export (empty file)"),
        ("gpu.txt", "not a profiler export (text)"),
        ("settings.json", "not a profiler export (JSON)"),
    ]   # manifest.ncu.json and ncu_version.txt are the run's metadata, not skipped files
    # kwh ingest names each of them, binary content included (README, What it reads)
    from click.testing import CliRunner
    from kwarehouse.cli import main
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh2"), "ingest", str(folder)])
    named = sorted(line.split(": ", 1)[0].rsplit("/", 1)[-1] for line in result.output.splitlines()
                   if line.startswith("skipped "))
    assert named == ["README.md", "blob.dat", "empty.log", "gpu.txt", "settings.json"], result.output
    assert result.output.splitlines()[-1].endswith("5 other file(s) ignored, 0 failed")


def test_forced_format_reads_a_txt_capture_but_not_the_notes_beside_it(tmp_path):
    folder = _folder(tmp_path, "out.txt")
    shutil.copy(DATA / "README.md", folder / "README.md")
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"), format="ncu-details-csv")
    assert report.ok and [r.kernels for r in report.runs] == [3]
    assert [why for _, why in report.skipped] == ["not a profiler export (text)"]


def test_a_text_file_named_on_the_command_line_is_still_an_error(tmp_path):
    notes = tmp_path / "notes.txt"
    shutil.copy(DATA / "ncu-cupy-h100-stdout/gpu.txt", notes)
    report = ingest_job.ingest([notes], Warehouse(tmp_path / "wh"))
    assert len(report.failed) == 1 and "notes.txt: not a recognised export" in report.failed[0]
    with pytest.raises(InputError, match="not a recognised export"):
        sources.read_one(notes, True, None, sources.Known.snapshot({}, {}), {}, set(), IngestReport())
