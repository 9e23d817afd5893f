"""Never lose or hide data (issue 17): a wrong or missing catalog, hostile names, warehouse.duckdb
trouble, torn reads, partial copies, crashes at every store step, locks, read-only warehouses."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import DATA, EXPORT_FOLDERS, rows

from kwarehouse import ingest as readers
from kwarehouse.jobs import compact as compact_job
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import renormalize as renormalize_job
from kwarehouse.cli import main
from kwarehouse.errors import KwhError
from kwarehouse.settings import Settings
from kwarehouse.store import catalog, check, files, layout, publish
from kwarehouse.store.warehouse import Warehouse

SRC = Path(__file__).resolve().parents[2] / "src"
GPT2 = DATA / "ncu-gpt2-h100"


def cli(warehouse: Warehouse, *args: str):
    catalog = ["--catalog", warehouse.catalog_url] if warehouse.catalog_url else []
    return CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *catalog, *args])


def parquet_files(root: Path) -> set[Path]:
    """The Parquet files of the table folders (not their _files/ links, staging or quarantine)."""
    return {p for p in root.rglob("*.parquet") if p.is_file() and not p.relative_to(root).parts[0].startswith("_")}


def one_error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


# -- a missing, empty or foreign catalog is refused; nothing is deleted --------------------------

def test_a_moved_or_empty_catalog_sqlite_is_refused_and_deletes_nothing(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2, DATA / "torch-trace-gpt2"], warehouse)
    files = parquet_files(warehouse.root)
    catalog = warehouse.root / "catalog.sqlite"
    shutil.move(catalog, tmp_path / "moved.sqlite")
    for state in ("missing", "empty"):
        if state == "empty":
            catalog.write_bytes(b"")
        fresh = Warehouse(warehouse.root)
        for args in (["sql", "SELECT 1"], ["ingest", str(DATA / "ncu-gtx1080-raw")], ["compact"], ["rollup"],
                     ["renormalize"], ["check", "--repair"]):
            result = cli(fresh, *args)
            assert result.exit_code == 1
            assert "catalog" in one_error_line(result) and "restore the catalog" in result.output
        assert parquet_files(warehouse.root) == files
    catalog.unlink()
    shutil.move(tmp_path / "moved.sqlite", catalog)
    assert rows(Warehouse(warehouse.root), "SELECT count(*) FROM runs") == [(2,)]


def test_an_older_kwh_warehouse_without_an_identity_is_adopted_but_not_when_its_catalog_is_gone(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    (warehouse.root / "warehouse.json").unlink()
    with sqlite3.connect(warehouse.root / "catalog.sqlite") as con:
        con.execute("DELETE FROM catalog_info WHERE key = 'warehouse_id'")
    # a warehouse written before identities existed gets one on its next write
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw"], Warehouse(warehouse.root), model="vecadd")
    assert len(report.runs) == 1 and (warehouse.root / "warehouse.json").exists()
    # ... but an old warehouse whose catalog is missing is refused all the same
    (warehouse.root / "warehouse.json").unlink()
    (warehouse.root / "catalog.sqlite").unlink()
    with pytest.raises(KwhError, match="holds warehouse files but its catalog .* is missing or empty"):
        ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], Warehouse(warehouse.root))
    assert len(parquet_files(warehouse.root)) == 8


def test_a_postgresql_catalog_that_is_empty_misspelt_or_forgotten_is_refused(postgres_server, tmp_path):
    url = postgres_server.new_database()
    warehouse = Warehouse(tmp_path / "wh", url)
    ingest_job.ingest([GPT2], warehouse)
    files = parquet_files(warehouse.root)
    empty = postgres_server.new_database()
    with pytest.raises(KwhError, match="is empty; restore the catalog"):
        ingest_job.ingest([DATA / "ncu-gtx1080-raw"], Warehouse(warehouse.root, empty))
    misspelt = url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(KwhError, match="cannot reach the catalog"):
        ingest_job.ingest([DATA / "ncu-gtx1080-raw"], Warehouse(warehouse.root, misspelt))
    # a cron job that forgot KWH_CATALOG gets the folder's missing catalog.sqlite
    result = cli(Warehouse(warehouse.root), "ingest", str(DATA / "ncu-gtx1080-raw"))
    assert result.exit_code == 1 and "is missing" in one_error_line(result)
    assert not (warehouse.root / "catalog.sqlite").exists()
    # another warehouse's catalog
    other = Warehouse(tmp_path / "other", empty)
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], other, model="vecadd")
    with pytest.raises(KwhError, match="belongs to another warehouse"):
        Warehouse(warehouse.root, empty).runs()
    assert parquet_files(warehouse.root) == files
    assert rows(Warehouse(warehouse.root, url), "SELECT count(*) FROM kernels") == [(3,)]


def test_files_kwh_did_not_write_are_never_deleted(tmp_path):
    """A user's Parquet files in the table folders, and files outside reached through a symlinked
    table folder, survive a crashed writer's repair and kwh check --repair."""
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    mine = [warehouse.root / "runs" / "mine.parquet", warehouse.root / "metrics" / "x" / "y.parquet"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.parquet").write_bytes(b"PAR1 not kwh's")
    for path in mine:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 user data")
    linked = warehouse.root / "rules" / "model=linked"
    linked.symlink_to(outside, target_is_directory=True)
    # a folder kwh writes into that is a link: writers and repair refuse before touching anything
    with pytest.raises(KwhError, match="model=linked: a symbolic link"):
        ingest_job.ingest([DATA / "torch-trace-gpt2"], warehouse)
    with pytest.raises(KwhError, match="model=linked: a symbolic link"):
        check.check(warehouse, repair=True)
    assert (outside / "precious.parquet").exists()
    linked.unlink()
    (warehouse.root / "_staging" / "someone-elses").mkdir(parents=True)
    (warehouse.root / "_staging" / "someone-elses" / "keep.txt").write_text("x")
    crash_during_ingest(warehouse, "placed", DATA / "torch-trace-gpt2")
    report = ingest_job.ingest([DATA / "torch-trace-gpt2"], warehouse)
    assert any("never committed" in line for line in report.repairs)
    checked = check.check(warehouse, repair=True)
    assert checked.ok and any("not in the catalog and are left alone" in note for note in checked.notes)
    assert all(p.read_bytes() == b"PAR1 user data" for p in mine)
    assert (outside / "precious.parquet").exists()
    assert (warehouse.root / "_staging" / "someone-elses" / "keep.txt").exists()


# -- names --------------------------------------------------------------------------------------

# Each name takes another branch of layout.partition_value (which encodes a model's folder name): a ".parquet"
# ending, a cut past MAX_PARTITION_BYTES (multibyte: never inside a %XX escape), a leading dot, path separators,
# the folder name readers take for NULL. "bert.parquet" and "m" * 200 take no branch that "Bert.PARQUET" (the
# ending in any case) and "模型" * 60 (a cut among escapes) do not: they run with -m slow (~2 CPU-s each, four
# commands that each republish).
@pytest.mark.parametrize("model", [pytest.param("bert.parquet", marks=pytest.mark.slow), "Bert.PARQUET",
                                   pytest.param("m" * 200, marks=pytest.mark.slow), "模型" * 60, ".hidden", "a/b\\c",
                                   "__HIVE_DEFAULT_PARTITION__"])
def test_any_model_name_is_stored_exactly_and_never_bricks_a_writer(tmp_path, model):
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest([GPT2], warehouse, model=None).failed == []
    trace = tmp_path / "trace"          # without its manifest, which names the model
    shutil.copytree(DATA / "torch-trace-gpt2", trace, ignore=shutil.ignore_patterns("manifest*"))
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw", trace], warehouse, model=model)
    assert report.failed == [] and len(report.runs) == 2
    for path in warehouse.root.rglob("*"):
        assert len(path.name.encode()) <= 255 and not (path.is_dir() and path.name.endswith(".parquet"))
    assert rows(warehouse, "SELECT count(*) FROM kernels WHERE model = ?", [model]) == [(3,)]
    assert rows(warehouse, "SELECT count(*) FROM kernel_launches WHERE model = ? AND activity = 'kernel'", [model]) == [(38,)]
    assert rows(warehouse, "SELECT count(*) FROM runs WHERE model = ?", [model]) == [(2,)]
    for args in (["compact"], ["rollup"], ["renormalize"], ["check"]):
        assert cli(warehouse, *args).exit_code == 0, args
    published = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    assert published.execute("SELECT count(*) FROM runs WHERE model = ?", [model]).fetchall() == [(2,)]
    # a run read back for merging keeps its real name
    run_id = rows(warehouse, "SELECT run_id FROM kernels WHERE model = ? LIMIT 1", [model])[0][0]
    assert set(warehouse.read_run(run_id)["kernels"]["model"].to_pylist()) == {model}


# -- warehouse.duckdb ---------------------------------------------------------------------------

def published_counts(warehouse: Warehouse) -> tuple:
    con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    try:
        return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("runs", "kernels", "metrics"))
    finally:
        con.close()


