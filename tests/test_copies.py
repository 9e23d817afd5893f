"""A warehouse folder is one warehouse (issue 32 item 1): a copy of a folder whose catalog is
outside it (PostgreSQL, or a --catalog SQLite file elsewhere) shares that catalog, so it must not
write or repair until the user says what it is (kwh detach, kwh attach --moved); a copy that took
its catalog.sqlite along is a warehouse of its own."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from conftest import DATA, rows

from kwarehouse import catalog, pipeline, store
from kwarehouse.cli import main
from kwarehouse.store import Warehouse

GPT2 = DATA / "ncu-gpt2-h100"
VECADD = DATA / "ncu-gtx1080-raw"


def cli(root: Path, catalog: str | None, *args: str):
    return CliRunner().invoke(main, ["--warehouse", str(root), *(["--catalog", catalog] if catalog else []), *args])


def parquet_files(root: Path) -> set[Path]:
    """The Parquet files of the table folders (not _files/ links, staging or quarantine)."""
    return {p for p in root.rglob("*.parquet") if p.is_file() and not p.relative_to(root).parts[0].startswith("_")}


def one_error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def copy_folder(source: Path, target: Path) -> Path:
    subprocess.run(["cp", "-a", str(source), str(target)], check=True)     # as a user would: hard links kept
    return target


def run_ids(root: Path, catalog: str | None) -> list[str]:
    return sorted(r for r, _, _ in Warehouse(root, catalog).runs())


def test_a_copy_on_another_host_that_wrote_first_is_never_undone_by_the_original(postgres_server, tmp_path,
                                                                                monkeypatch):
    """The finding: rsync to a second host, both on one PostgreSQL catalog; the copy ingests; the
    original's check --repair took the copy's run out ("committed but missing"), and the copy's next
    writer then deleted its files while its check said ok."""
    url = postgres_server.new_database()
    original = tmp_path / "a"
    pipeline.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")
    monkeypatch.setattr(catalog, "host_name", lambda: "second-host")
    pipeline.ingest([VECADD], Warehouse(copy, url), model="vecadd")     # kwh cannot look at the other host: it writes
    both = run_ids(copy, url)
    assert len(both) == 2
    copy_files = parquet_files(copy)
    monkeypatch.undo()
    # the original lacks the copy's run: its repair must not take it out of the shared catalog
    repaired = cli(original, url, "check", "--repair")
    assert repaired.exit_code == 1
    line = one_error_line(repaired)
    assert "is a copy of the warehouse" in line and "b on second-host" in line, line
    assert "kwh detach" in line and "kwh attach --moved" in line, line
    assert run_ids(copy, url) == both
    # nor write to it
    ingested = cli(original, url, "ingest", str(DATA / "torch-trace-gpt2"))
    assert ingested.exit_code == 1 and "kwh detach" in one_error_line(ingested)
    # reading still works, with a word
    read = cli(original, url, "sql", "SELECT count(*) FROM runs")
    assert read.exit_code == 0 and "is a copy of the warehouse" in read.output, read.output
    # the copy's next writer (after the retire grace) keeps every file, and its check is ok
    monkeypatch.setattr(catalog, "host_name", lambda: "second-host")
    monkeypatch.setattr(store, "RETIRE_GRACE", timedelta(0))
    assert cli(copy, url, "ingest", str(GPT2)).exit_code == 0
    assert parquet_files(copy) == copy_files and run_ids(copy, url) == both
    assert cli(copy, url, "check").exit_code == 0
    assert rows(Warehouse(copy, url), "SELECT count(*) FROM runs") == [(2,)]


def test_a_copy_beside_its_live_original_is_refused_before_it_writes(postgres_server, tmp_path):
    url = postgres_server.new_database()
    original = tmp_path / "a"
    pipeline.ingest([GPT2], Warehouse(original, url))
    files = parquet_files(original)
    copy = copy_folder(original, tmp_path / "b")
    for command in (["ingest", str(VECADD), "--model", "vecadd"], ["check", "--repair"], ["compact"], ["rollup"]):
        result = cli(copy, url, *command)
        assert result.exit_code == 1, (command, result.output)
        line = one_error_line(result)
        assert f"{copy} is a copy of the warehouse at {original}" in line and "kwh detach" in line, line
    checked = cli(copy, url, "check")       # reading works, and says what the folder is
    assert checked.exit_code == 1 and f"Problem: {copy} is a copy of the warehouse at {original}" in checked.output
    read = cli(copy, url, "sql", "SELECT count(*) FROM runs")
    assert read.exit_code == 0 and "(1 row)" in read.output and "is a copy of the warehouse" in read.output
    # the original writes on, and its repair is ok
    assert cli(original, url, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    assert cli(original, url, "check", "--repair").exit_code == 0
    assert files < parquet_files(original) and len(run_ids(original, url)) == 2
