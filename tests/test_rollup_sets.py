"""Rollups keyed on the set of runs they covered, not on clocks (issue 32 item 2), and the retire grace on
the catalog's clock.

Each case brings a warehouse to a state by one kind of change (a commit, a removal by check --repair, a
replacement of a run's rows, a writer whose clock is behind), runs the incremental rollup and compares it
with `kwh rollup --full` of the same warehouse; a writer clock ahead must not shorten the retire grace.
A writer's clock is simulated by patching catalog.now, the only clock kwh's writers read.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import compact as compact_job
from kwarehouse.jobs import rollup
from kwarehouse.cli import main
from kwarehouse.settings import Settings
from kwarehouse.store import catalog, check, layout
from kwarehouse.store.warehouse import Warehouse

from test_operations import dated_copy

ROLLUPS = ("rollup_kernels_daily", "rollup_libraries_daily")


@pytest.fixture
def three_days(tmp_path):
    return [dated_copy(tmp_path, "ncu-gpt2-h100", "2026-11-20"),
            dated_copy(tmp_path, "ncu-llama-h100-variants", "2026-11-21"),
            dated_copy(tmp_path, "ncu-custom-cupy-h100", "2026-11-22")]


def rollup_rows(warehouse: Warehouse) -> dict[str, list[tuple]]:
    return {name: rows(warehouse, f"SELECT * FROM {name} ORDER BY ALL") for name in ROLLUPS}


def full_rows(warehouse: Warehouse) -> dict[str, list[tuple]]:
    """What `kwh rollup --full` gives for the runs `warehouse` holds now (run after the incremental
    rollup whose rows the caller has read)."""
    rollup.rollup(warehouse, full=True)
    return rollup_rows(warehouse)


def committed_relative(warehouse: Warehouse, path) -> str:
    """A committed file's path relative to the root (read_path gives its _files/ link)."""
    relative = path.relative_to(warehouse.root)
    return relative.relative_to(layout.FILES).as_posix() if relative.parts[0] == layout.FILES else relative.as_posix()


def run_of_day(warehouse: Warehouse, day: str, model: str | None = None) -> str:
    (run_id,), = rows(warehouse, "SELECT run_id FROM runs WHERE run_date = CAST(? AS DATE) "
                                 "AND model = coalesce(?, model)", [day, model])
    return run_id


@pytest.fixture
def skewed_clock(monkeypatch):
    """skew(offset): from now on kwh's writers read a clock `offset` off the true one."""
    true_now = catalog.now

    def skew(offset: timedelta):
        monkeypatch.setattr(catalog, "now", lambda: true_now() + offset)
    return skew


def test_a_new_run_is_rolled_up(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days[:2], warehouse)
    rollup.rollup(warehouse)
    ingest_job.ingest(three_days[2:], warehouse)
    assert rollup.rollup(warehouse).days == ["2026-11-22"]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def lose_run(warehouse: Warehouse, run_id: str) -> None:
    """Delete the run's kernels file (both names): kwh check --repair then takes the run out."""
    for path in warehouse.committed_files("kernels", run_id):
        relative = committed_relative(warehouse, path)
        for name in (warehouse.root / relative, warehouse.root / layout.FILES / relative):
            name.unlink(missing_ok=True)
    repaired = check.check(warehouse, repair=True, verify_rollups=rollup.verify_sample)
    assert any(f"took out run {run_id}" in line for line in repaired.repaired), repaired.repaired


