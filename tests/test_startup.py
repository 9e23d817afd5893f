"""CLI start-up: kwh --help loads no data library, kwh sql / kwh query on a warehouse whose
warehouse.duckdb is current answer through fast_read (no SQLAlchemy, polars or pyarrow), and kwh ingest
of one file loads no pandas, Spark or MCP SDK and freezes what it loads. Import lists, not timings:
bench/ measures the time (bench/timelines.py --fixed-cost for a one-file ingest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kwarehouse import cli, schema
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.answers import export
from kwarehouse.store import fast_read, layout
from kwarehouse.collect.command import profile
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA

HEAVY = ("sqlalchemy", "polars", "pyarrow", "pandas", "duckdb")


def imported(*args: str, module: str = "kwarehouse") -> tuple[set[str], subprocess.CompletedProcess]:
    """The top-level modules `python -X importtime -m <module> ARGS` imported, and the process."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], capture_output=True, text=True)
    names = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    return names, done


def test_help_loads_no_data_library():
    for module in ("kwarehouse", "kwarehouse.cli"):
        names, done = imported("--help", module=module)
        assert done.returncode == 0 and "Commands:" in done.stdout, done.stderr[-2000:]
        assert not names & set(HEAVY), (module, names & set(HEAVY))


def loaded(*args: str) -> tuple[set[str], int, subprocess.CompletedProcess]:
    """The modules in sys.modules when `kwh ARGS` exits (full dotted names), how many objects the
    garbage collector no longer scans then (gc.freeze), and the process."""
    script = ("import atexit, gc, runpy, sys\n"
              "atexit.register(lambda: print('MODULES:', *sorted(sys.modules), gc.get_freeze_count(), file=sys.stderr))\n"
              f"sys.argv = ['kwh', *{list(args)!r}]\n"
              "runpy.run_module('kwarehouse', run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    *modules, frozen = done.stderr.rpartition("MODULES: ")[2].split()
    return set(modules), int(frozen), done


# What no ingest of one file needs: pandas (pyarrow imports it the first time it is handed a Python list,
# to ask whether it is a pandas object: the ingest path hands it none, see build.run.one_row), Spark and its SQL translator, the MCP SDK, the HTTP stack. And what no command
# needs that lists no subcommand's help: a test runner's, a notebook's.
NOT_FOR_INGEST = ("pandas", "pyspark", "sqlglot", "mcp", "httpx", "rich", "tqdm", "IPython", "pytest")


@pytest.mark.parametrize("export", ["torch-trace-gpt2/trace.json", "nsys-sqlite-rtx3090/report1.sqlite"])
def test_ingest_of_one_file_loads_no_pandas_spark_or_mcp_and_freezes_what_it_loads(export, tmp_path):
    modules, frozen, done = loaded("-w", str(tmp_path / "wh"), "ingest", str(DATA / export))
    assert done.returncode == 0 and "ingested 1 run(s)" in done.stdout, done.stdout + done.stderr[-2000:]
    names = {name.split(".")[0] for name in modules}
    assert "pyarrow" in names and not names & set(NOT_FOR_INGEST), names & set(NOT_FOR_INGEST)
    assert "kwarehouse.collect.command" not in modules    # kwh profile's command: --tag is collect/tags.py
    # the libraries' objects, imported once, are out of the garbage collector's reach (cli._long_lived_imports)
    assert frozen > 10_000, frozen


def test_help_loads_none_of_what_ingest_leaves_out():
    names, done = imported("--help")
    assert done.returncode == 0 and not names & set(NOT_FOR_INGEST), names & set(NOT_FOR_INGEST)


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Warehouse:
    warehouse = Warehouse(tmp_path_factory.mktemp("startup") / "wh")
    assert ingest_job.ingest([DATA / "ncu-gpt2-h100"], warehouse).failed == []
    return warehouse


def test_sql_and_query_on_a_current_warehouse_skip_sqlalchemy_polars_pyarrow(published):
    names, done = imported("-w", str(published.root), "sql", "select count(*) AS n FROM kernels")
    assert done.returncode == 0 and done.stdout.split()[-3] == "3", done.stdout + done.stderr[-2000:]
    assert not names & {"sqlalchemy", "polars", "pyarrow", "pandas"}, names
    names, done = imported("-w", str(published.root), "query", "runs", "--csv")
    assert done.returncode == 0 and done.stdout.startswith("run_id,"), done.stderr[-2000:]
    assert not names & {"sqlalchemy", "polars", "pyarrow", "pandas"}, names


def test_fast_read_answers_only_when_the_published_file_is_current(published, tmp_path):
    import shutil
    root = tmp_path / "wh"
    shutil.copytree(published.root, root)
    # a copied warehouse: warehouse.duckdb names the old folder's files, so the full path decides
    assert fast_read.connect(root) is None
    Warehouse(root).refresh_duckdb()
    con = fast_read.connect(root)
    assert con is not None and con.execute("SELECT count(*) FROM kernels").fetchall() == [(3,)]
    con.close()
    # the warehouse's own thresholds change the definitions: stale
    (root / "views").mkdir()
    (root / "views" / "bottleneck_thresholds.csv").write_text("name,value\ncompute_pct,61\n", encoding="utf-8")
    assert fast_read.connect(root) is None
    Warehouse(root).refresh_duckdb()
    assert fast_read.connect(root) is not None
    # a WAL beside it, a missing committed file, a PostgreSQL-only warehouse: the full path
    wal = Path(f"{root / 'warehouse.duckdb'}.wal")
    wal.write_bytes(b"")
    assert fast_read.connect(root) is None
    wal.unlink()
    first = next(iter(Warehouse(root).snapshot().files["kernels"]))
    places = [root / layout.FILES / first, root / first]     # its _files/ link and its table folder path
    for number, place in enumerate(places):
        place.rename(tmp_path / f"moved-{number}")
    assert fast_read.connect(root) is None
    for number, place in enumerate(places):
        (tmp_path / f"moved-{number}").rename(place)
    assert fast_read.connect(root) is not None
    (root / "catalog.sqlite").rename(tmp_path / "catalog.sqlite")
    assert fast_read.connect(root) is None


def test_copies_of_constants_agree():
    assert cli.EXPORT_FORMATS == export.FORMATS
    assert profile.help.startswith(cli.PROFILE_SHORT_HELP.removesuffix("..."))
    assert sorted(schema.table_names()) == sorted(schema.tables())
