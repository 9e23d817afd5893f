"""warehouse.duckdb opens in the DuckDB shell users install (the duckdb-cli package: an older DuckDB than
the Python package kwh runs on), from any working directory, and after the warehouse was moved."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, rows

from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store.warehouse import Warehouse

SHELL = Path(sys.executable).parent / "duckdb"


# How each view is read. "bind" (the default run): SELECT ... LIMIT 0, which makes the shell parse and bind the
# view whole (its functions, names and the files' schemas) without running it (all views: 0.9 CPU-s against 9.2
# for a count of each, most of it the verdict views' execution on tiny data). "count" (-m slow): every view run.
PROBES = ["bind", pytest.param("count", marks=pytest.mark.slow)]


def probe_sql(name: str, probe: str) -> str:
    return f"SELECT count(*) FROM {name}" if probe == "count" else f"SELECT * FROM {name} LIMIT 0"


def shell(database: Path, sql: str, cwd: Path) -> str:
    done = subprocess.run([str(SHELL), "-readonly", "-csv", "-noheader", str(database), "-c", sql],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Error" not in done.stderr, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not SHELL.exists(), reason="the DuckDB shell (pip install duckdb-cli) is not installed")
@pytest.mark.parametrize("probe", PROBES)
def test_the_duckdb_shell_reads_warehouse_duckdb_even_after_a_move(tmp_path, probe):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2"], warehouse)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert shell(warehouse.duckdb_path, "SELECT count(*) FROM kernels", elsewhere) == "3"
    # every view in one shell (a shell per view cost 1.6 CPU-s more); a view the shell
    # cannot read stops it, and its error names the view
    counts = shell(warehouse.duckdb_path, "; ".join(probe_sql(name, probe) for name in views.all_views()),
                   elsewhere).splitlines()
    if probe == "count":
        assert len(counts) == len(views.all_views()) and all(count.isdigit() for count in counts), counts
    else:   # every view bound, none run: no rows, and no error (shell() checks)
        assert counts == [], counts
    moved = tmp_path / "moved"
    shutil.move(warehouse.root, moved)
    assert rows(Warehouse(moved), "SELECT count(*) FROM kernel_launches WHERE activity = 'kernel'") == [(38,)]
    # the first kwh command on the moved warehouse rebuilt warehouse.duckdb for its new folder
    assert shell(moved / "warehouse.duckdb", "SELECT count(*) FROM runs", elsewhere) == "2"


@pytest.mark.parametrize("probe", PROBES)
def test_harlequin_opens_warehouse_duckdb_with_its_duckdb_adapter(tmp_path, probe):
    """harlequin (the terminal SQL IDE) reads warehouse.duckdb through its DuckDB adapter: the same
    connection its UI opens for `harlequin -r warehouse/warehouse.duckdb`, catalog and query included."""
    adapter = pytest.importorskip("harlequin_duckdb")
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2"], warehouse)
    moved = tmp_path / "moved"
    shutil.move(warehouse.root, moved)
    rows(Warehouse(moved), "SELECT 1")      # any kwh command rebuilds warehouse.duckdb for its new folder
    connection = adapter.DuckDbAdapter((str(moved / "warehouse.duckdb"),), read_only=True).connect()
    assert [item.label for item in connection.get_catalog().items] == ["warehouse"]
    cursor = connection.execute("SELECT count(*) AS n FROM kernels")
    assert cursor.fetchall().column("n").to_pylist() == [3]
    for name in ("kernel_launches", "runs"):
        assert connection.execute(f"SELECT count(*) AS n FROM {name}").fetchall().num_rows == 1, name
    for name in views.all_views():
        result = connection.execute(probe_sql(name, probe)).fetchall()
        assert result.num_rows == (1 if probe == "count" else 0) and result.num_columns >= 1, name
