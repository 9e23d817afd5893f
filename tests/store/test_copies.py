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

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.settings import Settings
from kwarehouse.store import catalog, folders, layout
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse
from test_data_safety import one_error_line, parquet_files

GPT2 = DATA / "ncu-gpt2-h100"
VECADD = DATA / "ncu-gtx1080-raw"


def cli(root: Path, catalog: str | None, *args: str):
    return CliRunner().invoke(main, ["--warehouse", str(root), *(["--catalog", catalog] if catalog else []), *args])


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
    ingest_job.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")
    monkeypatch.setattr(folders, "host_name", lambda: "second-host")
    ingest_job.ingest([VECADD], Warehouse(copy, url), model="vecadd")     # kwh cannot look at the other host: it writes
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
    monkeypatch.setattr(folders, "host_name", lambda: "second-host")
    assert ingest_job.ingest([GPT2], Warehouse(copy, url, settings=Settings(retire_grace=timedelta(0)))).ok
    assert parquet_files(copy) == copy_files and run_ids(copy, url) == both
    assert cli(copy, url, "check").exit_code == 0
    assert rows(Warehouse(copy, url), "SELECT count(*) FROM runs") == [(2,)]


def test_a_copy_beside_its_live_original_is_refused_before_it_writes(postgres_server, tmp_path):
    url = postgres_server.new_database()
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
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


