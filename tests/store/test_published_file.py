"""warehouse.duckdb is verified, not trusted: a user who opens it read-write in the DuckDB shell and
redefines or drops a view (`create or replace view kernels as select 1`) is found by kwh check and
by every reader (its objects' definitions are hashed when kwh publishes it, and compared on every
reader start, besides its size and mtime), and the file is rebuilt by the next writer, by a reader
when no writer is busy, or by kwh check --repair, keeping the user's own tables and views. kwh's
readers and the DuckDB shell answer alike, or kwh says that they do not."""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from conftest import DATA, rows

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.store import check, fast_read, layout, publish
from kwarehouse.store.catalog import catalog_info
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

GPT2 = DATA / "ncu-gpt2-h100"
SHELL = Path(sys.executable).parent / "duckdb"


def in_a_users_session(path: Path, *statements: str) -> None:
    """What `duckdb warehouse/warehouse.duckdb` (read-write, the shell's default) does with them."""
    script = "import duckdb, sys; con = duckdb.connect(sys.argv[1])\nfor s in sys.argv[2:]: con.execute(s)\ncon.close()"
    subprocess.run([sys.executable, "-c", script, str(path), *statements], check=True)


def shell_answer(path: Path, sql: str):
    """The answer a read-only DuckDB session gives."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def cli(warehouse: Warehouse, *args: str):
    return CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *args])


@pytest.fixture
def warehouse(tmp_path) -> Warehouse:
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest([GPT2], warehouse).failed == []
    return warehouse


def test_a_redefined_view_is_named_by_check_and_rebuilt_by_repair(warehouse):
    in_a_users_session(warehouse.duckdb_path, "CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x")
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernels") == [(1,)]
    found = check.check(warehouse)
    assert found.problems == [
        "warehouse.duckdb: changed outside kwh (view kernels redefined): DuckDB sessions reading it get other "
        "answers than kwh; kwh check --repair rebuilds it (your own tables and views are kept); open it with "
        "duckdb -readonly"]
    repaired = check.check(warehouse, repair=True)
    assert repaired.ok, repaired.problems
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernels") == [(3,)]
    kept = list((warehouse.root / "_quarantine").iterdir())      # the changed file, set aside
    assert len(kept) == 1 and shell_answer(kept[0], "SELECT count(*) FROM kernels") == [(1,)]


def test_a_dropped_view_is_rebuilt_by_the_next_writer_even_with_nothing_new(warehouse):
    in_a_users_session(warehouse.duckdb_path, "DROP VIEW kernel_popularity")
    assert not check.check(warehouse).ok
    done = cli(warehouse, "ingest", str(GPT2))          # nothing new to ingest
    assert done.exit_code == 0, done.output
    assert "view kernel_popularity dropped" in done.output
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernel_popularity")[0][0] > 0
    assert check.check(warehouse).ok


def test_the_users_own_objects_are_kept_and_kwhs_restored(warehouse):
    in_a_users_session(warehouse.duckdb_path, "CREATE TABLE my_notes AS SELECT 42 AS x",
                       "CREATE VIEW my_count AS SELECT count(*) AS n FROM kernels",
                       "CREATE OR REPLACE VIEW runs AS SELECT * FROM my_notes")
    assert "changed outside kwh (view runs redefined, table my_notes added, view my_count added)" in \
        check.check(warehouse).problems[0]
    assert check.check(warehouse, repair=True).ok
    assert shell_answer(warehouse.duckdb_path, "SELECT x FROM my_notes") == [(42,)]
    assert shell_answer(warehouse.duckdb_path, "SELECT n FROM my_count") == [(3,)]
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM runs") == [(1,)]
    # the user's objects are now part of what kwh published: nothing to report until the next change
    assert check.check(warehouse).ok


def test_kwhs_macros_are_its_own_objects_and_a_users_are_kept(warehouse):
    """The views call kwh's macros (views/macros/): one a user redefines is found and restored like a
    view; a macro of the user's own is kept with the view that calls it."""
    expected = shell_answer(warehouse.duckdb_path, "SELECT sm_pct FROM kernel_time ORDER BY ALL")
    in_a_users_session(warehouse.duckdb_path, "CREATE OR REPLACE MACRO time_weighted(x, weight) AS 0",
                       "CREATE MACRO doubled(x) AS 2 * x",
                       "CREATE VIEW my_kernels AS SELECT doubled(count(*)) AS n FROM kernels")
    assert "changed outside kwh (macro time_weighted redefined, macro doubled added, view my_kernels added)" in \
        check.check(warehouse).problems[0]
    assert check.check(warehouse, repair=True).ok
    assert shell_answer(warehouse.duckdb_path, "SELECT sm_pct FROM kernel_time ORDER BY ALL") == expected
    assert shell_answer(warehouse.duckdb_path, "SELECT n FROM my_kernels") == [(6,)]
    assert check.check(warehouse).ok


