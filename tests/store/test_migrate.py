"""A warehouse an older kwh wrote (tests/data/warehouse-156c717: kwh at commit 156c717, before
kernel_summaries kept the grid as numbers) is upgraded in place by the next writer, all of a table's
files in one commit, and answers what the older kwh answered; until then readers say what they read
as unknown; a migration that cannot finish leaves the old files readable as they were."""

from __future__ import annotations

import tarfile

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import check, lock, migrate
from kwarehouse.store.files import current_schema_mark
from kwarehouse.store.layout import WRITER_LOCK
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA

OLD = DATA / "warehouse-156c717"


@pytest.fixture
def old_warehouse(tmp_path):
    root = tmp_path / "wh"
    root.mkdir()
    with tarfile.open(OLD / "warehouse.tar.xz") as archive:
        # keeps each file's _files/ hard link (the filter argument exists from Python 3.11.4)
        archive.extractall(root, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
    return root


def _rows(warehouse: Warehouse, query: str) -> pl.DataFrame:
    con = warehouse.connect()
    try:
        return con.sql(query).pl()
    finally:
        con.close()


def _expected(name: str) -> pl.DataFrame:
    return pl.read_parquet(OLD / "expected" / f"{name}.parquet")


def _summary_files(root) -> list[str]:
    return sorted(p.name for p in (root / "kernel_summaries").rglob("*.parquet"))


GRID = ("SELECT model, gpu, grid_x, grid_y, grid_z, block_x, block_y, block_z, CAST(launches AS DOUBLE) AS launches, "
        "gpu_time_ns FROM kernel_time")


def test_a_reader_that_cannot_write_says_what_it_reads_as_unknown(old_warehouse):
    warnings = []
    warehouse = Warehouse(old_warehouse, warn=warnings.append)
    with lock.hold(old_warehouse, WRITER_LOCK, "writer", None, print):     # another writer is busy
        shapes = _rows(warehouse, GRID + " WHERE model = 'nsys-stats-derived-a100' AND gpu = 'unknown'")
    assert shapes["grid_x"].null_count() == shapes.height      # the summary's "(2, 1, 1)" is not parsed in SQL
    assert any("4 file(s) were written by an older kwh (kernel_summaries)" in w and "kwh check --repair" in w
               for w in warnings)
    assert migrate.outdated(warehouse.snapshot())


def test_a_reader_free_to_write_upgrades_first_and_says_so(old_warehouse):
    """A reader publishes a stale warehouse.duckdb when no writer is busy; it upgrades first, so that
    the file it publishes (which later readers answer from without looking further) holds no unknowns."""
    warnings = []
    warehouse = Warehouse(old_warehouse, warn=warnings.append)
    shapes = _rows(warehouse, GRID + " WHERE model = 'nsys-stats-derived-a100' AND grid_x IS NOT NULL")
    assert len(shapes) == 2 and set(shapes["grid_x"]) == {2}
    assert any(w.startswith("upgraded 4 kernel_summaries file(s)") for w in warnings), warnings
    assert not any("read as unknown" in w for w in warnings)
    assert migrate.outdated(warehouse.snapshot()) == {}
    again = []      # the next reader answers from the published file: the older kwh's rows, no warning
    new_time = _rows(Warehouse(old_warehouse, warn=again.append), f"{GRID} ORDER BY ALL")
    assert_frame_equal(new_time, _expected("kernel_time").select(new_time.columns).sort(pl.all(), nulls_last=True))
    assert again == []


def test_the_next_writer_upgrades_the_files_and_the_answers_are_the_older_kwhs(old_warehouse):
    before = _summary_files(old_warehouse)
    warehouse = Warehouse(old_warehouse)
    report = ingest_job.ingest([DATA / "torch-trace-custom_cupy"], warehouse)
    assert report.failed == []
    assert report.repairs == ["upgraded 4 kernel_summaries file(s) an older kwh wrote to this kwh's columns "
                              "(grid_x, grid_y, grid_z, block_x, block_y, block_z)"]
    after = _summary_files(old_warehouse)
    mark = current_schema_mark("kernel_summaries")
    assert len(after) == 4 and all(name.endswith(f".{mark}.parquet") for name in after)
    assert not set(after) & set(before)       # the old files left the table folder (retired, not deleted yet)
    assert migrate.outdated(warehouse.snapshot()) == {}
    assert check.check(warehouse).ok

    summaries = _rows(warehouse, "SELECT * EXCLUDE (grid_x, grid_y, grid_z, block_x, block_y, block_z) "
                                 "FROM kernel_summaries ORDER BY ALL")
    assert_frame_equal(summaries, _expected("kernel_summaries"))
    grids = _rows(warehouse, "SELECT grid_dims, grid_x, grid_y, grid_z, block_dims, block_x, block_y, block_z "
                             "FROM kernel_summaries WHERE grid_dims IS NOT NULL")
    assert grids.rows() == [("(2, 1, 1)", 2, 1, 1, "(512, 1, 1)", 512, 1, 1)]
    old_time = _expected("kernel_time")
    new_time = _rows(warehouse, f"{GRID} WHERE model <> 'custom_cupy' ORDER BY ALL")
    assert_frame_equal(new_time, old_time.select(new_time.columns).sort(pl.all(), nulls_last=True))
    assert_frame_equal(_rows(warehouse, "SELECT * FROM metrics ORDER BY ALL"), _expected("metrics"))

    # the next writer finds nothing to upgrade
    assert not any("upgraded" in line for line in check.check(warehouse, repair=True).repaired)
    assert _summary_files(old_warehouse) == after


def test_an_upgrade_that_cannot_finish_leaves_the_old_files_as_they_were(old_warehouse, monkeypatch):
    from kwarehouse.store.files import Stager
    before = _summary_files(old_warehouse)
    written = []

    def full_disk(self, stage, relative, name, chunks):
        if written:
            raise OSError(28, "No space left on device")
        written.append(relative)
        return original(self, stage, relative, name, chunks)

    original = Stager.stage_chunks
    monkeypatch.setattr(Stager, "stage_chunks", full_disk)
    warehouse = Warehouse(old_warehouse)
    report = ingest_job.ingest([DATA / "torch-trace-custom_cupy"], warehouse)
    monkeypatch.undo()
    assert report.failed == [] and len(report.runs) == 1       # the ingest itself went on
    assert len(report.repairs) == 1 and report.repairs[0].startswith("could not upgrade 4 kernel_summaries file(s)")
    assert "No space left on device" in report.repairs[0]
    assert _summary_files(old_warehouse) == before
    assert check.check(warehouse).ok
    # the next writer with room upgrades them (kwh check --repair is one)
    repaired = check.check(warehouse, repair=True).repaired
    assert any(line.startswith("upgraded 4 kernel_summaries file(s)") for line in repaired)
    assert migrate.outdated(warehouse.snapshot()) == {}
