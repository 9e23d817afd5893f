"""kwh ingest builds the new runs of ncu exports in batches (pipeline.build_ncu_batch: one vectorized pass
over many runs, one Parquet file per table and partition, one catalog transaction). The rows must equal
a run-by-run ingest's, and a batch that fails must not cost the other runs of it."""

from __future__ import annotations

from conftest import DATA, EXPORT_FOLDERS, warehouse_rows
from kwarehouse import pipeline
from kwarehouse.store import Warehouse

SOURCES = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]


def test_batches_equal_run_by_run(pristine_warehouse, tmp_path, monkeypatch):
    """The pristine warehouse is ingested in batches; one run per batch takes the run-by-run path."""
    monkeypatch.setattr(pipeline, "BATCH_RUNS", 1)
    alone = Warehouse(tmp_path / "alone")
    report = pipeline.ingest(SOURCES, alone)
    assert report.failed == []
    assert warehouse_rows(alone) == warehouse_rows(Warehouse(pristine_warehouse))


def test_a_failing_batch_commits_its_runs_one_by_one(pristine_warehouse, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a run no batch can take")

    monkeypatch.setattr(pipeline, "build_ncu_batch", broken)
    warehouse = Warehouse(tmp_path / "wh")
    report = pipeline.ingest(SOURCES, warehouse)
    assert report.failed == []
    assert warehouse_rows(warehouse) == warehouse_rows(Warehouse(pristine_warehouse))


def test_a_bad_run_in_a_batch_fails_alone(tmp_path, monkeypatch):
    """A run whose build fails in the batch is one line in report.failed; the other runs go in."""
    real = pipeline.build_run
    folders = [DATA / "ncu-gpt2-h100", DATA / "ncu-gtx1080-raw"]

    def bad_for_gpt2(run_id, members, *args, **kwargs):
        if "gpt2" in str(members[0].folder):
            raise pipeline.InputError(members[0].folder, "a bad run")
        return real(run_id, members, *args, **kwargs)

    def broken(runs, *args, **kwargs):
        if any("gpt2" in str(members[0].folder) for _, members in runs):
            raise pipeline.InputError(runs[0][1][0].folder, "a bad run")
        raise AssertionError("not reached")

    monkeypatch.setattr(pipeline, "build_run", bad_for_gpt2)
    monkeypatch.setattr(pipeline, "build_ncu_batch", broken)
    report = pipeline.ingest(folders, Warehouse(tmp_path / "wh"))
    assert len(report.failed) == 1 and "a bad run" in report.failed[0]
    assert len(report.runs) == 1 and "gtx1080" in report.runs[0].files[0]