def kwh_counts(warehouse: Warehouse) -> tuple:
    return tuple(rows(warehouse, f"SELECT count(*) FROM {t}")[0][0] for t in ("runs", "kernels", "metrics"))


def test_a_failed_rebuild_is_healed_by_the_next_command_even_with_nothing_new(tmp_path, monkeypatch):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)

    def disk_full(*args, **kwargs):
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")
    monkeypatch.setattr(publish, "_build", disk_full)
    result = cli(warehouse, "ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
    assert result.exit_code == 1
    assert "could not rebuild it" in one_error_line(result) and "committed data is safe" in result.output
    monkeypatch.undo()
    assert published_counts(warehouse) == (1, 3, published_counts(warehouse)[2])   # the old file, intact
    assert cli(warehouse, "check").exit_code == 1
    again = cli(warehouse, "ingest", str(DATA / "ncu-gtx1080-raw"))    # nothing new: still rebuilds
    assert again.exit_code == 0 and "1 already ingested" in again.output
    assert published_counts(warehouse) == kwh_counts(warehouse) and kwh_counts(warehouse)[:2] == (2, 6)
    assert cli(warehouse, "check").exit_code == 0


def test_a_published_file_is_checked_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    before = published_counts(warehouse)
    monkeypatch.setattr(publish, "own_objects", lambda: {"runs", "a_view_that_was_not_written"})
    with pytest.raises(KwhError, match="lacks a_view_that_was_not_written"):
        ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    assert published_counts(warehouse) == before
    assert not any(warehouse.staging.rglob("*.duckdb"))


def test_retired_files_are_deleted_only_after_the_published_file_stops_naming_them(tmp_path, monkeypatch):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    ingest_job.ingest([DATA / "torch-trace-gpt2"], warehouse)     # a second run in the gpt2 partition
    monkeypatch.setattr(publish, "_build", lambda *a: (_ for _ in ()).throw(duckdb.IOException("disk full")))
    with pytest.raises(KwhError):
        compact_job.compact(warehouse)        # committed; warehouse.duckdb still names the small files
    monkeypatch.undo()
    no_grace = Warehouse(warehouse.root, settings=Settings(retire_grace=timedelta(0)))
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], no_grace, model="vecadd")   # deletes the retired files
    assert published_counts(warehouse) == kwh_counts(warehouse)


