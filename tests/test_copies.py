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

from kwarehouse import pipeline, store
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


def test_a_copy_sharing_a_postgresql_catalog_never_takes_out_the_other_folders_runs(postgres_server, tmp_path,
                                                                                      monkeypatch):
    url = postgres_server.new_database()
    original = tmp_path / "a"
    pipeline.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")
    pipeline.ingest([VECADD], Warehouse(copy, url), model="vecadd")     # the copy writes first
    both = run_ids(copy, url)
    assert len(both) == 2
    copy_files = parquet_files(copy)
    # the original lacks the copy's run: its repair must not take it out of the shared catalog
    repaired = cli(original, url, "check", "--repair")
    assert repaired.exit_code == 1
    line = one_error_line(repaired)
    assert str(copy) in line and "kwh detach" in line and "kwh attach --moved" in line, line
    assert run_ids(copy, url) == both
    # nor write to it
    ingested = cli(original, url, "ingest", str(DATA / "torch-trace-gpt2"))
    assert ingested.exit_code == 1 and "kwh detach" in one_error_line(ingested)
    # the copy's next writer (after the retire grace) keeps every file, and its check is ok
    monkeypatch.setattr(store, "RETIRE_GRACE", timedelta(0))
    assert cli(copy, url, "ingest", str(GPT2)).exit_code == 0
    assert parquet_files(copy) == copy_files and run_ids(copy, url) == both
    assert cli(copy, url, "check").exit_code == 0
    assert rows(Warehouse(copy, url), "SELECT count(*) FROM runs") == [(2,)]