def test_a_run_taken_out_by_check_repair_leaves_no_rollup_rows(tmp_path, three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    ingest_job.ingest([dated_copy(tmp_path, "ncu-gtx1080-raw", "2026-11-21", name="vecadd")], warehouse)
    rollup.rollup(warehouse)
    lose_run(warehouse, run_of_day(warehouse, "2026-11-21", "llama"))
    assert "2026-11-21" in " ".join(check.check(warehouse, verify_rollups=rollup.verify_sample).notes)
    assert rollup.rollup(warehouse).days == ["2026-11-21"]      # the day keeps its other run
    assert rows(warehouse, "SELECT DISTINCT model FROM rollup_kernels_daily WHERE day = DATE '2026-11-21'") == [
        ("vecadd",)]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def test_a_days_only_run_taken_out_drops_the_day(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    lose_run(warehouse, run_of_day(warehouse, "2026-11-21"))
    report = rollup.rollup(warehouse)
    assert (report.days, report.dropped) == ([], ["2026-11-21"])
    assert rows(warehouse, "SELECT count(*) FROM rollup_kernels_daily WHERE day = DATE '2026-11-21'") == [(0,)]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def replace_run(warehouse: Warehouse, run_id: str, factor: float) -> None:
    """Commit run_id again with every kernel's duration scaled: its rows replaced, as a re-ingest of
    a changed export or kwh renormalize replaces them."""
    with warehouse.writer() as session:
        (model, gpu), = [(m, g) for r, m, g in warehouse.runs() if r == run_id]
        tables = warehouse.read_run(run_id)
        kernels = tables["kernels"]
        index = kernels.schema.get_field_index("duration_ns")
        scaled = pc.multiply(kernels["duration_ns"], pa.scalar(factor)).cast(kernels.schema.field(index).type)
        tables["kernels"] = kernels.set_column(index, "duration_ns", scaled)
        session.commit_many([(session.stage_run(run_id, model, gpu, tables), [])])


def test_a_replaced_run_is_rolled_up_again(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    replace_run(warehouse, run_of_day(warehouse, "2026-11-20"), 2.0)
    assert rollup.rollup(warehouse).days == ["2026-11-20"]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def test_a_writer_clock_behind_the_last_rollup_still_gets_its_run_rolled_up(three_days, new_warehouse,
                                                                             skewed_clock):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days[:2], warehouse)
    rollup.rollup(warehouse)
    skewed_clock(-timedelta(hours=1))      # a second host, or an NTP step back
    ingest_job.ingest(three_days[2:], warehouse)
    replace_run(warehouse, run_of_day(warehouse, "2026-11-20"), 3.0)
    assert rollup.rollup(warehouse).days == ["2026-11-20", "2026-11-22"]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def test_a_writer_clock_ahead_does_not_hide_later_runs(three_days, new_warehouse, skewed_clock):
    warehouse = new_warehouse()
    skewed_clock(timedelta(hours=2))       # the rollup's writer runs ahead of the next ingest's
    ingest_job.ingest(three_days[:1], warehouse)
    rollup.rollup(warehouse)
    skewed_clock(timedelta(0))
    ingest_job.ingest(three_days[1:], warehouse)
    assert rollup.rollup(warehouse).days == ["2026-11-21", "2026-11-22"]
    assert rollup_rows(warehouse) == full_rows(warehouse)


def test_rollup_twice_writes_nothing_the_second_time(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    generation = warehouse.snapshot().generation
    assert rollup.rollup(warehouse).days == []
    assert warehouse.snapshot().generation == generation


def test_check_names_a_day_whose_rollup_rows_are_wrong(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    rollup.rollup(warehouse)
    assert check.check(warehouse, verify_rollups=rollup.verify_sample).ok
    # the day's rollup file rewritten with other numbers (as an older kwh's incremental rollup left it)
    path, = [p for p in warehouse.committed_files("rollup_kernels_daily") if "day=2026-11-21" in p.as_posix()]
    table = pq.read_table(path)
    index = table.schema.get_field_index("total_ns")
    table = table.set_column(index, "total_ns", pc.multiply(table["total_ns"], 2.0))
    relative = committed_relative(warehouse, path)
    for name in (warehouse.root / relative, warehouse.root / layout.FILES / relative):
        name.unlink(missing_ok=True)
        pq.write_table(table, name)
    catalog_option = ["--catalog", warehouse.catalog_url] if warehouse.catalog_url else []
    result = CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *catalog_option, "check"])
    assert result.exit_code == 1
    assert ("rollup_kernels_daily/day=2026-11-21: its rows differ from what the runs of that day give now "
            "(rolled up by an older kwh, or its file changed); kwh rollup --full fixes it") in result.output
    rollup.rollup(warehouse, full=True)
    assert check.check(warehouse, verify_rollups=rollup.verify_sample).ok


def test_check_notes_days_not_rolled_up_since_their_runs_changed(three_days, new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest(three_days[:2], warehouse)
    rollup.rollup(warehouse)
    ingest_job.ingest(three_days[2:], warehouse)
    report = check.check(warehouse, verify_rollups=rollup.verify_sample)
    assert report.ok, report.problems
    assert [n for n in report.notes if "2026-11-22" in n and "kwh rollup" in n], report.notes


# -- the retire grace on the catalog's clock ----------------------------------------------------------------

def two_runs_in_one_partition(warehouse: Warehouse) -> None:
    ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "torch-trace-gpt2"], warehouse)


@pytest.mark.catalog
def test_a_writer_clock_ahead_does_not_delete_files_a_session_still_reads(new_warehouse, skewed_clock):
    warehouse = new_warehouse()
    two_runs_in_one_partition(warehouse)
    session = warehouse.connect()           # bound to the files of now
    expected = session.execute("SELECT count(*) FROM runs").fetchall()
    assert compact_job.compact(warehouse)      # retires the files the session reads
    skewed_clock(timedelta(minutes=15))     # the next writer's clock runs 15 minutes ahead
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    assert session.execute("SELECT count(*) FROM runs").fetchall() == expected
    session.close()


@pytest.mark.catalog
def test_retired_files_go_once_the_catalog_clock_passes_the_grace(new_warehouse, monkeypatch, skewed_clock):
    warehouse = new_warehouse()
    two_runs_in_one_partition(warehouse)
    compact_job.compact(warehouse)
    with warehouse.reader.connect() as con:
        retired = list(con.execute(sa.select(catalog.catalog_retired.c.path)).scalars())
    assert retired
    skewed_clock(-timedelta(hours=1))       # a writer clock behind does not keep them for ever either
    no_grace = Warehouse(warehouse.root, warehouse.catalog_url, settings=Settings(retire_grace=timedelta(0)))
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], no_grace, model="vecadd")
    assert not [p for p in retired if (warehouse.root / layout.FILES / p).exists() or (warehouse.root / p).exists()]