def test_a_change_that_keeps_size_and_mtime_is_found_by_the_definitions_hash(warehouse):
    """A file system with coarse times (FAT, some NFS), and a DuckDB file whose size is a whole number
    of blocks, can keep both through a change: the hash of the objects' definitions still differs."""
    in_a_users_session(warehouse.duckdb_path, "CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x")
    with warehouse.engine.begin() as con:
        recorded = json.loads(con.execute(sa.select(catalog_info.c.value)
                                          .where(catalog_info.c.key == publish.PUBLISHED_KEY)).scalar())
        recorded["stat"] = layout.file_stat(warehouse.duckdb_path)
        con.execute(catalog_info.update().where(catalog_info.c.key == publish.PUBLISHED_KEY)
                    .values(value=json.dumps(recorded)))
    assert fast_read.connect(warehouse.root) is None          # kwh sql's fast path does not answer from it
    assert "view kernels redefined" in check.check(warehouse).problems[0]
    assert rows(warehouse, "SELECT count(*) FROM kernels") == [(3,)]      # a reader rebuilt it
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernels") == [(3,)]
    assert check.check(warehouse).ok


def test_a_redefinition_under_kwhs_own_comment_is_found_and_repaired_by_check(warehouse):
    """Readers compare names and comments (cheap); kwh check compares every definition's hash, and
    its repair does not start from the changed file."""
    expected = rows(warehouse, "SELECT count(*) FROM kernel_popularity")
    assert expected[0][0] > 1
    in_a_users_session(warehouse.duckdb_path, "CREATE OR REPLACE VIEW kernel_popularity AS SELECT 1 AS x",
                       f"COMMENT ON VIEW kernel_popularity IS '{layout.OWN_TAG}'")
    with warehouse.engine.begin() as con:     # and size and mtime as kwh recorded them
        recorded = json.loads(con.execute(sa.select(catalog_info.c.value)
                                          .where(catalog_info.c.key == publish.PUBLISHED_KEY)).scalar())
        recorded["stat"] = layout.file_stat(warehouse.duckdb_path)
        con.execute(catalog_info.update().where(catalog_info.c.key == publish.PUBLISHED_KEY)
                    .values(value=json.dumps(recorded)))
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernel_popularity") == [(1,)]
    assert "(view kernel_popularity redefined)" in check.check(warehouse).problems[0]
    assert check.check(warehouse, repair=True).ok
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernel_popularity") == expected


def test_readers_and_the_shell_agree_or_kwh_says_so(warehouse):
    in_a_users_session(warehouse.duckdb_path, "CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x")
    # a writer is busy (its lock held): the reader cannot rebuild the file, answers from the catalog,
    # and says (to the caller's warn) that DuckDB sessions reading the file get other answers
    lines: list[str] = []
    with open(warehouse.root / ".kwh.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            assert rows(Warehouse(warehouse.root, warn=lines.append), "SELECT count(*) FROM kernels") == [(3,)]
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    said = "\n".join(lines)
    assert "warehouse.duckdb was changed outside kwh (view kernels redefined)" in said
    assert "DuckDB sessions reading it get other answers than kwh" in said
    # the writer is gone: the next reader rebuilds it, and says what it replaced (kept, without a warn)
    reader = Warehouse(warehouse.root)
    assert rows(reader, "SELECT count(*) FROM kernels") == [(3,)]
    said = "\n".join(reader.warnings)
    assert "view kernels redefined" in said and "_quarantine" in said
    assert shell_answer(warehouse.duckdb_path, "SELECT count(*) FROM kernels") == [(3,)]


def test_kwh_sql_says_so_on_a_read_only_warehouse(warehouse, tmp_path):
    """A warehouse kwh cannot write (here: a writer holds it) still answers right, with the warning."""
    in_a_users_session(warehouse.duckdb_path, "DROP VIEW kernels")
    with open(warehouse.root / ".kwh.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            done = subprocess.run([sys.executable, "-m", "kwarehouse", "-w", str(warehouse.root), "sql",
                                   "SELECT count(*) AS n FROM kernels", "--csv"], capture_output=True, text=True,
                                  env={"PYTHONPATH": str(Path(publish.__file__).parents[2]), "PATH": "/usr/bin:/bin"})
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    assert done.returncode == 0 and done.stdout.split() == ["n", "3"], done.stderr
    assert "changed outside kwh (view kernels dropped)" in done.stderr


@pytest.mark.skipif(not SHELL.exists(), reason="the DuckDB shell (pip install duckdb-cli) is not installed")
def test_a_users_own_database_attaches_the_warehouse_for_their_views(warehouse, tmp_path):
    """The README's recipe: views of your own live in a database of yours, which attaches
    warehouse.duckdb read-only; warehouse.duckdb is never written, and rebuilds do not touch them."""
    attach = f"ATTACH '{warehouse.duckdb_path}' AS kwh (READ_ONLY)"
    mine = tmp_path / "mine.duckdb"
    before = layout.file_stat(warehouse.duckdb_path)

    def shell(sql: str) -> str:
        done = subprocess.run([str(SHELL), str(mine), "-csv", "-noheader", "-cmd", attach, "-c", sql],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 0 and "Error" not in done.stderr, done.stderr
        return done.stdout.strip()

    shell("CREATE OR REPLACE VIEW my_top AS SELECT kernel_base, count(*) AS n FROM kwh.kernels GROUP BY 1")
    assert shell("SELECT sum(n) FROM my_top") == "3"
    assert layout.file_stat(warehouse.duckdb_path) == before and check.check(warehouse).ok
    assert ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="vecadd").failed == []
    assert shell("SELECT sum(n) FROM my_top") == "6"       # the new runs, through the same view
