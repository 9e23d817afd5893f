"""kwh check compares the table folders, which globbing readers (polars, pyarrow, DuckDB read_parquet,
Spark) read, with the catalog: a committed file missing from its folder (its _files/ link remains),
a file there that differs from the committed one, and a replaced file still there are each named;
--repair relinks them from _files/ and deletes nothing it cannot prove kwh wrote."""

from __future__ import annotations

import shutil

import duckdb
import polars as pl
import pytest
import sqlalchemy as sa
from conftest import DATA, rows

from kwarehouse.jobs import compact as compact_job
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import catalog, check, layout
from kwarehouse.store.warehouse import Warehouse


def globbed_kernels(warehouse: Warehouse, table: str = "kernels") -> int:
    """A table's rows as a reader that globs its table folder counts them."""
    return pl.scan_parquet(f"{warehouse.root}/{table}/**/*.parquet", hive_partitioning=True).select(pl.len()).collect().item()


@pytest.fixture
def two_runs(tmp_path) -> Warehouse:
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse).failed == []
    assert ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd").failed == []
    assert globbed_kernels(warehouse) == rows(warehouse, "SELECT count(*) FROM kernels")[0][0] == 6
    return warehouse


def committed_kernel_files(warehouse: Warehouse) -> list[str]:
    return sorted(warehouse.snapshot().files["kernels"])


def test_a_file_deleted_from_its_table_folder_is_named_and_relinked(two_runs):
    warehouse = two_runs
    lost = committed_kernel_files(warehouse)[0]
    (warehouse.root / lost).unlink()               # its _files/ link remains: kwh's views still read it
    assert globbed_kernels(warehouse) < 6
    found = check.check(warehouse)
    assert not found.ok
    assert [p for p in found.problems if lost in p] == [
        f"{lost}: missing from its table folder (its {layout.FILES}/ link still holds it): readers that glob "
        "the table folders miss its rows; kwh check --repair puts it back"]
    repaired = check.check(warehouse, repair=True)
    assert repaired.ok, repaired.problems
    assert any(lost in line and "back in its table folder" in line for line in repaired.repaired)
    assert globbed_kernels(warehouse) == 6
    assert (warehouse.root / lost).samefile(warehouse.root / layout.FILES / lost)


def test_a_changed_file_in_a_table_folder_is_named_and_set_aside(two_runs):
    warehouse = two_runs
    first, second = committed_kernel_files(warehouse)
    target = warehouse.root / first
    target.unlink()
    shutil.copyfile(warehouse.root / second, target)     # another run's rows under this file's name
    found = check.check(warehouse)
    assert [p for p in found.problems if first in p] == [
        f"{first}: differs from the committed file (its {layout.FILES}/ link): readers that glob the table "
        "folders read other rows; kwh check --repair sets it aside and puts the committed file back"]
    repaired = check.check(warehouse, repair=True)
    assert repaired.ok, repaired.problems
    kept = list((warehouse.root / "_quarantine").iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == (warehouse.root / second).read_bytes()   # set aside, not deleted
    assert target.samefile(warehouse.root / layout.FILES / first)
    assert globbed_kernels(warehouse) == 6


def test_an_identical_copy_in_a_table_folder_is_no_problem(two_runs):
    warehouse = two_runs
    first = committed_kernel_files(warehouse)[0]
    target = warehouse.root / first
    data = target.read_bytes()
    target.unlink()
    target.write_bytes(data)           # restored from a backup: another inode, the same bytes
    assert check.check(warehouse).ok


def test_a_replaced_file_left_in_its_table_folder_is_named_and_taken_out(two_runs):
    warehouse = two_runs
    ingest_job.ingest([DATA / "torch-trace-gpt2"], warehouse)     # a second file in the gpt2 partition
    compact_job.compact(warehouse)
    with warehouse.reader.connect() as con:
        retired = sorted(con.execute(sa.select(catalog.catalog_retired.c.path)).scalars())
    table = retired[0].split("/")[0]
    count = f"SELECT count(*) FROM {table}"
    # a crash between the compaction's commit and taking the replaced file out of its folder
    (warehouse.root / retired[0]).hardlink_to(warehouse.root / layout.FILES / retired[0])
    assert globbed_kernels(warehouse, table) > rows(warehouse, count)[0][0]
    found = check.check(warehouse)
    assert [p for p in found.problems if retired[0] in p] == [
        f"{retired[0]}: replaced, but still in its table folder: readers that glob the table folders count "
        "its rows twice; kwh check --repair takes it out"]
    repaired = check.check(warehouse, repair=True)
    assert repaired.ok and any(retired[0] in line for line in repaired.repaired), repaired
    assert not (warehouse.root / retired[0]).exists()
    assert globbed_kernels(warehouse, table) == rows(warehouse, count)[0][0]


def test_duckdb_and_pyarrow_globs_agree_with_kwh_after_the_repair(two_runs):
    import pyarrow.dataset as ds
    warehouse = two_runs
    for path in committed_kernel_files(warehouse):
        (warehouse.root / path).unlink()
    assert not check.check(warehouse).ok
    assert check.check(warehouse, repair=True).ok
    dataset = ds.dataset(warehouse.root / "kernels", format="parquet", partitioning="hive")
    assert dataset.count_rows() == 6
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{warehouse.root}/kernels/**/*.parquet')").fetchall() == [(6,)]
