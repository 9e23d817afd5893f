"""tools/compare_warehouses.py: two ingests of the same exports compare equal table by table; a lost
row or a value one float step off is reported with its rows, and the exit status is 1."""

import shutil
import sys
from pathlib import Path

import duckdb

from conftest import DATA, EXPORT_FOLDERS
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store.warehouse import Warehouse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import compare_warehouses  # noqa: E402


def test_two_ingests_of_the_test_exports_are_the_same(pristine_warehouse, tmp_path, capsys):
    again = Warehouse(tmp_path / "again")
    sources = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
    assert ingest_job.ingest(sources, again).failed == []
    assert compare_warehouses.main([str(pristine_warehouse), str(again.root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == list(compare_warehouses.schema_tables())
    assert all(": same " in line for line in lines)
    assert "runs: same" in lines[0] and "(not compared: ingested_at)" in lines[0]
    assert any(line.startswith("kernels: same") and not line.startswith("kernels: same 0 ") for line in lines)


def test_a_lost_row_and_a_changed_value_are_differences(pristine_warehouse, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(pristine_warehouse, copy)
    # one kernels file rewritten without its first launch and with every duration one float step up:
    # floats compare exactly
    part = next((copy / "kernels").rglob("*.parquet"))
    changed_file = tmp_path / "changed.parquet"
    # a connection of its own: a result left on DuckDB's default connection breaks later tests that use it
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT * REPLACE (nextafter(duration_ns, 1e300) AS duration_ns) FROM read_parquet('{part}') "
                    f"WHERE launch_id > (SELECT min(launch_id) FROM read_parquet('{part}'))) TO '{changed_file}' (FORMAT parquet)")
        rows = con.execute(f"SELECT count(*) FROM read_parquet('{part}')").fetchall()[0][0]
    for linked in copy.rglob(part.name):     # the table folder and _files/ hold links of one file
        linked.unlink()
        shutil.copy(changed_file, linked)
    Warehouse(copy).refresh_duckdb()    # its views name the copy's files

    same, lines = compare_warehouses.compare(pristine_warehouse, copy, tables=["runs", "kernels"], show=1)
    assert not same
    assert lines[0].startswith("runs: same ")
    assert lines[1].startswith("kernels: DIFFERENT: ") and f"; {rows} only in A, {rows - 1} only in B" in lines[1]
    assert lines[2].startswith("  only in A: {'run_id': ") and lines[3].startswith("  only in B: {'run_id': ")
    assert len(lines) == 4
    assert compare_warehouses.main([str(pristine_warehouse), str(copy), "--tables", "kernels"]) == 1
    assert compare_warehouses.main([str(pristine_warehouse), str(copy), "--tables", "runs"]) == 0
    capsys.readouterr()