def test_a_refused_copy_detaches_into_a_catalog_of_its_own_with_the_runs_it_has(postgres_server, tmp_path,
                                                                                 monkeypatch):
    url = postgres_server.new_database()
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")
    monkeypatch.setattr(folders, "host_name", lambda: "second-host")
    ingest_job.ingest([VECADD], Warehouse(copy, url), model="vecadd")       # the copy is the warehouse now
    monkeypatch.undo()
    shared = run_ids(copy, url)
    detached = cli(original, url, "detach")
    assert detached.exit_code == 0, detached.output
    assert "Note: left out run" in detached.output and "1 run(s) in its own catalog" in detached.output
    assert (original / "catalog.sqlite").exists()
    assert run_ids(original, None) == [r for r in shared if r != run_ids_of_model(copy, url, "vecadd")]
    # a warehouse of its own now: it writes without the shared catalog, which it no longer opens
    assert cli(original, None, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    assert cli(original, None, "check").exit_code == 0 and len(run_ids(original, None)) == 2
    wrong = cli(original, url, "sql", "SELECT 1")
    assert wrong.exit_code == 1 and "belongs to another warehouse" in one_error_line(wrong)
    # the shared catalog and its folder are as they were
    monkeypatch.setattr(folders, "host_name", lambda: "second-host")
    assert run_ids(copy, url) == shared and cli(copy, url, "check").exit_code == 0


def run_ids_of_model(root: Path, catalog_url: str, model: str) -> str:
    [run_id] = [r for r, m, _ in Warehouse(root, catalog_url).runs() if m == model]
    return run_id


def test_detach_to_a_new_postgresql_database(postgres_server, tmp_path):
    url, new = postgres_server.new_database(), postgres_server.new_database()
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
    assert cli(original, url, "rollup").exit_code == 0
    rolled_up = rows(Warehouse(original, url), "SELECT count(*) FROM rollup_kernels_daily")
    assert rolled_up[0][0] > 0
    copy = copy_folder(original, tmp_path / "b")
    busy = cli(copy, url, "detach", "--new-catalog", url)
    assert busy.exit_code == 1 and "not an empty database" in one_error_line(busy)
    detached = cli(copy, url, "detach", "--new-catalog", new)
    assert detached.exit_code == 0 and "1 run(s) in its own catalog" in detached.output, detached.output
    assert not (copy / "catalog.sqlite").exists()
    assert cli(copy, new, "check").exit_code == 0        # every run came along, so did the rollups
    assert rows(Warehouse(copy, new), "SELECT count(*) FROM rollup_kernels_daily") == rolled_up
    for root, catalog_url in ((copy, new), (original, url)):     # both write, neither refused
        assert cli(root, catalog_url, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
        assert cli(root, catalog_url, "check", "--repair").exit_code == 0
        assert len(run_ids(root, catalog_url)) == 2
    assert catalog.read_folder_id(copy) != catalog.read_folder_id(original)      # two warehouses now


def test_a_moved_folder_writes_on_and_attach_moved_makes_a_copy_the_warehouse(postgres_server, tmp_path):
    url = postgres_server.new_database()
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
    # mv: the registered folder is gone, the seal matches: the moved folder is the warehouse
    moved = tmp_path / "moved"
    original.rename(moved)
    assert cli(moved, url, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    # one folder under two paths (a symlink, a bind mount, an NFS mount point) is no copy
    alias = tmp_path / "alias"
    alias.symlink_to(moved)
    assert cli(alias, url, "ingest", str(DATA / "torch-trace-gpt2")).exit_code == 0
    assert cli(moved, url, "check", "--repair").exit_code == 0 and len(run_ids(moved, url)) == 3
    # a copy beside it is refused until it says it is the warehouse
    copy = copy_folder(moved, tmp_path / "b")
    assert cli(copy, url, "compact").exit_code == 1
    attached = cli(copy, url, "attach")
    assert attached.exit_code == 2 and "kwh attach --moved" in attached.output
    attached = cli(copy, url, "attach", "--moved")
    assert attached.exit_code == 0 and f"{moved} is refused from now on" in attached.output, attached.output
    assert cli(copy, url, "compact").exit_code == 0
    refused = cli(moved, url, "ingest", str(GPT2))
    assert refused.exit_code == 1 and f"{moved} is a copy of the warehouse" in one_error_line(refused)
    # the displaced folder may hold what the copy lacks: repair keeps those runs without --force
    lost = next(p for p in parquet_files(copy) if "gpu=NVIDIA GeForce GTX 1080" in str(p))
    lost.unlink()
    (copy / layout.FILES / lost.relative_to(copy)).unlink()
    kept = cli(copy, url, "check", "--repair")
    assert kept.exit_code == 1 and len(run_ids(copy, url)) == 3, kept.output
    assert f"another folder of this catalog may hold them ({moved} (displaced" in kept.output, kept.output
    assert "kwh check --repair --force" in kept.output
    forced = cli(copy, url, "check", "--repair", "--force")
    assert forced.exit_code == 0 and "ingest its sources again" in forced.output, forced.output
    assert len(run_ids(copy, url)) == 2
    # once the displaced folder is gone, no --force is needed
    # (a file of the ncu run's metrics table: after compact, a file of a table both gpt2 runs fill holds
    # both, and taking one of those out would lose both runs)
    ncu_only = min(p for p in parquet_files(copy) if p.relative_to(copy).parts[0] == "metrics")
    (copy / layout.FILES / ncu_only.relative_to(copy)).unlink()
    ncu_only.unlink()
    subprocess.run(["rm", "-r", str(moved)], check=True)
    assert cli(copy, url, "check", "--repair").exit_code == 0 and len(run_ids(copy, url)) == 1


def test_a_copy_that_took_its_catalog_sqlite_along_is_a_warehouse_of_its_own(tmp_path):
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original))
    copy = copy_folder(original, tmp_path / "b")
    assert cli(copy, None, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    assert cli(original, None, "ingest", str(DATA / "torch-trace-gpt2")).exit_code == 0
    for root in (original, copy):
        assert cli(root, None, "check", "--repair").exit_code == 0 and len(run_ids(root, None)) == 2
    assert not (original / folders.SEAL_FILE).exists()
    detach = cli(copy, None, "detach")
    assert detach.exit_code == 1 and "is in the folder already" in one_error_line(detach)


def test_a_sqlite_catalog_outside_the_folder_is_shared_like_postgresql(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")
    refused = cli(copy, url, "ingest", str(VECADD), "--model", "vecadd")
    assert refused.exit_code == 1 and f"{copy} is a copy of the warehouse at {original}" in one_error_line(refused)
    assert cli(copy, url, "detach").exit_code == 0
    assert cli(copy, None, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    assert len(run_ids(copy, None)) == 2 and len(run_ids(original, url)) == 1


def test_a_writer_that_dies_between_the_folders_seal_and_the_catalogs_is_no_copy(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    original = tmp_path / "a"
    ingest_job.ingest([GPT2], Warehouse(original, url))
    copy = copy_folder(original, tmp_path / "b")

    write_seal = folders._write_seal

    def killed(*args):
        write_seal(*args)
        raise SystemExit("killed after the folder's seal was written")
    monkeypatch.setattr(folders, "_write_seal", killed)
    result = cli(original, url, "ingest", str(VECADD), "--model", "vecadd")
    assert result.exit_code != 0 and len(run_ids(original, url)) == 1
    monkeypatch.undo()
    # the folder's new seal never reached the catalog: its previous one still matches
    assert cli(original, url, "ingest", str(VECADD), "--model", "vecadd").exit_code == 0
    assert len(run_ids(original, url)) == 2
    # and the copy, made before, stays a copy
    assert cli(copy, url, "ingest", str(DATA / "torch-trace-gpt2")).exit_code == 1
