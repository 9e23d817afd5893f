"""Reliability: concurrent writers, kill -9 during ingest, bad and hostile input, read-only inputs, fuzzing."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import DATA, EXPORT_FOLDERS, rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError, KwhError
from kwarehouse.store.warehouse import Warehouse

SRC = Path(__file__).resolve().parents[2] / "src"


def kwh(*args: str, warehouse: Path, catalog: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC), "KWH_WAREHOUSE": str(warehouse)}
    if catalog:
        env["KWH_CATALOG"] = catalog
    return subprocess.Popen([sys.executable, "-m", "kwarehouse", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def consistent(warehouse: Warehouse) -> None:
    """Every catalogued run has all its tables' rows once; every listed file exists."""
    runs = {r for r, _, _ in warehouse.runs()}
    assert {r for r, in rows(warehouse, "SELECT DISTINCT run_id FROM runs")} == runs
    assert rows(warehouse, "SELECT count(*) - count(DISTINCT run_id) FROM runs") == [(0,)]
    assert {r for r, in rows(warehouse, "SELECT DISTINCT run_id FROM kernels")} <= runs
    assert rows(warehouse, "SELECT count(*) - count(DISTINCT (run_id, launch_id)) FROM kernels") == [(0,)]
    for table in ("runs", "kernels", "metrics"):
        assert all(p.exists() for p in warehouse.committed_files(table))


