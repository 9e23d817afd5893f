"""kwh ingest end to end on real exports: runs, values, idempotence, atomicity, bad input."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import catalog
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA, EXPORT_FOLDERS, rows




def snapshot(warehouse: Warehouse) -> dict:
    """Every table's full contents (sorted) and the committed file list."""
    con = warehouse.connect()
    out = {t: sorted(map(repr, con.execute(f"SELECT * EXCLUDE (ingested_at) FROM {t}" if t == "runs"
                                           else f"SELECT * FROM {t}").fetchall()))
           for t in ("runs", "kernels", "metrics", "rules")}
    out["files"] = sorted(str(p.relative_to(warehouse.root)) for p in warehouse.root.rglob("*.parquet"))
    return out


@pytest.mark.catalog
def test_all_pages_and_variants_of_one_report_are_one_run(warehouse):
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse)
    assert report.failed == []
    assert [(r.model, r.gpu, r.kernels, len(r.files)) for r in report.runs] == [
        ("gpt2", "NVIDIA H100 80GB HBM3", 3, 4)]
    kernels = rows(warehouse, "SELECT launch_id, kernel_name, kernel_mangled, grid_x, block_x, registers_per_thread "
                              "FROM kernels ORDER BY launch_id")
    assert kernels[0] == (0, "void at::vectorized_gather_kernel<16, long>(char *, char *, T2 *, int, long, long, long, long, bool)",
                          "_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb", 1024, 96, 32)
    # metrics: one row per (launch, metric) although four exports carried them
    assert rows(warehouse, "SELECT count(*), count(DISTINCT (launch_id, metric)) FROM metrics") == [(2445, 2445)]
    run = rows(warehouse, "SELECT model, family, task, dtype, batch, seq_len, tool, tool_version, "
                          "compute_capability, run_date::VARCHAR, kernel_count, len(source_files) FROM runs")
    assert run == [("gpt2", "gpt2", "inference", "bf16", 4, 256, "ncu", "2025.3.1.0", "9.0", "2026-11-23", 3, 4)]
    assert rows(warehouse, "SELECT count(*) FROM rules") == [(28,)]


def _raw_cells(path: Path) -> dict[tuple[int, str], tuple[str, str]]:
    with open(path, newline="") as handle:
        table = list(csv.reader(handle))
    names, units = table[0], table[1]
    return {(int(r[0]), n): (u, v) for r in table[2:] for n, u, v in zip(names, units, r)}


@pytest.mark.parametrize("metric,unit,factor", [
    ("dram__bytes_read.sum", "Mbyte", 1e6),
    ("gpu__time_duration.sum", "us", 1e3),
    ("dram__bytes.sum.per_second", "Tbyte/s", 1e12),
    ("launch__shared_mem_config_size", "Kbyte", 1e3),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", 1.0),
    ("gpc__cycles_elapsed.avg.per_second", "Ghz", 1e9),
    # per Kbyte is per 1,000 bytes: 1.591 %/Kbyte is 0.001591 %/byte (ncu --print-units base says 1,591)
    ("derived__pct_occupancy_per_shared_mem_size", "%/Kbyte", 1e-3),
])
def test_warehouse_value_equals_export_value_in_base_units(warehouse, metric, unit, factor):
    ingest_job.ingest([DATA / "ncu-llama-h100-variants/llama.raw.csv"], warehouse)
    cells = _raw_cells(DATA / "ncu-llama-h100-variants/llama.raw.csv")
    stored = dict(((l, v) for l, v in rows(warehouse, f"SELECT launch_id, value FROM metrics WHERE metric = '{metric}'")))
    for launch in (0, 1, 2):
        export_unit, text = cells[(launch, metric)]
        assert export_unit == unit
        assert stored[launch] == pytest.approx(float(text.replace(",", "")) * factor, rel=1e-12)


def test_base_units_export_agrees_with_default_export(tmp_path):
    default, base = Warehouse(tmp_path / "a"), Warehouse(tmp_path / "b")
    ingest_job.ingest([DATA / "ncu-llama-h100-variants/llama.raw.csv"], default)
    ingest_job.ingest([DATA / "ncu-llama-h100-variants/llama.raw.baseunits.csv"], base)
    sql = "SELECT launch_id, metric, unit, value FROM metrics WHERE value IS NOT NULL ORDER BY ALL"
    a, b = rows(default, sql), rows(base, sql)
    assert [r[:3] for r in a] == [r[:3] for r in b]
    cells = _raw_cells(DATA / "ncu-llama-h100-variants/llama.raw.csv")
    for (launch, metric, _, x), (_, _, _, y) in zip(a, b):
        # ncu's base-units page multiplies by a prefix in a denominator (1.591 %/Kbyte -> 1,591 %/byte): the
        # reader undoes it for the metrics ingest/ncu_base_unit_errata.csv names, so the pages agree here too
        # --print-units base rounds to two decimals: agree to that precision
        assert y == pytest.approx(x, rel=1e-3, abs=0.006), metric


