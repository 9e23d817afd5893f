"""Operating the warehouse: rollups, compaction, run diffs, extracts and the nightly job."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import DATA, rows

from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import compact as compact_job
from kwarehouse.answers import diff, export
from kwarehouse.jobs import nightly, rollup
from kwarehouse.settings import Settings
from kwarehouse.cli import REGRESSION_EXIT, main
from kwarehouse.store.warehouse import Warehouse




def dated_copy(tmp_path, folder: str, day: str, name: str | None = None):
    """A copy of a test export folder whose manifest says the run was made on `day`."""
    target = tmp_path / (name or f"{folder}-{day}")
    shutil.copytree(DATA / folder, target)
    manifest = target / "manifest.ncu.json"
    data = json.loads(manifest.read_text()) if manifest.exists() else {"model": name or folder}
    data["date"] = day
    manifest.write_text(json.dumps(data))
    return target


ROLLUPS = ("rollup_kernels_daily", "rollup_libraries_daily")


def rollup_rows(warehouse: Warehouse) -> dict[str, list[tuple]]:
    return {name: rows(warehouse, f"SELECT * FROM {name} ORDER BY ALL") for name in ROLLUPS}


def rollup_files(warehouse: Warehouse) -> dict[str, list[str]]:
    return {name: sorted(p.relative_to(warehouse.root).as_posix() for p in warehouse.committed_files(name))
            for name in ROLLUPS}


@pytest.fixture
def three_days(tmp_path):
    return [dated_copy(tmp_path, "ncu-gpt2-h100", "2026-11-20"), dated_copy(tmp_path, "ncu-llama-h100-variants", "2026-11-21"),
            dated_copy(tmp_path, "ncu-custom-cupy-h100", "2026-11-22")]


def test_incremental_rollup_equals_full(tmp_path, three_days, new_warehouse):
    incremental = new_warehouse("inc")
    ingest_job.ingest(three_days[:2], incremental)
    assert rollup.rollup(incremental).days == ["2026-11-20", "2026-11-21"]
    ingest_job.ingest(three_days[2:], incremental)
    assert rollup.rollup(incremental).days == ["2026-11-22"]
    full = new_warehouse("full")
    ingest_job.ingest(three_days, full)
    rollup.rollup(full, full=True)
    assert rollup_rows(incremental) == rollup_rows(full)
    rollup.rollup(incremental, full=True)
    assert rollup_rows(incremental) == rollup_rows(full)


def test_rollup_twice_changes_nothing(tmp_path, three_days, new_warehouse):
    warehouse = new_warehouse("wh")
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    before, files = rollup_rows(warehouse), rollup_files(warehouse)
    assert rollup.rollup(warehouse).days == []
    assert rollup_rows(warehouse) == before and rollup_files(warehouse) == files


def test_a_late_run_rewrites_only_its_day(tmp_path, three_days, new_warehouse):
    warehouse = new_warehouse("wh")
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    files = rollup_files(warehouse)
    late = dated_copy(tmp_path, "ncu-gtx1080-raw", "2026-11-21", name="vecadd")
    ingest_job.ingest([late], warehouse)
    assert rollup.rollup(warehouse).days == ["2026-11-21"]
    after = rollup_files(warehouse)
    for name in ROLLUPS:
        changed = sorted(set(files[name]) ^ set(after[name]))
        assert changed and all("day=2026-11-21" in path for path in changed), name
    assert rows(warehouse, "SELECT DISTINCT model FROM rollup_kernels_daily WHERE day = DATE '2026-11-21' "
                           "ORDER BY 1") == [("llama",), ("vecadd",)]


def test_rollup_numbers_by_hand(tmp_path, three_days, new_warehouse):
    warehouse = new_warehouse("wh")
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    (launches, total, top, memory), = rows(
        warehouse, "SELECT launches, total_ns, top_stall_reason, memory_bound_pct FROM rollup_kernels_daily "
                   "WHERE kernel_base = 'saxpy'")     # saxpy at the DRAM roof: memory-bound (issue 19), not cache-inefficient
    assert (launches, total, memory) == (1, 71488.0, 100.0)
    assert top == "long_scoreboard"
    # every identity's time is in exactly one of the eight classes (grid-too-small and occupancy-limited too)
    shares = rows(warehouse, "SELECT coalesce(compute_bound_pct, 0) + coalesce(memory_bound_pct, 0) "
                             "+ coalesce(cache_inefficient_pct, 0) + coalesce(latency_bound_pct, 0) "
                             "+ coalesce(launch_overhead_pct, 0) + coalesce(mixed_pct, 0) "
                             "+ coalesce(occupancy_limited_pct, 0) + coalesce(grid_too_small_pct, 0) "
                             "FROM rollup_kernels_daily WHERE compute_bound_pct IS NOT NULL OR memory_bound_pct IS NOT NULL "
                             "OR latency_bound_pct IS NOT NULL OR launch_overhead_pct IS NOT NULL "
                             "OR grid_too_small_pct IS NOT NULL OR occupancy_limited_pct IS NOT NULL")
    assert shares and all(total == pytest.approx(100.0) for total, in shares)
    assert rows(warehouse, "SELECT sum(time_pct) FROM rollup_libraries_daily WHERE model = 'custom_cupy'") == [
        (pytest.approx(100.0),)]


TABLES = ("runs", "kernels", "metrics", "rules", "kernel_launches", "kernel_summaries", "nvtx_summaries")


def everything(warehouse: Warehouse, view_rows: dict | None = None) -> dict[str, list[tuple]]:
    """Every table's and view's rows (ingested_at dropped), sorted; the views' from view_rows
    ({view: (columns, rows)}, conftest.read_only_view_rows) when given."""
    def kept_rows(columns, found):
        kept = [i for i, c in enumerate(columns) if c != "ingested_at"]
        return sorted((tuple(row[i] for i in kept) for row in found), key=repr)
    con = warehouse.connect()
    try:
        # each view computed once, in creation order, over the rows of those before it (a view queried cold
        # inlines every view below it); one that fails stays a view and raises below
        views.compute_once(con, tuple(name for name in views.all_views() if view_rows is None or name not in view_rows))
        out = {}
        for name in TABLES + tuple(views.all_views()):
            if view_rows is not None and name in view_rows:
                out[name] = kept_rows(*view_rows[name])
                continue
            # one query per table or view (planning design_signals or what_to_fix_first costs ~2 CPU-s, so
            # no LIMIT 0 query for the column names first)
            cursor = con.execute(f"SELECT * FROM {name}")
            out[name] = kept_rows([d[0] for d in cursor.description], cursor.fetchall())
        return out
    finally:
        con.close()


def close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return a == b


def test_compaction_keeps_every_query_result(ingested, read_only_view_rows):
    # before: the views over the session's read-only copy of the same warehouse (queried once per session)
    before = everything(ingested, read_only_view_rows)
    reader = duckdb.connect(str(ingested.duckdb_path), read_only=True)   # opened before compaction
    merged = compact_job.compact(ingested)
    assert "runs/model=gpt2/gpu=NVIDIA H100 80GB HBM3: 2 files into 1" in merged   # its ncu and torch runs
    after = everything(ingested)
    assert before.keys() == after.keys()
    for name in before:
        assert close(before[name], after[name]), name
    # a reader of the previous view still sees every row once: the small files are retired, not gone
    assert reader.execute("SELECT count(*) FROM runs WHERE model = 'gpt2'").fetchall() == [(2,)]
    # ... through their _files/ links: the table folder holds only the merged file, so a reader that
    # globs it (polars, pyarrow, DuckDB, Spark) counts every row once
    assert len(list((ingested.root / "runs" / "model=gpt2").rglob("*.parquet"))) == 1
    globbed = duckdb.sql(f"SELECT count(*) FROM read_parquet('{ingested.root}/runs/**/*.parquet', "
                         "hive_partitioning = true) WHERE model = 'gpt2'").fetchall()
    assert globbed == [(2,)]
    assert rows(ingested, "SELECT count(*) FROM runs WHERE model = 'gpt2'") == [(2,)]
    assert compact_job.compact(ingested) == []


STALLS = ("smsp__average_warps_issue_stalled_", "smsp__average_warps_issue_stalled`")   # metric_lookup's range


def metric_row_groups(warehouse: Warehouse) -> list[tuple[str, int, str, str]]:
    """(file, rows, min metric, max metric) of every row group of the committed metrics files."""
    out = []
    for path in warehouse.committed_files("metrics"):
        meta = pq.ParquetFile(path).metadata
        column = meta.schema.names.index("metric")
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(column).statistics
            out.append((path.name, meta.row_group(i).num_rows, stats.min, stats.max))
    return out


def test_metrics_are_clustered_so_a_metric_filter_skips_other_row_groups(tmp_path):
    """Metrics files are sorted by metric name in small row groups, before and after compaction (which
    streams a partition through chunks), so the stall range in metric_lookup skips most row groups by
    their statistics. Small limits here make the test data span several row groups and chunks."""
    llama = dated_copy(tmp_path, "ncu-llama-h100-variants", "2026-11-21")
    manifest = json.loads((llama / "manifest.ncu.json").read_text())
    (llama / "manifest.ncu.json").write_text(json.dumps({**manifest, "model": "gpt2"}))   # gpt2's partition
    warehouse = Warehouse(tmp_path / "wh")
    # two ingests: one ingest writes the runs of a partition into one file (a batch); compaction merges files
    ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse)
    ingest_job.ingest([llama], warehouse)
    for path in warehouse.committed_files("metrics"):
        names = pq.read_table(path, columns=["metric"])["metric"].to_pylist()
        assert names == sorted(names)
    before = {name: rows(warehouse, f"SELECT * FROM {name} ORDER BY ALL") for name in ("warp_stalls", "metrics")}

    small = Settings(clustered_row_group_rows=500, compact_chunk_rows=3_000)
    compact_job.compact(Warehouse(warehouse.root, settings=small))
    groups = [g for g in metric_row_groups(warehouse) if g[0].startswith("compact-")]   # partitions of 2+ runs
    assert max(rows for _, rows, _, _ in groups) == 500
    wanted = [g for g in groups if g[2] < STALLS[1] and g[3] >= STALLS[0]]
    assert 0 < len(wanted) < len(groups) / 4
    after = {name: rows(warehouse, f"SELECT * FROM {name} ORDER BY ALL") for name in ("warp_stalls", "metrics")}
    assert close(before["warp_stalls"], after["warp_stalls"]) and close(before["metrics"], after["metrics"])


@pytest.mark.catalog
def test_a_run_in_a_compacted_file_can_still_grow(tmp_path, new_warehouse):
    warehouse = new_warehouse("wh")
    folder = tmp_path / "gpt2"
    folder.mkdir()
    for name in ("gpt2.raw.csv", "manifest.ncu.json"):
        shutil.copy(DATA / "ncu-gpt2-h100" / name, folder)
    other = dated_copy(tmp_path, "ncu-gpt2-h100", "2026-11-01", name="other")
    (other / "gpt2.details.csv").unlink()
    ingest_job.ingest([folder, other], warehouse)
    compact_job.compact(warehouse)
    shutil.copy(DATA / "ncu-gpt2-h100" / "gpt2.details.csv", folder)
    report = ingest_job.ingest([folder], warehouse)
    assert [r.new for r in report.runs] == [False]
    assert rows(warehouse, "SELECT count(DISTINCT run_id), count(*) FROM kernels") == [(2, 6)]
    assert rows(warehouse, "SELECT count(*) > 0 FROM rules") == [(True,)]


def test_diff_of_two_models_by_hand(ingested_read_only):
    result = diff.diff(ingested_read_only, "model=gpt2,tool=ncu", "model=llama,tool=ncu")
    got = {(k.kernel_base, k.change) for k in result.kernels}
    gather = next(k for k in result.kernels if k.kernel_base == "at::native::vectorized_gather_kernel")
    gpt2 = dict(rows(ingested_read_only, "SELECT kernel_id, duration_ns FROM kernels WHERE model = 'gpt2'"))
    llama = dict(rows(ingested_read_only, "SELECT kernel_id, duration_ns FROM kernels WHERE model = 'llama'"))
    assert gather.change == ("slower" if llama[gather.kernel_id] > gpt2[gather.kernel_id] * 1.05 else
                             "faster" if llama[gather.kernel_id] < gpt2[gather.kernel_id] * 0.95 else "unchanged")
    assert gather.delta_pct == pytest.approx(100 * (llama[gather.kernel_id] - gpt2[gather.kernel_id]) / gpt2[gather.kernel_id])
    assert result.total_delta_pct == pytest.approx(100 * (sum(llama.values()) - sum(gpt2.values())) / sum(gpt2.values()))
    only_gpt2 = set(gpt2) - set(llama)
    assert {k.kernel_id for k in result.kernels if k.change == "disappeared"} == only_gpt2
    assert {k.kernel_id for k in result.kernels if k.change == "appeared"} == set(llama) - set(gpt2)
    assert ("at::native::vectorized_gather_kernel", gather.change) in got


def test_diff_of_one_model_with_a_changed_manifest(tmp_path, new_warehouse):
    """The same report exported twice (default and mangled names), under manifests of two dates."""
    warehouse = new_warehouse("wh")
    first, second = (dated_copy(tmp_path, "ncu-gpt2-h100", day) for day in ("2026-11-20", "2026-11-21"))
    for folder, keep in ((first, "gpt2.raw.csv"), (second, "gpt2.raw.mangled.csv")):
        for path in folder.glob("gpt2.*"):
            if path.name != keep:
                path.unlink()
    ingest_job.ingest([first, second], warehouse)
    result = diff.diff(warehouse, "model=gpt2,date=2026-11-20", "model=gpt2,date=2026-11-21")
    assert len(result.baseline_runs) == len(result.candidate_runs) == 1
    assert [k.change for k in result.kernels] == ["unchanged"] * 3 and result.total_delta_pct == 0
    assert all(k.significance == "one run on a side: no estimate" for k in result.kernels)
    assert result.regressions(0.0) == []


def test_diff_gate_and_selectors_on_the_cli(ingested_read_only):
    runner = CliRunner()
    def run(*args):
        return runner.invoke(main, ["--warehouse", str(ingested_read_only.root), *args])
    passed = run("diff", "model=gpt2,tool=ncu", "model=gpt2,tool=ncu", "--fail-above", "1")
    assert passed.exit_code == 0 and "total +0.0%" in passed.output
    failed = run("diff", "model=gpt2,tool=ncu", "model=llama,tool=ncu", "--fail-above", "1")
    assert failed.exit_code == REGRESSION_EXIT and "Regression above 1.0%: " in failed.output
    assert run("diff", "model=nope", "model=gpt2").output.startswith("Error: no run matches 'model=nope'")
    assert "unknown key 'colour'" in run("diff", "colour=red", "model=gpt2").output
    # runs of different sources compare with a note (issue 31), but never gate a build
    assert "Note: the baseline is ncu replay time" in run("diff", "model=gpt2,tool=ncu", "model=gpt2,tool=torch").output
    assert "--fail-above gates runs of one kind" in run("diff", "model=gpt2,tool=ncu", "model=gpt2,tool=torch",
                                                       "--fail-above", "1").output
    # a side holding a model's ncu run and its trace compares the kind both sides have
    both = run("diff", "model=gpt2", "model=gpt2")
    assert both.exit_code == 0 and both.output.startswith("baseline 1 run(s)")


def test_export_round_trips(ingested_read_only, tmp_path):
    target = tmp_path / "out" / "sol.csv"
    count = export.export(ingested_read_only, "speed_of_light", target)
    con = ingested_read_only.connect()
    expected = con.execute("SELECT * FROM speed_of_light").fetchall()
    columns = [d[0] for d in con.execute("SELECT * FROM speed_of_light LIMIT 0").description]
    with open(target, newline="", encoding="utf-8") as handle:
        read = list(csv.reader(handle))
    assert read[0] == columns and count == len(expected) == len(read) - 1
    scientific = re.compile(r"^-?\d+(\.\d+)?[eE][+-]?\d+$")
    assert not any(scientific.match(cell) for row in read for cell in row)
    for got, want in zip(read[1:], expected):
        for cell, value in zip(got, want):
            if value is None:
                assert cell == ""
            elif isinstance(value, float):
                assert math.isclose(float(cell), value, rel_tol=1e-13, abs_tol=5e-10)
            elif isinstance(value, bool):
                assert cell == str(value).lower()
            else:
                assert cell == str(value)
    # --columns keeps their order, --where filters, parquet and json write the same rows
    export.export(ingested_read_only, "kernels", tmp_path / "k.csv", columns=["model", "duration_ns"], where="model = 'gpt2'")
    assert (tmp_path / "k.csv").read_text().splitlines()[0] == "model,duration_ns"
    assert len((tmp_path / "k.csv").read_text().splitlines()) == 4
    export.export(ingested_read_only, "SELECT model, duration_ns FROM kernels", tmp_path / "k.parquet", fmt="parquet")
    export.export(ingested_read_only, "SELECT model, duration_ns FROM kernels", tmp_path / "k.json", fmt="json")
    parquet = duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 'k.parquet'}'").fetchall()
    assert parquet == [(len(json.loads((tmp_path / 'k.json').read_text())),)] == [(rows(ingested_read_only, "SELECT count(*) FROM kernels")[0][0],)]


@pytest.mark.catalog
def test_nightly_job(tmp_path, new_warehouse):
    warehouse = new_warehouse("wh")
    drop = tmp_path / "drop"
    shutil.copytree(DATA / "ncu-custom-cupy-h100", drop / "cupy")
    report = nightly.nightly(warehouse, [drop])
    assert report.ok and report.rolled_up == ["2026-11-23"]   # the manifest's date
    assert report.summary().startswith("nightly ok: ingested 1 run(s), 4 kernels, 0 file(s) failed; rolled up 1 day(s)")
    shutil.copy(DATA / "bad" / "truncated.raw.csv", drop)
    catalog = ["--catalog", warehouse.catalog_url] if warehouse.catalog_url else []
    # a file modified just now may still be copying: left for the next night
    settling = nightly.nightly(warehouse, [drop])
    assert settling.ok and any("still being written" in why for _, why in settling.ingest.skipped)
    result = CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *catalog, "nightly", "--settle", "0",
                                       str(drop)])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == ("nightly FAILED: ingested 0 run(s), 0 kernels, 1 file(s) failed; "
                                              "rolled up 0 day(s); compacted 0 partition(s)")
