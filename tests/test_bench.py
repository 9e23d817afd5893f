"""The benchmark keeps working: bench/run.py at its smallest size (timings are only printed, never asserted).
Spark is left out here (tests/test_spark.py checks it); it took three quarters of this test's time. So are the
queries before compaction (the same code as after), all but one start of each CLI command and all but one warm
run of each view and query (five took 18 of its 30 CPU-s)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "run.py"


def test_bench_runs_at_its_smallest_size(tmp_path):
    pytest.importorskip("pandas")
    # the baselines whose rows are checked below (the parse floor's and DuckDB's count rows, ~4.5 CPU-s, are not)
    result = subprocess.run([sys.executable, str(BENCH), "--sizes", "1", "--no-spark", "--cli-repeat", "1",
                             "--uncompacted-max", "0", "--query-repeat", "1", "--baselines", "pandas,pandas_strings,duckdb_pivot",
                             "--results", str(tmp_path / "r.md")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    text = (tmp_path / "r.md").read_text()
    assert "| 1 |" in text and "view roofline" in text and "query most_popular_kernels" in text
    assert "table gpu_peaks" in text
    assert "| a pandas script: details page -> numbers -> pivot -> Parquet per run (the script a user writes) | " in text
    assert "| the same pandas script keeping values as strings" in text and "| kwh --help | " in text
    assert "kwh / pandas (numeric), kwh / pandas (strings), kwh / DuckDB PIVOT" in text