def test_headline_columns_match_the_details_page(warehouse):
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.details.csv"], warehouse)
    got = rows(warehouse, "SELECT duration_ns, sm_pct, dram_pct, mem_pct, l1_hit_pct, l2_hit_pct, "
                          "achieved_occupancy_pct, theoretical_occupancy_pct, tensor_pipe_pct, registers_per_thread, "
                          "grid_x, grid_y, grid_z, block_x, block_size FROM kernels WHERE launch_id = 0")[0]
    with open(DATA / "ncu-gpt2-h100/gpt2.details.csv", newline="") as handle:
        cells = {(r[13], r[14]): (r[15], r[16]) for r in csv.reader(handle) if r[0] == "0" and r[14]}
    def value(section, label):
        return float(cells[(section, label)][1].replace(",", ""))
    assert got[0] == value("GPU Speed Of Light Throughput", "Duration") * 1e3   # us -> ns
    assert got[1] == value("GPU Speed Of Light Throughput", "Compute (SM) Throughput")
    assert got[2] == value("GPU Speed Of Light Throughput", "DRAM Throughput")
    assert got[3] == value("GPU Speed Of Light Throughput", "Memory Throughput")
    assert got[4] == value("Memory Workload Analysis", "L1/TEX Hit Rate")
    assert got[5] == value("Memory Workload Analysis", "L2 Hit Rate")
    assert got[6] == value("Occupancy", "Achieved Occupancy")
    assert got[7] == value("Occupancy", "Theoretical Occupancy")
    assert got[8] == value("Command line profiler metrics", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active")
    assert got[9] == value("Launch Statistics", "Registers Per Thread")
    assert got[10:] == (1024, 1, 1, 96, 96)


def test_reingest_changes_nothing_and_says_so(ingested):
    before = snapshot(ingested)
    good = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
    report = ingest_job.ingest(good, ingested)
    assert report.runs == [] and report.failed == []
    exports = [p for folder in good for p in folder.iterdir() if not p.name.startswith(("manifest", "ncu_version", "gpu.txt"))]
    again = [(p, why) for p, why in report.skipped if not p.endswith("gpu.txt")]
    assert len(again) == len(exports)
    assert all(why.startswith("already ingested (run ") for _, why in again)
    # a sidecar kwh does not read is named, by kind, every time
    assert [why for p, why in report.skipped if p.endswith("gpu.txt")] == ["not a profiler export (text)"]
    assert snapshot(ingested) == before


@pytest.mark.catalog
def test_pages_ingested_separately_join_the_same_run(warehouse, tmp_path):
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv"], warehouse)
    first = rows(warehouse, "SELECT run_id, count(*) FROM kernels GROUP BY 1")
    assert rows(warehouse, "SELECT count(*) FROM rules") == [(0,)]
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.details.csv"], warehouse)
    assert [r.new for r in report.runs] == [False]
    assert rows(warehouse, "SELECT run_id, count(*) FROM kernels GROUP BY 1") == first
    assert rows(warehouse, "SELECT count(*) FROM rules") == [(28,)]
    # the details page names its sections: the run's metrics now carry them
    assert rows(warehouse, "SELECT section, label FROM metrics WHERE launch_id = 0 AND metric = 'lts__t_sector_hit_rate.pct'") == [
        ("Memory Workload Analysis", "L2 Hit Rate")]
    # and the result equals ingesting both at once
    together = Warehouse(tmp_path / "together")
    ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv", DATA / "ncu-gpt2-h100/gpt2.details.csv"], together)
    strip = lambda s: {k: v for k, v in s.items() if k not in ("files", "runs")}
    assert strip(snapshot(warehouse)) == strip(snapshot(together))


def test_every_test_export_goes_in(ingested_read_only, golden):
    got = rows(ingested_read_only, "SELECT model, gpu, count(*) FROM kernels GROUP BY ALL")
    golden("kernels_per_model", ["model", "gpu", "kernels"], got)
    columns = [c for c, in rows(ingested_read_only, "SELECT column_name FROM (DESCRIBE kernels)")
               if c not in ("run_id", "nvtx_push_pop", "nvtx_start_end", "process_id", "host_name")]
    golden("kernels", columns, rows(ingested_read_only, f"SELECT {', '.join(columns)} FROM kernels"))


def test_bad_files_are_reported_and_the_good_ones_still_go_in(warehouse, tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(DATA / "bad", folder / "bad")
    shutil.copytree(DATA / "ncu-gpt2-h100", folder / "gpt2")
    report = ingest_job.ingest([folder], warehouse)
    assert [r.model for r in report.runs] == ["gpt2"]
    failed = sorted(line.split(": ", 1)[0].rsplit("/", 1)[-1] for line in report.failed)
    assert failed == ["empty.csv", "no_units_row.raw.csv:2", "short_row.raw.csv:4", "too_many_fields.details.csv:3",
                      "truncated.raw.csv:4"]
    # exports of runs with no CUDA activity: nothing to store, which is not a failure (issue 31)
    assert sorted(e.path.rsplit("/", 1)[-1] for e in report.empty) == ["nsys_no_cuda.sqlite",
                                                                       "nsys_stats_no_kernel_data.txt"]
    assert [why for p, why in report.skipped if p.endswith("garbage.bin")] == ["no reader for this kind of file"]
    assert rows(warehouse, "SELECT count(*) FROM kernels") == [(3,)]


def test_a_bad_manifest_fails_its_folder_with_the_manifest_named(warehouse, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(DATA / "ncu-gpt2-h100/gpt2.raw.csv", folder)
    (folder / "manifest.json").write_text('{"model": "gpt2", "batch": "four"}')
    report = ingest_job.ingest([folder], warehouse)
    assert report.runs == []
    assert report.failed == [f'{folder}/gpt2.raw.csv: its run manifest is unusable: {folder}/manifest.json: '
                             '"batch" must be an integer, not "four"']


def test_model_and_tags_from_options_without_manifest(warehouse):
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd", tags={"team": "sim"})
    assert [(r.model, r.gpu) for r in report.runs] == [("vecadd", "NVIDIA GeForce GTX 1080")]
    assert rows(warehouse, "SELECT tags['team'], tool_version FROM runs") == [("sim", None)]


def test_model_names_cannot_escape_the_warehouse(warehouse, tmp_path):
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="../../etc/x'; DROP TABLE runs;--")
    assert report.failed == []
    assert rows(warehouse, "SELECT DISTINCT model FROM kernels") == [("../../etc/x'; DROP TABLE runs;--",)]
    for path in tmp_path.rglob("*.parquet"):
        assert warehouse.root in path.parents


@pytest.mark.catalog
def test_crash_before_the_catalog_commit_leaves_nothing_visible_and_is_repaired(warehouse, monkeypatch):
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    before = snapshot(warehouse)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed")
    # killed inside the commit transaction, after the files were renamed into their table folders
    monkeypatch.setattr(catalog, "bump_generation", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv"], warehouse)
    monkeypatch.undo()
    # the Parquet files were renamed into place, but no reader sees them: the catalog does not list them
    assert snapshot(Warehouse(warehouse.root, warehouse.catalog_url))["kernels"] == before["kernels"]
    again = ingest_job.ingest([DATA / "ncu-gpt2-h100/gpt2.raw.csv"], warehouse)
    assert any("never committed" in line for line in again.repairs)
    assert rows(warehouse, "SELECT model, count(*) FROM kernels GROUP BY 1 ORDER BY 1") == [("gpt2", 3), ("vecadd", 3)]
    assert len([p for p in warehouse.root.rglob("*.parquet") if not p.relative_to(warehouse.root).parts[0].startswith("_")]) == 8


def test_warehouse_duckdb_works_from_any_directory(ingested_read_only, tmp_path):
    script = ("import duckdb; con = duckdb.connect('%s', read_only=True); "
              "print(con.execute('select count(*) from kernels').fetchall()[0][0])" % ingested_read_only.duckdb_path)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert int(out.stdout) == rows(ingested_read_only, "SELECT count(*) FROM kernels")[0][0]


def test_an_ingest_never_imports_pandas(tmp_path):
    """pyarrow imports pandas, where it is installed, the first time it is handed a Python list (to ask
    whether it is a pandas object): ~0.2 CPU-s of a one-file ingest spent on a package kwh never uses.
    The runs row is built through polars (build.run.one_row), the same row as pyarrow's from_pylist."""
    pytest.importorskip("pandas")
    script = ("import sys; from pathlib import Path; from kwarehouse.jobs import ingest; "
              "from kwarehouse.store.warehouse import Warehouse; "
              f"report = ingest.ingest([Path({str(DATA / 'torch-trace-gpt2')!r}), Path({str(DATA / 'ncu-gpt2-h100')!r}), "
              f"Path({str(DATA / 'ncu-custom-cupy-h100')!r})], Warehouse(Path({str(tmp_path / 'wh')!r}))); "
              "assert len(report.runs) == 3 and not report.failed, report; print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_the_runs_row_is_pyarrows_own():
    import datetime

    import pyarrow as pa

    from kwarehouse import schema
    from kwarehouse.build.run import one_row
    spec = schema.tables()["runs"].arrow
    record = {f.name: None for f in spec} | {
        "run_id": "r", "model": "m", "gpu": "g", "tool": "ncu", "source_dir": "d", "source_files": ["a", "b"],
        "source_sha256": ["x", "y"], "kernel_count": 3, "batch": 2 ** 62, "run_date": datetime.date(2026, 11, 27),
        "ingested_at": datetime.datetime(2026, 11, 27, 5, 4, 3, 456789), "manifest_json": '{"model": "m"}'}
    for tags in ([("framework", "torch"), ("k", "v")], [], None):
        assert one_row(record | {"tags": tags}, spec).equals(pa.Table.from_pylist([record | {"tags": tags}], schema=spec))
