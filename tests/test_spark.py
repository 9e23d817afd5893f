"""The warehouse on Spark: every view and every queries/ file gives the same rows on DuckDB and on a
local Spark over the same Parquet (sorted, floats to 1e-9 relative)."""

from __future__ import annotations

import decimal
import math
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import DATA
from kwarehouse import views
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.jobs import rollup
from kwarehouse import spark as kspark
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

REPO = Path(__file__).parents[1]
QUERIES = sorted((REPO / "queries").glob("*.sql"))


def _java() -> bool:
    return shutil.which("java") is not None


needs_spark = pytest.mark.skipif(not _java(), reason="Spark needs Java 17 (Debian: openjdk-17-jre-headless)")


@pytest.fixture(scope="module")
def registered(spark, pristine_warehouse, tmp_path_factory):
    """Every test export plus the daily rollups, registered in `spark`."""
    root = tmp_path_factory.mktemp("spark") / "wh"
    shutil.copytree(pristine_warehouse, root)
    warehouse = Warehouse(root)
    rollup.rollup(warehouse)
    names = kspark.register(spark, root)
    return spark, warehouse, names


def canonical(value):
    """A row value from either engine as plain Python: structs as tuples, decimals as floats."""
    if hasattr(value, "asDict"):
        return tuple(canonical(v) for v in value)
    if isinstance(value, dict):
        return tuple(canonical(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _sort_key(row):
    # floats that differ in the last bits must still sort alike: key on 6 significant digits
    return tuple((0, "") if v is None else (1, f"{v:.6g}") if isinstance(v, float) else (2, repr(v)) for v in row)


def same_value(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None or isinstance(a, (str, tuple)) or isinstance(b, (str, tuple)):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return a == b


def assert_same_rows(spark_rows, duckdb_rows, what: str) -> None:
    left = sorted((canonical(r) for r in spark_rows), key=_sort_key)
    right = sorted((canonical(r) for r in duckdb_rows), key=_sort_key)
    assert len(left) == len(right), f"{what}: Spark {len(left)} rows, DuckDB {len(right)}"
    for s, d in zip(left, right):
        assert same_value(s, d), f"{what}: rows differ\n  Spark:  {s}\n  DuckDB: {d}"


# -- transpiling (no Spark needed) -------------------------------------------------------------

@pytest.mark.parametrize("view", list(views.all_views()))
def test_every_view_is_portable(view):
    kspark.check_portable(views.view_named(view).sql, view)


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.name)
def test_every_query_is_portable(path):
    kspark.check_portable(path.read_text(), path.name)


@pytest.mark.parametrize("sql, spark_sql", [
    ("SELECT quantile_cont(x, 0.9) FROM t", "SELECT PERCENTILE(x, 0.9) FROM t"),
    ("SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x) FROM t", "SELECT PERCENTILE(x, 0.9) FROM t"),
    ("SELECT log(x), ln(x) FROM t", "SELECT LOG10(x), LN(x) FROM t"),
    ("SELECT 100.0 * a / b FROM t", "SELECT CAST(100.0 AS DOUBLE) * a / b FROM t"),
    ("SELECT regexp_replace(s, 'a', 'b', 'g') FROM t", "SELECT REGEXP_REPLACE(s, 'a', 'b') FROM t"),
    # Spark has no macros: kwh's are expanded from views/macros/, an argument keeping its precedence
    ("SELECT time_weighted(k.sm_pct, a + b) FROM t",
     "SELECT SUM(k.sm_pct * (a + b)) / NULLIF(SUM(CASE WHEN NOT k.sm_pct IS NULL THEN (a + b) END), 0) FROM t"),
    # arguments named like the macro's parameters are not substituted twice
    ("SELECT time_weighted(weight, x) FROM t",
     "SELECT SUM(weight * x) / NULLIF(SUM(CASE WHEN NOT weight IS NULL THEN x END), 0) FROM t"),
])
def test_transpile_rewrites_what_would_mean_something_else(sql, spark_sql):
    assert kspark.transpile(sql) == spark_sql


@pytest.mark.parametrize("sql, reason", [
    ("SELECT regexp_replace(s, 'a', 'b') FROM t", "regexp_replace without the 'g' option"),
    ("SELECT a FROM t UNION ALL BY NAME SELECT a FROM u", "UNION BY NAME"),
    ("SELECT * REPLACE (1 AS a) FROM t", "* REPLACE"),
    ("SELECT COLUMNS('x.*') FROM t", "COLUMNS()"),
    ("SELECT list_transform(l, x -> x + 1) FROM t", "-> lambdas"),
])
def test_transpile_refuses_what_spark_would_run_differently(sql, reason):
    with pytest.raises(kspark.NotPortable, match=reason.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        kspark.transpile(sql, "q.sql")


def test_comments_may_say_anything():
    assert kspark.transpile("-- a -> b, UNION ALL BY NAME\nSELECT 1 AS a") == "SELECT 1 AS a"


def test_spark_types_cover_the_schema():
    from kwarehouse import schema
    for name in schema.tables():
        assert "`model`" in kspark.table_ddl(name) or "`day`" in kspark.table_ddl(name)
    assert kspark.spark_type("MAP(VARCHAR, VARCHAR)") == "MAP<STRING, STRING>"
    assert kspark.spark_type("VARCHAR[]") == "ARRAY<STRING>"
    assert kspark.spark_type("TIMESTAMP") == "TIMESTAMP_NTZ"


def test_views_dialect_spark_prints_every_view():
    result = CliRunner().invoke(main, ["views", "--dialect", "spark"])
    assert result.exit_code == 0, result.output
    created = [line.split("`")[1] for line in result.output.splitlines() if line.startswith("CREATE")]
    assert created == [v.name for v in views.creation_order()]
    one = CliRunner().invoke(main, ["views", "show", "roofline", "--dialect", "spark"])
    assert one.output.startswith("CREATE OR REPLACE TEMPORARY VIEW `roofline` AS WITH borrowed AS")
    assert "read_parquet" not in result.output


# -- parity on a local Spark -------------------------------------------------------------------

def test_register_creates_every_table_and_view(registered):
    spark, _, names = registered
    temporary = {row.tableName for row in spark.sql("SHOW TABLES").collect() if row.isTemporary}
    assert set(names) <= temporary
    assert set(views.all_views()) <= set(names)


@pytest.mark.parametrize("table", ["runs", "kernels", "metrics", "rules", "kernel_launches",
                                   "kernel_summaries", "nvtx_summaries", "rollup_kernels_daily",
                                   "rollup_libraries_daily", "metric_catalog", "bottleneck_thresholds",
                                   "gpu_peaks"])
def test_tables_match(registered, table):
    spark, warehouse, _ = registered
    con = warehouse.connect()
    # maps compare as sorted (key, value) lists: their order is not part of their value
    columns = [(c, t) for c, t, *_ in con.execute(f"DESCRIBE {table}").fetchall()]
    duck = ", ".join(f"map_entries(\"{c}\")" if t.startswith("MAP") else f'"{c}"' for c, t in columns)
    spark_columns = ", ".join(f"map_entries(`{c}`)" if t.startswith("MAP") else f"`{c}`" for c, t in columns)
    duck_rows = con.execute(f"SELECT {duck} FROM {table}").fetchall()
    spark_rows = spark.sql(f"SELECT {spark_columns} FROM {table}").collect()
    if table not in ("kernel_launches",):
        assert duck_rows, f"{table} is empty on the test warehouse"
    assert_same_rows(spark_rows, duck_rows, table)


# views the shared test exports leave empty, checked on a warehouse of their own below
TESTED_ON_THEIR_OWN_DATA = {"gpu_telemetry": "the shared test exports have no telemetry logs: "
                                             "test_gpu_telemetry_parity checks it"}


@pytest.mark.parametrize("view", list(views.all_views()))
def test_view_parity(registered, view):
    if view in TESTED_ON_THEIR_OWN_DATA:
        pytest.skip(TESTED_ON_THEIR_OWN_DATA[view])
    spark, warehouse, _ = registered
    spark_rows = spark.sql(f"SELECT * FROM `{view}`").collect()
    duck_rows = warehouse.connect().execute(f'SELECT * FROM "{view}"').fetchall()
    assert duck_rows, f"{view} is empty on the test warehouse: the parity test would prove nothing"
    assert_same_rows(spark_rows, duck_rows, view)


@pytest.mark.parametrize("path", QUERIES, ids=lambda p: p.name)
def test_query_parity(registered, path):
    spark, warehouse, _ = registered
    sql = path.read_text()
    spark_rows = spark.sql(kspark.transpile(sql, path.name)).collect()
    duck_rows = warehouse.connect().execute(sql).fetchall()
    assert duck_rows, f"{path.name} is empty on the test warehouse"
    assert_same_rows(spark_rows, duck_rows, path.name)


def test_partition_values_stay_strings(spark, tmp_path):
    """A model named 007 must not become the integer 7 (Spark's partition type inference)."""
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([DATA / "ncu-gtx1080-raw"], warehouse, model="007")
    assert not report.failed and report.runs[0].model == "007"
    session = spark.newSession()
    kspark.register(session, warehouse.root, views_for="")   # the tables: the views cost a register each
    assert [tuple(r) for r in session.sql("SELECT DISTINCT model FROM kernels").collect()] == [("007",)]
    assert session.sql("SELECT count(*) FROM rollup_kernels_daily").collect()[0][0] == 0


def test_register_refuses_a_folder_without_warehouse(spark, tmp_path):
    with pytest.raises(kspark.KwhError, match="no warehouse here"):
        kspark.register(spark.newSession(), tmp_path)


def test_spark_sql_command(registered):
    pristine_warehouse = registered[1].root
    result = CliRunner().invoke(main, ["-w", str(pristine_warehouse), "spark-sql", "--csv", "--from-duckdb",
                                       "-f", str(REPO / "queries" / "kernels_per_model.sql")])
    assert result.exit_code == 0, result.output
    duck = CliRunner().invoke(main, ["-w", str(pristine_warehouse), "sql", "--csv", "-f",
                                     str(REPO / "queries" / "kernels_per_model.sql")])
    assert result.output.splitlines()[0] == duck.output.splitlines()[0]
    assert len(result.output.splitlines()) == len(duck.output.splitlines()) > 2
    bad = CliRunner().invoke(main, ["-w", str(pristine_warehouse), "spark-sql", "SELECT nope FROM kernels"])
    assert bad.exit_code == 1
    assert bad.output.count("\n") == 1 and "Error: Spark: [UNRESOLVED_COLUMN" in bad.output


# -- ingest fan-out on Spark -------------------------------------------------------------------

def test_spark_ingest_equals_local_ingest(spark, pristine_warehouse, tmp_path):
    from conftest import EXPORT_FOLDERS, warehouse_rows
    from kwarehouse.jobs import fanout
    sources = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest(sources, warehouse, fan_out=fanout.spark_tasks(spark))
    assert not report.failed and len(report.runs) == 25
    assert warehouse_rows(warehouse) == warehouse_rows(Warehouse(pristine_warehouse))
    again = ingest_job.ingest(sources, warehouse, fan_out=fanout.spark_tasks(spark))
    assert again.runs == [] and all(why.startswith("already ingested") or p.endswith("gpu.txt")
                                    for p, why in again.skipped)   # gpu.txt: not a profiler export (text)


def test_spark_ingest_command(spark, tmp_path):
    result = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "ingest", "--engine", "spark",
                                       str(DATA / "ncu-gpt2-h100"), str(DATA / "bad" / "empty.csv")])
    assert result.exit_code == 1
    assert "Error: " in result.output and "empty.csv: file is empty" in result.output
    assert "ingested 1 run(s), 3 kernels; 0 already ingested, 0 other file(s) ignored, 1 failed" in result.output


def test_a_failing_spark_task_is_one_line(spark, tmp_path, monkeypatch):
    from kwarehouse.jobs import fanout
    from kwarehouse.errors import KwhError

    def broken(job, context):
        raise ZeroDivisionError("worker broke")

    # the task function travels to the Spark workers by value: patch the reference the lambda uses
    monkeypatch.setattr(fanout, "prepare_folder", broken)
    with pytest.raises(KwhError, match="a Spark ingest task failed.*ZeroDivisionError: worker broke"):
        ingest_job.ingest([DATA / "ncu-gpt2-h100"], Warehouse(tmp_path / "wh"), fan_out=fanout.spark_tasks(spark))


def test_views_dialect_duckdb_is_a_script_duckdb_runs(ingested):
    result = CliRunner().invoke(main, ["views", "--dialect", "duckdb"])
    assert result.exit_code == 0, result.output
    con = ingested.connect()
    # kwh's own views are read-only here (from warehouse.duckdb); the script's views go to the
    # connection's own database, in front of them
    con.execute(result.output)
    assert con.execute("SELECT count(*) FROM memory.main.design_signals").fetchall()[0][0] > 0


def test_comment_markers_inside_strings_are_kept():
    assert kspark.transpile("SELECT '--x' AS a -- a comment -> here") == "SELECT '--x' AS a"


@needs_spark
def test_gpu_telemetry_parity(spark, tmp_path):
    """gpu_telemetry on a real H100 capture (NVML, nvidia-smi and dmon logs beside a PyTorch trace), in a
    Spark session of its own (temporary views belong to a session: the shared registration stays)."""
    warehouse = Warehouse(tmp_path / "wh")
    result = ingest_job.ingest([DATA / "telemetry-gemm-h100"], warehouse)
    assert [f for f in result.failed if "noheader" not in str(f)] == []   # that log is there to be refused
    own = spark.newSession()
    kspark.register(own, warehouse.root, views_for="gpu_telemetry")   # and what it reads, not every view
    duck_rows = warehouse.connect().execute("SELECT * FROM gpu_telemetry").fetchall()
    assert duck_rows
    assert_same_rows(own.sql("SELECT * FROM gpu_telemetry").collect(), duck_rows, "gpu_telemetry")


def test_spark_sql_registers_the_views_its_query_names_and_what_they_read():
    every = views.all_views()
    needed = kspark.views_named_by("SELECT * FROM what_to_fix_first -- not roofline_x")
    assert "what_to_fix_first" in needed and needed < set(every)
    for name in needed:   # closed: every view a needed view reads is needed
        assert views.reads(every[name]) <= needed
    assert kspark.views_named_by("SELECT nope FROM kernels") == set()