def test_a_stale_wal_and_a_users_own_tables_survive_a_rebuild(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    # a user's DuckDB session adds a table and a view, then dies without a checkpoint
    script = ("import duckdb, os, sys; con = duckdb.connect(sys.argv[1]); "
              "con.execute('PRAGMA disable_checkpoint_on_shutdown'); "
              "con.execute('CREATE TABLE my_notes AS SELECT 42 AS x'); "
              "con.execute('CREATE VIEW my_count AS SELECT count(*) AS n FROM kernels'); os._exit(0)")
    subprocess.run([sys.executable, "-c", script, str(warehouse.duckdb_path)], check=True)
    assert Path(f"{warehouse.duckdb_path}.wal").exists()
    result = cli(warehouse, "ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
    assert result.exit_code == 0, result.output
    assert "kept your own 1 table(s) and 1 view(s)" in result.output
    assert not Path(f"{warehouse.duckdb_path}.wal").exists()
    assert [p.name.endswith("warehouse.duckdb.wal") for p in (warehouse.root / "_quarantine").iterdir()] == [True]
    con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    assert con.execute("SELECT x FROM my_notes").fetchall() == [(42,)]
    assert con.execute("SELECT n FROM my_count").fetchall() == [(6,)]


def test_a_copied_warehouse_gets_a_warehouse_duckdb_of_its_own(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    shutil.copytree(warehouse.root, tmp_path / "copy")
    shutil.rmtree(warehouse.root)
    copy = Warehouse(tmp_path / "copy")
    assert check.check(copy).problems == ["warehouse.duckdb: built for another folder (a moved or copied warehouse); "
                                          "kwh check --repair rebuilds it"]
    assert cli(copy, "ingest", str(GPT2)).exit_code == 0      # nothing new, but it republishes
    assert published_counts(copy) == kwh_counts(copy) and check.check(copy).ok


# -- readers see one snapshot -------------------------------------------------------------------

@pytest.mark.parametrize("soak", [False, pytest.param(True, marks=pytest.mark.soak)])
def test_readers_never_see_half_a_run(new_warehouse, soak):
    warehouse = new_warehouse()
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    folders = [DATA / n for n in ("ncu-gpt2-h100", "ncu-llama-h100-variants", "ncu-custom-cupy-h100")]
    if soak:   # every ncu export of tests/data, one ingest each
        folders = [p for p in sorted(DATA.iterdir()) if p.name.startswith("ncu-") and p.name != "ncu-gtx1080-raw"]
    env = {**os.environ, "PYTHONPATH": str(SRC), "KWH_WAREHOUSE": str(warehouse.root)}
    if warehouse.catalog_url:
        env["KWH_CATALOG"] = warehouse.catalog_url
    writer = subprocess.Popen([sys.executable, "-c",
                               "import sys; from kwarehouse.cli import main; "
                               "[main(['ingest', f], standalone_mode=False) for f in sys.argv[1:]]; "
                               "main(['compact'], standalone_mode=False)", *map(str, folders)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    torn, looks = [], 0
    reader = Warehouse(warehouse.root, warehouse.catalog_url)
    while writer.poll() is None or looks < 5:
        con = reader.connect()
        runs = {r for r, in con.execute("SELECT run_id FROM runs WHERE tool = 'ncu'").fetchall()}
        kernels = {r for r, in con.execute("SELECT DISTINCT run_id FROM kernels").fetchall()}
        con.close()
        looks += 1
        if runs != kernels:
            torn.append((runs, kernels))
    assert writer.returncode == 0, writer.stderr.read()
    assert torn == [] and looks >= 5
    # the last look may have begun before the writer's last commit: look once more, after it
    con = reader.connect()
    kernels = {r for r, in con.execute("SELECT DISTINCT run_id FROM kernels").fetchall()}
    con.close()
    assert len(kernels) == len(folders) + 1 or soak


# -- partial copies and growing files -----------------------------------------------------------

def test_a_partial_copy_is_replaced_by_its_complete_version(tmp_path, new_warehouse):
    warehouse = new_warehouse()
    folder = tmp_path / "drop" / "gpt2"
    shutil.copytree(GPT2, folder)
    for name in ("gpt2.details.csv", "gpt2.details.mangled.csv", "gpt2.raw.mangled.csv"):
        (folder / name).unlink()
    full = (folder / "gpt2.raw.csv").read_bytes()
    lines = full.splitlines(keepends=True)
    (folder / "gpt2.raw.csv").write_bytes(b"".join(lines[:-1]))     # cut exactly at a row end
    first = ingest_job.ingest([folder], warehouse)
    assert [r.kernels for r in first.runs] == [2]
    (folder / "gpt2.raw.csv").write_bytes(full)                      # the copy finished
    shutil.copy(GPT2 / "gpt2.details.csv", folder)
    second = cli(warehouse, "ingest", str(folder))
    assert second.exit_code == 0, second.output
    assert f"(replaces partial run {first.runs[0].run_id})" in second.output
    assert rows(warehouse, "SELECT count(*), count(DISTINCT run_id) FROM kernels") == [(3, 1)]
    assert rows(warehouse, "SELECT count(*) FROM runs") == [(1,)]
    assert rows(warehouse, "SELECT count(*) FROM metrics WHERE run_id = ?", [first.runs[0].run_id]) == [(0,)]
    assert cli(warehouse, "ingest", str(folder)).output.splitlines()[-1].startswith("ingested 0 run(s)")


def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "gpt2"
    shutil.copytree(GPT2, folder)
    real = readers.read_with

    def growing(reader, path, data=None):
        result = real(reader, path, data)
        with open(path, "a") as handle:
            handle.write("\n")
        return result
    monkeypatch.setattr(readers, "read_with", growing)
    report = ingest_job.ingest([folder / "gpt2.raw.csv"], Warehouse(tmp_path / "wh"))
    assert report.runs == [] and len(report.failed) == 1
    assert "changed while it was being read" in report.failed[0]


def test_bad_inputs_fail_one_file_each_and_later_folders_still_go_in(tmp_path):
    bad = tmp_path / "bad"
    for name, manifest in (("huge-batch", '{"model": "m", "batch": 1e20}'), ("nested", "[" * 100000),
                           ("surrogate", '{"model": "\\ud800"}'), ("long-model", '{"model": "' + "m" * 300 + '"}')):
        shutil.copytree(DATA / "ncu-gtx1080-raw", bad / name)
        (bad / name / "manifest.json").write_text(manifest)
    shutil.copytree(GPT2, tmp_path / "zz-good")
    result = cli(Warehouse(tmp_path / "wh"), "ingest", str(bad), str(tmp_path / "zz-good"))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 4
    assert result.output.splitlines()[-1].startswith("ingested 1 run(s), 3 kernels")


# -- crashes at every store step ----------------------------------------------------------------

# Runs one ingest in a child process that dies (os._exit, no cleanup) at the named step.
CRASH = """
import os, sys
from pathlib import Path
from kwarehouse.jobs import compact as compact_job
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import catalog, publish, session
from kwarehouse.store.warehouse import Warehouse

step = sys.argv[3]
def die(*args, **kwargs):
    os._exit(9)
def after(function):
    def wrapped(*args, **kwargs):
        function(*args, **kwargs)
        os._exit(9)
    return wrapped
if step == "staged":
    session.WriteSession.commit_many = die
elif step == "intents":
    os.replace = die
elif step == "placed":
    catalog.bump_generation = die          # inside the commit transaction, files in place
elif step == "committed":
    publish.publish = die                        # committed, warehouse.duckdb not rebuilt
elif step == "building":
    real_build = publish._build
    def half_build(warehouse, fresh, *rest):
        import duckdb
        duckdb.connect(str(fresh)).execute("CREATE TABLE half AS SELECT 1")
        os._exit(9)
    publish._build = half_build
elif step == "published":
    publish._fsync = after(publish._fsync)       # the new file is written, not yet swapped in
if sys.argv[2] == "compact":
    compact_job.compact(Warehouse(sys.argv[1]))
elif sys.argv[2] == "rollup":
    from kwarehouse.jobs import rollup
    rollup.rollup(Warehouse(sys.argv[1]))
else:
    ingest_job.ingest([Path(sys.argv[2])], Warehouse(sys.argv[1]))
"""


def crash_during_ingest(warehouse: Warehouse, step: str, folder: Path | str) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", CRASH, str(warehouse.root), str(folder), step], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 9, done.stderr


def no_stray_files(warehouse: Warehouse) -> None:
    """Every Parquet file in the table folders is committed or retired; staging holds nothing."""
    import sqlalchemy as sa
    with warehouse.reader.connect() as con:
        known = set(con.execute(sa.select(catalog.catalog_parquet.c.path)).scalars())
        known |= set(con.execute(sa.select(catalog.catalog_retired.c.path)).scalars())
        known |= set(con.execute(sa.select(catalog.catalog_rollup_files.c.path)).scalars())
        assert con.execute(sa.select(sa.func.count()).select_from(catalog.write_intents)).scalar() == 0
    on_disk = {p.relative_to(warehouse.root).as_posix() for p in parquet_files(warehouse.root)
               if not p.relative_to(warehouse.root).as_posix().startswith("_")}
    assert on_disk <= known
    assert not any(p.is_file() for p in warehouse.staging.rglob("*"))


@pytest.mark.parametrize("step", ["staged", "intents", "placed", "committed", "building", "published"])
def test_kill_9_at_every_store_step_is_healed_by_the_next_command(tmp_path, step):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd")
    crash_during_ingest(warehouse, step, GPT2)
    healed = cli(Warehouse(warehouse.root), "ingest", str(GPT2))
    assert healed.exit_code == 0, healed.output
    assert kwh_counts(warehouse)[:2] == (2, 6)
    assert published_counts(warehouse) == kwh_counts(warehouse)
    no_stray_files(warehouse)
    assert check.check(warehouse).ok


@pytest.mark.parametrize("command", ["compact", "rollup"])
@pytest.mark.parametrize("step", ["placed", "committed"])
def test_kill_9_during_compact_or_rollup_is_healed_by_the_next_command(tmp_path, command, step):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2, DATA / "torch-trace-gpt2"], warehouse)     # two runs in gpt2's runs partition
    before = kwh_counts(warehouse)
    crash_during_ingest(warehouse, step, command)
    healed = cli(Warehouse(warehouse.root), command)
    assert healed.exit_code == 0, healed.output
    assert kwh_counts(warehouse) == before == published_counts(warehouse)
    no_stray_files(warehouse)
    assert check.check(warehouse).ok


# -- locks, workers, read-only warehouses, damaged catalogs and files ----------------------------

def test_a_writer_waiting_for_a_lock_says_for_whom_and_honours_wait(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    with open(warehouse.root / ".kwh.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.truncate(0)
        lock.write("pid 4242 (kwh nightly) since 2026-11-23T02:00:00\n")
        lock.flush()
        started = time.monotonic()
        result = CliRunner().invoke(main, ["-w", str(warehouse.root), "--wait", "0.5", "ingest",
                                           str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd"])
        assert 0.5 <= time.monotonic() - started < 10
    assert result.exit_code == 1
    assert "waiting for the writer lock" in result.output
    assert "gave up after 0.5 s waiting for the writer lock, held by pid 4242 (kwh nightly)" in one_error_line(result)
    assert len(warehouse.runs()) == 1


def _proc_text(pid: int, name: str) -> str:
    """/proc/<pid>/<name>, or "" once the process is gone (it may exit between listing and reading)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """Running, not gone or a zombie."""
    fields = _proc_text(pid, "stat").rsplit(")", 1)
    return len(fields) == 2 and fields[1].split()[:1] != ["Z"]


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_jobs_workers_die_with_a_killed_driver(tmp_path):
    drop = tmp_path / "drop"
    for source in sorted(DATA.iterdir()):
        if source.is_dir() and source.name.startswith(EXPORT_FOLDERS):
            shutil.copytree(source, drop / source.name)
    env = {**os.environ, "PYTHONPATH": str(SRC), "KWH_WAREHOUSE": str(tmp_path / "wh")}
    driver = subprocess.Popen([sys.executable, "-m", "kwarehouse", "ingest", "--jobs", "2", str(drop)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while len(workers) < 2 and time.monotonic() < deadline and driver.poll() is None:
        workers = {p for p in _children(driver.pid) if "spawn_main" in _proc_text(p, "cmdline")}
        time.sleep(0.05)
    if driver.poll() is not None:
        pytest.skip("the ingest finished before its workers could be seen")
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert workers and [p for p in workers if _alive(p)] == []


def _read_only_bind(source: Path, target: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    target.mkdir()
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)], capture_output=True)
    return done.returncode == 0


def test_a_read_only_warehouse_can_be_read(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    target = tmp_path / "ro"
    if not _read_only_bind(warehouse.root, target):
        pytest.skip("needs root and mount --bind to make a read-only warehouse")
    try:
        readonly = Warehouse(target)
        assert rows(readonly, "SELECT count(*) FROM kernels") == [(3,)]
        assert cli(readonly, "summary").exit_code == 0
        assert cli(readonly, "query", "bottleneck_class", "--limit", "1").exit_code == 0
        result = cli(readonly, "ingest", str(DATA / "ncu-gtx1080-raw"))
        assert result.exit_code == 1 and "is the warehouse read-only?" in one_error_line(result)
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def test_a_damaged_catalog_is_one_line(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    (warehouse.root / "catalog.sqlite").write_bytes(b"this is not a database" * 300)
    for args in (["sql", "SELECT 1"], ["ingest", str(DATA / "ncu-gtx1080-raw")], ["check"]):
        result = cli(Warehouse(warehouse.root), *args)
        assert result.exit_code == 1 and "the catalog cannot be read" in one_error_line(result), args


def test_a_lost_parquet_file_is_reported_and_repaired_by_taking_its_run_out(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2, DATA / "torch-trace-gpt2"], warehouse)
    compact_job.compact(warehouse)
    lost = warehouse.committed_files("kernels")[0]
    table_name = warehouse.root / lost.relative_to(warehouse.root / layout.FILES)
    table_name.unlink()              # one name of a committed file gone: kwh's views lose nothing,
    assert kwh_counts(warehouse)[:2] == (2, 3)
    checked = cli(warehouse, "check")    # but readers that glob the table folders miss its rows (issue 32)
    assert checked.exit_code == 1 and "missing from its table folder" in checked.output
    lost.unlink()                    # both: the rows are lost
    result = cli(warehouse, "sql", "SELECT count(*) FROM runs")
    assert result.exit_code == 0 and "1 committed file(s)" in result.output and "run kwh check" in result.output
    checked = cli(warehouse, "check")
    assert checked.exit_code == 1 and "committed but missing" in checked.output
    repaired = cli(warehouse, "check", "--repair")
    assert repaired.exit_code == 0 and "ingest its sources again to restore it" in repaired.output
    assert kwh_counts(warehouse)[:2] == (1, 0)
    assert ingest_job.ingest([GPT2], warehouse).runs[0].kernels == 3
    assert kwh_counts(warehouse)[:2] == (2, 3) and published_counts(warehouse) == kwh_counts(warehouse)


def test_renormalize_rewrites_a_compacted_file_once_per_batch_not_once_per_run(ingested, monkeypatch):
    compact_job.compact(ingested)
    (ingested.rules_dir).mkdir(exist_ok=True)
    (ingested.rules_dir / "op_class_rules.csv").write_text("field,pattern,op_class\nbase,.,everything\n")
    written = []
    real = files.Stager.stage_chunks
    monkeypatch.setattr(files.Stager, "stage_chunks",
                        lambda self, stage, relative, name, chunks: written.append(relative)
                        or real(self, stage, relative, name, chunks))
    report = renormalize_job.renormalize(ingested)
    assert len(report.changed) > 3
    shared = {p.parent for p in ingested.committed_files("kernels")}
    assert len(written) <= 2 * len(shared) + 2    # kernels and metrics files, once each
    assert rows(ingested, "SELECT DISTINCT op_class FROM kernels") == [("everything",)]


def _small_disk(target: Path, size: str) -> bool:
    """A tmpfs of `size` at `target` (root only; False where the machine does not allow it)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    target.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
                          capture_output=True).returncode == 0


def test_a_full_disk_fails_with_one_line_and_loses_nothing(tmp_path):
    disk = tmp_path / "small"
    if not _small_disk(disk, "1200k"):
        pytest.skip("needs root and a tmpfs mount for a real full disk")
    try:
        warehouse = Warehouse(disk / "wh")
        folders = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
        outcomes = []
        for folder in folders:
            result = cli(warehouse, "ingest", str(folder))
            outcomes.append(result)
            if result.exit_code != 0:
                break
        assert outcomes[-1].exit_code == 1, "the small disk never filled"
        assert "Traceback" not in outcomes[-1].output
        assert any(line.startswith("Error:") for line in outcomes[-1].output.splitlines())
        kept = {run for run, _, _ in Warehouse(disk / "wh").runs()}
        assert kept and len(kept) >= len(outcomes) - 1
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        again = cli(Warehouse(disk / "wh"), "ingest", *map(str, folders))
        assert again.exit_code == 0, again.output
        healed = Warehouse(disk / "wh")
        assert kept <= {run for run, _, _ in healed.runs()}
        assert check.check(healed).ok
        reference = Warehouse(tmp_path / "reference")
        ingest_job.ingest(folders, reference)
        assert kwh_counts(healed) == kwh_counts(reference) == published_counts(healed)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- the second attack's findings ----------------------------------------------------------------

def test_a_damaged_parquet_file_is_one_line_and_kwh_check_reads_every_page(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2, DATA / "ncu-custom-cupy-h100"], warehouse)
    metrics = warehouse.committed_files("metrics")[0]
    data = bytearray(metrics.read_bytes())
    data[len(data) // 3:len(data) // 3 + 200] = b"\xff" * 200      # data pages; the footer is intact
    metrics.write_bytes(bytes(data))
    assert check.check(warehouse, quick=True).ok                    # a footer check cannot see it
    assert any("unreadable (damaged)" in p for p in check.check(warehouse).problems)
    result = cli(warehouse, "sql", "--csv", "SELECT * FROM metrics")
    assert result.exit_code == 1 and "kwh check" in one_error_line(result)
    kernels = warehouse.committed_files("kernels")[0]
    os.truncate(kernels, 500)
    for args in (["sql", "SELECT count(*) FROM kernels"], ["summary"], ["renormalize"]):
        result = cli(warehouse, *args)
        assert result.exit_code == 1 and "kwh check" in one_error_line(result), args
    repaired = check.check(warehouse, repair=True)
    # both damaged files hold the custom_cupy run's rows (the first paths in sort order)
    assert repaired.ok and len([r for r in repaired.repaired if r.startswith("took out run")]) == 1
    assert kwh_counts(warehouse)[:2] == (1, 3)
    assert (warehouse.root / "_quarantine").exists()


def test_a_busy_catalog_honours_wait_and_says_it_is_busy(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    holder = sqlite3.connect(warehouse.root / "catalog.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = CliRunner().invoke(main, ["-w", str(warehouse.root), "--wait", "1", "ingest",
                                           str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd"])
        assert time.monotonic() - started < 30
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 1 and "the catalog is busy" in one_error_line(result)
    assert "restore" not in result.output
    assert len(Warehouse(warehouse.root).runs()) == 1


def test_files_with_temporary_names_wait_for_their_final_name(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    shutil.copy(GPT2 / "gpt2.raw.csv", drop / "gpt2.raw.csv.part")
    warehouse = Warehouse(tmp_path / "wh")
    first = ingest_job.ingest([drop], warehouse, model="gpt2")
    assert first.runs == [] and "temporary name" in first.skipped[0][1]
    (drop / "gpt2.raw.csv.part").rename(drop / "gpt2.raw.csv")
    assert len(ingest_job.ingest([drop], warehouse, model="gpt2").runs) == 1


def test_a_gzipped_copy_of_an_ingested_export_is_the_same_file(tmp_path):
    import gzip
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    packed = tmp_path / "ncu-gpt2-h100"
    shutil.copytree(GPT2, packed)
    for path in packed.glob("*.csv"):
        path.with_suffix(".csv.gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    report = ingest_job.ingest([packed], warehouse)
    assert report.runs == [] and sum(why.startswith("already ingested") for _, why in report.skipped) == 4


def test_a_live_duckdb_session_that_changed_warehouse_duckdb_keeps_it(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    ready = tmp_path / "ready"
    script = ("import duckdb, pathlib, sys, time; con = duckdb.connect(sys.argv[1]); "
              "con.execute('CREATE TABLE keepme AS SELECT range AS x FROM range(10)'); "
              "pathlib.Path(sys.argv[2]).touch(); time.sleep(6); con.close()")
    session = subprocess.Popen([sys.executable, "-c", script, str(warehouse.duckdb_path), str(ready)])
    try:
        while not ready.exists():
            time.sleep(0.05)
        result = cli(warehouse, "ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
        assert result.exit_code == 0, result.output
        assert "was not rebuilt" in result.output and "close that session" in result.output
    finally:
        session.wait(timeout=60)
    con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    assert con.execute("SELECT count(*) FROM keepme").fetchall() == [(10,)]
    con.close()
    again = cli(warehouse, "check", "--repair")               # the session closed: now it is rebuilt
    assert again.exit_code == 0, again.output
    con = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    assert con.execute("SELECT count(*) FROM keepme").fetchall() == [(10,)]
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]


def test_a_warehouse_of_the_previous_kwh_is_read_and_upgraded(tmp_path):
    """Catalog version 2 (no identity, no write intents, no file sizes), as the last release wrote it."""
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2], warehouse)
    with sqlite3.connect(warehouse.root / "catalog.sqlite") as con:
        con.execute("DROP TABLE write_intents")
        con.execute("ALTER TABLE ingested_files DROP COLUMN size")
        con.execute("DELETE FROM catalog_info WHERE key != 'version'")
        con.execute("UPDATE catalog_info SET value = '2' WHERE key = 'version'")
    (warehouse.root / "warehouse.json").unlink()
    assert cli(Warehouse(warehouse.root), "sql", "SELECT count(*) FROM kernels").output.splitlines()[2].strip() == "3"
    result = cli(Warehouse(warehouse.root), "ingest", str(GPT2), str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("ingested 1 run(s), 3 kernels; 4 already ingested")
    with sqlite3.connect(warehouse.root / "catalog.sqlite") as con:
        assert con.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchall() == [("3",)]
        ids = con.execute("SELECT value FROM catalog_info WHERE key = 'warehouse_id'").fetchall()
    assert ids and (warehouse.root / "warehouse.json").read_text().count(ids[0][0]) == 1
    assert check.check(Warehouse(warehouse.root)).ok


def test_globbing_readers_see_exactly_the_committed_rows_after_a_merge_and_a_compaction(tmp_path):
    """polars, pyarrow.dataset and DuckDB reading the table folders directly count what kwh counts,
    while a DuckDB session bound before the compaction keeps working through the grace period."""
    import polars as pl
    import pyarrow.dataset as ds
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([GPT2 / "gpt2.raw.csv", DATA / "torch-trace-gpt2"], warehouse)
    ingest_job.ingest([GPT2 / "gpt2.details.csv"], warehouse)        # a later page merges into the run
    session = duckdb.connect(str(warehouse.duckdb_path), read_only=True)
    compact_job.compact(warehouse)

    def counts() -> dict[str, int]:
        folder = warehouse.root / "kernels"
        return {
            "kwh": rows(warehouse, "SELECT count(*) FROM kernels")[0][0],
            "polars": pl.scan_parquet(f"{folder}/**/*.parquet", hive_partitioning=True).select(pl.len()).collect().item(),
            "pyarrow": ds.dataset(folder, format="parquet", partitioning="hive").count_rows(),
            "duckdb": duckdb.sql(f"SELECT count(*) FROM read_parquet('{folder}/**/*.parquet', "
                                 "hive_partitioning = true)").fetchall()[0][0],
        }
    assert set(counts().values()) == {3}
    assert set(rows(warehouse, "SELECT count(*) FROM runs")[0]) == {2}
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{warehouse.root}/runs/**/*.parquet')").fetchall() == [(2,)]
    assert session.execute("SELECT count(*) FROM kernels").fetchall() == [(3,)]   # bound before: still reads
    session.close()