@pytest.mark.catalog
def test_rollups_of_an_older_kwh_are_checked_and_recomputed(tmp_path, three_days, new_warehouse):
    """A warehouse an older kwh rolled up records no coverage: its incremental rollup left a removed
    run's rows behind. kwh check names the day; the next rollup recomputes every day it has no
    coverage for."""
    warehouse = new_warehouse()
    ingest_job.ingest(three_days, warehouse)
    ingest_job.ingest([dated_copy(tmp_path, "ncu-gtx1080-raw", "2026-11-21", name="vecadd")], warehouse)
    rollup.rollup(warehouse)
    with warehouse.engine.begin() as con:       # what an older kwh's rollup left: rows, no coverage
        con.execute(catalog.catalog_rollup_coverage.delete())
        stale = {p: (warehouse.root / layout.FILES / p).read_bytes()
                 for p in con.execute(sa.select(catalog.catalog_rollup_files.c.path)).scalars()}
    lose_run(warehouse, run_of_day(warehouse, "2026-11-21", "llama"))
    assert all((warehouse.root / layout.FILES / p).read_bytes() == data for p, data in stale.items())
    report = check.check(warehouse, verify_rollups=rollup.verify_sample)
    assert [p for p in report.problems if p.startswith("rollup_kernels_daily/day=2026-11-21:")
            and p.endswith("kwh rollup --full fixes it")], report.problems
    assert rollup.rollup(warehouse).days == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert check.check(warehouse, verify_rollups=rollup.verify_sample).ok
    assert rollup_rows(warehouse) == full_rows(warehouse)