def test_two_concurrent_ingests_finish_with_exactly_the_expected_rows(warehouse):
    root, catalog = warehouse.root, warehouse.catalog_url
    first = kwh("ingest", str(DATA / "ncu-gpt2-h100"), str(DATA / "ncu-custom-cupy-h100"), warehouse=root, catalog=catalog)
    second = kwh("ingest", str(DATA / "ncu-gpt2-h100"), str(DATA / "ncu-llama-h100-variants"), warehouse=root,
                 catalog=catalog)
    outputs = [p.communicate(timeout=300) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    warehouse = Warehouse(root, catalog)
    consistent(warehouse)
    assert rows(warehouse, "SELECT model, count(DISTINCT run_id), count(*) FROM kernels GROUP BY 1 ORDER BY 1") == [
        ("custom_cupy", 1, 4), ("gpt2", 1, 3), ("llama", 1, 3)]
    # every file recorded once, whichever process got it
    assert rows(warehouse, "SELECT count(*) FROM runs") == [(3,)]


@pytest.mark.parametrize("kills", [6, pytest.param(40, marks=pytest.mark.soak)])
def test_kill_9_at_random_points_always_leaves_a_consistent_warehouse(warehouse, kills):
    root, catalog = warehouse.root, warehouse.catalog_url
    sources = [str(DATA / name) for name in ("ncu-gpt2-h100", "ncu-llama-h100-variants", "ncu-custom-cupy-h100",
                                             "torch-trace-gpt2", "nsys-sqlite-rtx3090")]
    rng = random.Random(20261123)
    for attempt in range(kills):
        process = kwh("ingest", *sources, warehouse=root, catalog=catalog)
        time.sleep(rng.uniform(0.3, 2.5))
        process.send_signal(signal.SIGKILL)
        process.communicate()
        if Warehouse(root, catalog).exists:
            consistent(Warehouse(root, catalog))
    finished = kwh("ingest", *sources, warehouse=root, catalog=catalog)
    out, err = finished.communicate(timeout=300)
    assert finished.returncode == 0, err
    warehouse = Warehouse(root, catalog)
    consistent(warehouse)
    assert rows(warehouse, "SELECT tool, count(*) FROM runs GROUP BY 1 ORDER BY 1") == [
        ("ncu", 3), ("nsys", 1), ("torch", 1)]
    # nothing left behind that the catalog does not know (retired files aside)
    assert not (root / "_staging").exists() or not any((root / "_staging").rglob("*"))


# -- hostile input -------------------------------------------------------------------------------

def test_locale_formatted_numbers_are_refused(tmp_path):
    """In every launch (one launch so is left out with a warning: tests/test_ncu_polluted.py)."""
    text = (DATA / "ncu-gpt2-h100/gpt2.raw.csv").read_text()
    path = tmp_path / "locale.raw.csv"
    path.write_text(text.replace('"1,123"', '"1.123.456"', 1).replace('"1,024"', '"1.024.000"'))
    with pytest.raises(InputError, match=r"locale.raw.csv:\d+: numbers are locale-formatted \('1.123.456'\); "
                                         r"re-export \(or re-capture\) with LC_ALL=C"):
        ingest.read(path)


def test_a_100_mb_field_is_refused_in_bounded_time(tmp_path):
    lines = (DATA / "ncu-gpt2-h100/gpt2.raw.csv").read_text().splitlines()
    path = tmp_path / "huge.raw.csv"
    with open(path, "w") as handle:
        handle.write("\n".join(lines[:3]) + "\n")
        cells = lines[3].split('","')
        cells[6] = "x" * (100 << 20)
        handle.write('","'.join(cells) + "\n")
    started = time.monotonic()
    with pytest.raises(InputError, match=r"huge.raw.csv:4: a 100 MB line; no ncu export has rows like it"):
        ingest.read(path)
    assert time.monotonic() - started < 60


def test_sqlite_files_that_are_not_nsys_exports(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    corrupt = tmp_path / "corrupt.sqlite"
    data = bytearray((DATA / "nsys-sqlite-a100/saxpy-mpi-cuda.sqlite").read_bytes())
    data[100:4096] = os.urandom(3996)
    corrupt.write_bytes(bytes(data[:20000]))
    for path in (other, corrupt):
        with pytest.raises(InputError, match=rf"{path.name}: not a recognised export"):
            ingest.read(path)


@pytest.mark.parametrize("model", ["it's; DROP TABLE runs; --", "mod\u00e8le-\u6a21\u578b", "../../etc", "a/b\\c", "\"q\""])
def test_hostile_model_names_and_tags_stay_data(warehouse, tmp_path, model):
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model=model, tags={"note": model})
    assert report.failed == []
    assert rows(warehouse, "SELECT DISTINCT model FROM kernels") == [(model,)]
    assert rows(warehouse, "SELECT tags['note'] FROM runs") == [(model,)]
    for path in warehouse.root.rglob("*"):
        assert warehouse.root in path.resolve().parents or path.resolve() == warehouse.root


def test_a_symlink_loop_in_the_input_folder_is_not_followed(warehouse, tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(DATA / "ncu-gpt2-h100", folder / "gpt2")
    (folder / "gpt2" / "loop").symlink_to(folder, target_is_directory=True)
    report = ingest_job.ingest([folder], warehouse)
    assert report.failed == [] and [r.kernels for r in report.runs] == [3]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_is_named(warehouse, tmp_path):
    path = tmp_path / "secret.raw.csv"
    shutil.copy(DATA / "ncu-gpt2-h100/gpt2.raw.csv", path)
    path.chmod(0)
    report = ingest_job.ingest([path], warehouse)
    assert report.failed == [f"{path}: file is not readable; check its permissions"]


def test_inputs_are_never_modified_or_accompanied(ingested, tmp_path):
    """Every fixture export, ingested from a read-only copy: same bytes, same mtime, no new files."""
    copy = tmp_path / "inputs"
    folders = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
    for folder in folders:
        shutil.copytree(folder, copy / folder.name)
    def state():
        return {p.relative_to(copy).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
                for p in sorted(copy.rglob("*")) if p.is_file()}
    for path in sorted(copy.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    before = state()
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([copy], warehouse)
    assert report.failed == []
    assert state() == before
    for path in sorted(copy.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)


# -- fuzzing -------------------------------------------------------------------------------------

SEEDS = [DATA / "ncu-gpt2-h100/gpt2.raw.csv", DATA / "ncu-gpt2-h100/gpt2.details.csv",
         DATA / "torch-trace-custom_cupy/trace.json", DATA / "nsys-stats-rtx5090/summary_cuda_gpu_kern_sum.csv"]


def _read_or_refuse(path: Path) -> None:
    try:
        result = ingest.read(path)
    except KwhError:
        return
    assert result.path == path


@settings(max_examples=60, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096), suffix=st.sampled_from([".csv", ".json", ".sqlite", ".ncu-rep", ".bin"]))
def test_any_bytes_give_a_table_or_a_clean_error(tmp_path, data, suffix):
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    before = sorted(tmp_path.iterdir())
    _read_or_refuse(path)
    assert sorted(tmp_path.iterdir()) == before


@settings(max_examples=80, deadline=20_000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.sampled_from(SEEDS), cut=st.integers(min_value=0, max_value=30_000),
       noise=st.binary(min_size=0, max_size=64), where=st.floats(min_value=0, max_value=1))
def test_damaged_real_exports_give_a_table_or_a_clean_error(tmp_path, seed, cut, noise, where):
    """Real exports truncated and with bytes spliced in: the likely corruptions of real files."""
    data = seed.read_bytes()
    data = data[: max(1, len(data) - cut)]
    at = int(where * len(data))
    path = tmp_path / seed.name
    path.write_bytes(data[:at] + noise + data[at:])
    _read_or_refuse(path)


def test_a_wrong_tool_export_forced_on_the_ncu_reader_is_refused():
    with pytest.raises(InputError, match=r'summary_cuda_gpu_kern_sum.csv: no ncu CSV header \("ID","Process ID",...\) found'):
        ingest.read(DATA / "nsys-stats-rtx5090/summary_cuda_gpu_kern_sum.csv", format="ncu-raw-csv")
    with pytest.raises(InputError, match=r"trace.json: unreadable SQLite database \(file is not a database\)"):
        ingest.read(DATA / "torch-trace-custom_cupy/trace.json", format="nsys-sqlite")
