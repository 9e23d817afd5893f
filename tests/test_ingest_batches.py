"""kwh ingest builds the new runs of ncu exports in batches (build/batch.py, build_ncu_batch: one vectorized pass
over many runs, one Parquet file per table and partition, one catalog transaction). The rows must equal
a run-by-run ingest's, and a batch that fails must not cost the other runs of it."""

from __future__ import annotations

from conftest import DATA, EXPORT_FOLDERS, warehouse_rows
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse import build
from kwarehouse.errors import InputError
from kwarehouse.settings import Settings
from kwarehouse.store.warehouse import Warehouse

SOURCES = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]


def test_batches_equal_run_by_run(pristine_warehouse, tmp_path):
    """The pristine warehouse is ingested in batches; one run per batch takes the run-by-run path."""
    alone = Warehouse(tmp_path / "alone", settings=Settings(batch_runs=1))
    report = ingest_job.ingest(SOURCES, alone)
    assert report.failed == []
    assert warehouse_rows(alone) == warehouse_rows(Warehouse(pristine_warehouse))


def test_a_failing_batch_commits_its_runs_one_by_one(pristine_warehouse, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a run no batch can take")

    monkeypatch.setattr(build.batch, "build_ncu_batch", broken)
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest(SOURCES, warehouse)
    assert report.failed == []
    assert warehouse_rows(warehouse) == warehouse_rows(Warehouse(pristine_warehouse))


def test_a_bad_run_in_a_batch_fails_alone(tmp_path, monkeypatch):
    """A run whose build fails in the batch is one line in report.failed; the other runs go in."""
    real = build.run.build_run
    folders = [DATA / "ncu-gpt2-h100", DATA / "ncu-gtx1080-raw"]

    def bad_for_gpt2(run_id, members, *args, **kwargs):
        if "gpt2" in str(members[0].folder):
            raise InputError(members[0].folder, "a bad run")
        return real(run_id, members, *args, **kwargs)

    def broken(runs, *args, **kwargs):
        if any("gpt2" in str(members[0].folder) for _, members in runs):
            raise InputError(runs[0][1][0].folder, "a bad run")
        raise AssertionError("not reached")

    monkeypatch.setattr(build.run, "build_run", bad_for_gpt2)
    monkeypatch.setattr(build.batch, "build_ncu_batch", broken)
    report = ingest_job.ingest(folders, Warehouse(tmp_path / "wh"))
    assert len(report.failed) == 1 and "a bad run" in report.failed[0]
    assert len(report.runs) == 1 and "gtx1080" in report.runs[0].files[0]


def test_commit_behind_reports_and_stores_as_one_after_the_other(tmp_path):
    """Batches committed in a thread while the next folders are read (Settings.commit_behind) give the
    report, line for line and in order, and the rows of committing each batch before reading on: with
    runs, a copy of an export (skipped), a bad export (failed) and a warehouse file in several batches."""
    import shutil
    drop = tmp_path / "drop"
    for source in SOURCES:
        shutil.copytree(source, drop / source.name)
    first_csv = next(p for p in sorted((drop / SOURCES[0].name).iterdir()) if p.suffix == ".csv")
    (drop / "zz-copy").mkdir()
    shutil.copy(first_csv, drop / "zz-copy" / first_csv.name)
    (drop / "m-bad").mkdir()
    (drop / "m-bad" / "broken.csv").write_text('"ID","Kernel Name"\n"0"\n')
    answers = {}
    for behind in (False, True):
        warehouse = Warehouse(tmp_path / f"wh-{behind}", settings=Settings(batch_runs=2, commit_behind=behind))
        report = ingest_job.ingest([drop], warehouse)
        answers[behind] = ([(r.run_id, r.files, r.kernels) for r in report.runs], report.skipped, report.failed,
                           warehouse_rows(warehouse))
    runs, skipped, failed, _ = answers[True]
    assert len(runs) > 2 * 2 and failed and "broken.csv" in failed[0]
    assert any("same content" in why for _, why in skipped)
    assert answers[True] == answers[False]


def test_a_warehouse_failure_stops_the_ingest_at_that_batch(tmp_path, monkeypatch):
    """Writing the second batch fails (disk full): the ingest stops with one error and keeps exactly the
    first batch, as one-after-the-other does, although later batches were already read and built."""
    import errno

    import pytest

    from kwarehouse.errors import KwhError
    from kwarehouse.store.session import WriteSession
    real = WriteSession.stage_runs
    kept = {}
    for behind in (False, True):
        calls = []

        def full_disk_second_time(self, runs):
            calls.append(len(runs))
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(self, runs)

        monkeypatch.setattr(WriteSession, "stage_runs", full_disk_second_time)
        warehouse = Warehouse(tmp_path / f"wh-{behind}", settings=Settings(batch_runs=2, commit_behind=behind))
        with pytest.raises(KwhError, match="No space left"):
            ingest_job.ingest(SOURCES, warehouse)
        monkeypatch.setattr(WriteSession, "stage_runs", real)
        kept[behind] = sorted(run_id for run_id, _, _ in warehouse.runs())
        assert len(calls) == 2 and len(kept[behind]) == calls[0]
    assert kept[True] == kept[False]


def test_reading_waits_for_a_commit_that_replaces_a_partial_run(tmp_path):
    """A commit that replaces a partial run deletes that run's files from the catalog: a copy of one of
    them in a later folder must then go in, as one-after-the-other does, not be skipped as already
    ingested because it was read while that commit ran (found by a reviewer of the overlapped ingest)."""
    import shutil
    gpt2 = DATA / "ncu-gpt2-h100"
    answers = {}
    for behind in (False, True):
        drop = tmp_path / "drop"   # the same paths both times: run ids name their folders
        shutil.rmtree(drop, ignore_errors=True)
        first, later = drop / "a-gpt2", drop / "b-copy"
        first.mkdir(parents=True)
        shutil.copy(gpt2 / "manifest.ncu.json", first)
        full = (gpt2 / "gpt2.raw.csv").read_bytes()
        for name in ("gpt2.raw.csv", "gpt2.raw.mangled.csv"):   # both still arriving, cut at the same row
            (first / name).write_bytes(b"".join((gpt2 / name).read_bytes().splitlines(keepends=True)[:-1]))
        warehouse = Warehouse(tmp_path / f"wh-{behind}", settings=Settings(batch_runs=1, commit_behind=behind))
        partial = ingest_job.ingest([drop], warehouse).runs
        assert len(partial) == 1 and len(partial[0].files) == 2
        (first / "gpt2.raw.csv").write_bytes(full)                  # complete now; the other page moved on
        later.mkdir()
        shutil.copy(gpt2 / "manifest.ncu.json", later)
        (first / "gpt2.raw.mangled.csv").rename(later / "gpt2.raw.mangled.csv")
        report = ingest_job.ingest([drop], warehouse)
        answers[behind] = ([(r.run_id, r.files, r.replaced) for r in report.runs], report.skipped, report.failed)
        assert [r.replaced for r in report.runs] == [[partial[0].run_id], []], report
    assert answers[True] == answers[False]


def test_the_threads_of_one_ingest_wait_for_each_others_catalog_statements(tmp_path):
    """--wait 0 is about another writer's lock: SQLite still waits OWN_BUSY_SECONDS for a statement of
    this process's commit thread (a reader found 4 of 14 overlapped ingests failing at wait 0 before)."""
    from kwarehouse.store import layout
    assert Warehouse(tmp_path / "wh", wait=0)._busy_timeout == layout.OWN_BUSY_SECONDS
    assert Warehouse(tmp_path / "wh", wait=30)._busy_timeout == 30
