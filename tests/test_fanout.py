"""kwh ingest --jobs N: folders read and normalized in worker processes, committed by the driver,
give exactly the warehouse a one-process ingest gives, in every case where the driver must step in."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import DATA, EXPORT_FOLDERS, warehouse_rows
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.build.report import IngestReport
from kwarehouse.jobs import fanout
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

SOURCES = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]


def _both(tmp_path: Path, steps, fan_out) -> tuple[Warehouse, Warehouse, list, list]:
    """Run the same ingest steps [(sources, options)] one-process and fanned out."""
    alone, fanned = Warehouse(tmp_path / "alone"), Warehouse(tmp_path / "fanned")
    reports_alone, reports_fanned = [], []
    for sources, options in steps:
        reports_alone.append(ingest_job.ingest(sources, alone, **options))
        reports_fanned.append(ingest_job.ingest(sources, fanned, fan_out=fan_out, **options))
    return alone, fanned, reports_alone, reports_fanned


def _same_reports(one: IngestReport, other: IngestReport) -> None:
    assert [(r.run_id, r.model, r.gpu, r.kernels, r.new) for r in one.runs] == \
           [(r.run_id, r.model, r.gpu, r.kernels, r.new) for r in other.runs]
    assert one.failed == other.failed
    assert one.skipped == other.skipped


@pytest.fixture(scope="module")
def two_processes():
    return fanout.process_pool(2)


def test_two_processes_equal_one(pristine_warehouse, tmp_path, two_processes):
    fanned = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest(SOURCES, fanned, fan_out=two_processes)
    assert not report.failed and len(report.runs) == 25
    assert warehouse_rows(fanned) == warehouse_rows(Warehouse(pristine_warehouse))
    assert list(fanned.staging.glob("*")) == []


def test_bad_files_are_reported_alike(tmp_path, two_processes):
    alone, fanned, (one,), (other,) = _both(tmp_path, [([DATA / "bad", DATA / "ncu-gtx1080-raw"], {})], two_processes)
    assert len(one.failed) >= 5
    _same_reports(one, other)
    assert warehouse_rows(alone) == warehouse_rows(fanned)


def test_pages_added_to_a_committed_run_are_merged_by_the_driver(tmp_path, two_processes):
    """The raw page goes in first; the details page, ingested fanned out later, joins its run."""
    folder = tmp_path / "src" / "gpt2"
    shutil.copytree(DATA / "ncu-gpt2-h100", folder)
    steps = [([folder / "gpt2.raw.csv"], {}), ([folder], {"tags": {"branch": "main"}})]
    alone, fanned, reports_alone, reports_fanned = _both(tmp_path, steps, two_processes)
    for one, other in zip(reports_alone, reports_fanned):
        _same_reports(one, other)
    assert reports_fanned[1].runs[0].new is False
    assert warehouse_rows(alone) == warehouse_rows(fanned)
    assert list(fanned.staging.glob("*")) == []


def test_content_repeated_in_another_folder_is_skipped_alike(tmp_path, two_processes):
    first, second = tmp_path / "src" / "a", tmp_path / "src" / "b"
    shutil.copytree(DATA / "ncu-gpt2-h100", first)
    shutil.copytree(DATA / "ncu-gpt2-h100", second)
    alone, fanned, (one,), (other,) = _both(tmp_path, [([tmp_path / "src"], {})], two_processes)
    assert any("same content as another file" in why for _, why in other.skipped)
    _same_reports(one, other)
    assert warehouse_rows(alone) == warehouse_rows(fanned)


def test_second_ingest_skips_everything(tmp_path, two_processes):
    steps = [([DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2"], {})] * 2
    alone, fanned, reports_alone, reports_fanned = _both(tmp_path, steps, two_processes)
    assert reports_fanned[1].runs == []
    assert all(why.startswith("already ingested") for _, why in reports_fanned[1].skipped)
    _same_reports(reports_alone[1], reports_fanned[1])


def test_a_failing_fan_out_commits_nothing_and_leaves_nothing(tmp_path):
    """Workers staged a folder, then the job failed: no run is visible and the writer clears its staging."""
    warehouse = Warehouse(tmp_path / "wh")

    def dies_after_staging(jobs, context):
        for job in jobs:
            fanout.prepare_folder(job, context)
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse, fan_out=dies_after_staging)
    assert warehouse.runs() == []
    assert not any(warehouse.root.rglob("*.parquet"))
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse)
    assert len(report.runs) == 1 and not any(warehouse.staging.rglob("*.parquet"))


# A driver killed (os._exit: no cleanup runs) after its workers staged a folder.
KILLED_AFTER_STAGING = """
import os, sys
from pathlib import Path
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import fanout
from kwarehouse.store.warehouse import Warehouse

def dies_after_staging(jobs, context):
    for job in jobs:
        fanout.prepare_folder(job, context)
    os._exit(9)

ingest_job.ingest([Path(sys.argv[2])], Warehouse(sys.argv[1]), fan_out=dies_after_staging)
"""


def test_cli_jobs(tmp_path):
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "ingest", "--jobs", "2",
                                       str(DATA / "ncu-gpt2-h100"), str(DATA / "torch-trace-gpt2")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("ingested 2 run(s)")


def test_an_ingest_with_nothing_new_still_clears_leftovers(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse)
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_STAGING, str(warehouse.root),
                             str(DATA / "torch-trace-gpt2")], capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    assert warehouse.has_leftovers() and any(warehouse.staging.rglob("*.parquet"))
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse)
    assert report.runs == [] and any("staged file(s)" in line for line in report.repairs)
    assert not warehouse.has_leftovers() and not any(warehouse.staging.rglob("*.parquet"))


def test_a_failed_batch_of_a_job_the_driver_redoes_is_still_said(tmp_path, monkeypatch):
    """A worker's batch that fails goes run by run and says why (IngestReport.fallbacks); when the driver
    then redoes that job because it repeats content of an earlier job, the line was dropped with the
    job's other results: the batch path's failure went unsaid."""
    from kwarehouse import build
    from kwarehouse.settings import Settings

    def broken(*args, **kwargs):
        raise ValueError("a bug of the batch path")
    monkeypatch.setattr(build.batch, "build_ncu_batch", broken)
    drop = tmp_path / "drop"
    for name, source in (("a", "ncu-gpt2-h100"), ("b", "ncu-custom-cupy-h100"), ("c", "ncu-gpt2-h100"),
                         ("d", "ncu-gtx1080-raw")):
        shutil.copytree(DATA / source, drop / name)
    # two folders a job: the second job (c, d) repeats the first's gpt2 pages, so the driver redoes it
    warehouse = Warehouse(tmp_path / "wh", settings=Settings(job_folders=2))
    report = ingest_job.ingest([drop], warehouse, fan_out=lambda jobs, context: (
        fanout.prepare_folder(job, context) for job in jobs))
    assert report.failed == [] and sorted(r.model for r in report.runs) == ["custom_cupy", "d", "gpt2"]
    assert len(report.fallbacks) == 2, report.fallbacks
    assert all("building them together failed (ValueError: a bug of the batch path)" in line
               for line in report.fallbacks)
    assert report.fallbacks[1].startswith(f"2 runs ({drop / 'c'}/")   # the second job's: c and d
