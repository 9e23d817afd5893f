"""The warehouse on Spark: the same tables, the same views (transpiled from their DuckDB .sql files
with sqlglot), in a user's SparkSession.

    from kwarehouse.spark import register
    register(spark, "/data/warehouse")          # tables + views as temporary views
    spark.sql("SELECT * FROM kernel_popularity").show()

Tables are registered over exactly the Parquet files the catalog lists (files a compaction retired
stay on disk a while for DuckDB readers and must not be read twice), with the column types of
schema.sql, so partition values such as gpu=007 stay strings. pyspark is an optional extra
(`pip install kwarehouse[spark]`); importing this module does not need it.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

import sqlglot
from sqlglot import exp

from kwarehouse import schema, views
from kwarehouse.errors import KwhError

# Spark settings kwh's own local sessions use (a user's session keeps its own).
LOCAL_CONF = {
    # types come from schema.sql; never guess them from directory names
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


class NotPortable(KwhError):
    """SQL that would run differently (or not at all) on Spark."""


# DuckDB constructs that sqlglot passes through to Spark unchanged and Spark rejects, or that it
# translates into something that silently means another thing. docs/portable-sql.md has the list.
_UNPORTABLE_TEXT = [
    (re.compile(r"\bUNION\s+(ALL\s+)?BY\s+NAME\b", re.I), "UNION BY NAME; list the columns of both sides"),
    (re.compile(r"\*\s*(REPLACE|EXCLUDE)\s*\(", re.I), "* REPLACE / * EXCLUDE; list the columns"),
    (re.compile(r"\bCOLUMNS\s*\(", re.I), "COLUMNS(); list the columns"),
    (re.compile(r"\bPIVOT\b", re.I), "PIVOT; use max(CASE WHEN ...) per column"),
    (re.compile(r"->", re.I), "-> lambdas; use `lambda x: ...`"),
]


def spark_type(duckdb_type: str) -> str:
    """The Spark SQL type of a schema.sql (DuckDB) column type."""
    t = duckdb_type.strip().upper()
    if t.endswith("[]"):
        return f"ARRAY<{spark_type(t[:-2])}>"
    if t.startswith("MAP(") and t.endswith(")"):
        key, value = t[4:-1].split(",", 1)
        return f"MAP<{spark_type(key)}, {spark_type(value)}>"
    # DuckDB's TIMESTAMP has no time zone: Spark's TIMESTAMP_NTZ is the same thing
    simple = {"VARCHAR": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE",
              "BOOLEAN": "BOOLEAN", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP_NTZ", "FLOAT": "FLOAT"}
    if t not in simple:
        raise KwhError(f"internal: no Spark type for schema.sql type {duckdb_type}")
    return simple[t]


def table_ddl(name: str) -> str:
    """The Spark schema (DDL string) of one warehouse table, partition columns included."""
    return ", ".join(f"`{column}` {spark_type(t)}" for column, t in schema.tables()[name].sql_types)


def check_portable(sql: str, what: str = "query") -> None:
    """Raise NotPortable for DuckDB SQL that sqlglot cannot carry to Spark with the same meaning."""
    code = _without_comments(sql)
    for pattern, advice in _UNPORTABLE_TEXT:
        if pattern.search(code):
            raise NotPortable(f"{what}: not portable to Spark: {advice}")
    tree = sqlglot.parse_one(code, read="duckdb")
    for node in tree.find_all(exp.RegexpReplace):
        modifiers = node.args.get("modifiers")
        if modifiers is None or "g" not in modifiers.name:
            # DuckDB replaces the first match, Spark every match
            raise NotPortable(f"{what}: not portable to Spark: regexp_replace without the 'g' option")


def transpile(sql: str, what: str = "query") -> str:
    """DuckDB SQL as Spark SQL: sqlglot plus the rewrites it lacks (see check_portable for what is refused)."""
    check_portable(sql, what)
    tree = sqlglot.parse_one(_without_comments(sql).strip().rstrip(";"), read="duckdb")
    tree = tree.transform(_expand_macros).transform(_exact_spark_functions)
    return tree.sql(dialect="spark")


@functools.cache
def _macro_definitions() -> dict[str, tuple[list[str], exp.Expression]]:
    """name -> (parameter names, body) of every macro of views/macros/, parsed from its CREATE MACRO."""
    definitions = {}
    for macro in views.all_macros().values():
        create = sqlglot.parse_one(_without_comments(macro.sql).strip().rstrip(";"), read="duckdb")
        if not isinstance(create, exp.Create) or create.args.get("kind") != "MACRO":
            raise KwhError(f"internal: views/macros/{macro.name}.sql must hold one CREATE MACRO")
        parameters = [p.name.lower() for p in create.this.expressions]
        definitions[create.this.this.name.lower()] = (parameters, create.expression)
    return definitions


def _expand_macros(node: exp.Expression) -> exp.Expression:
    # Spark SQL has no macros: a call of one of kwh's DuckDB macros becomes its body with the call's
    # arguments in place of the parameters (each in parentheses unless it is a column, literal or
    # function call, so that `a + b` keeps its precedence inside `x * weight`), as DuckDB expands it.
    if not isinstance(node, exp.Anonymous) or node.name.lower() not in _macro_definitions():
        return node
    parameters, body = _macro_definitions()[node.name.lower()]
    if len(node.expressions) != len(parameters):
        raise NotPortable(f"{node.name}() takes {len(parameters)} arguments, not {len(node.expressions)}")
    arguments = {name: argument if isinstance(argument, (exp.Column, exp.Literal, exp.Func, exp.Paren))
                 else exp.Paren(this=argument)
                 for name, argument in zip(parameters, node.expressions)}

    def substitute(part: exp.Expression) -> exp.Expression:
        if isinstance(part, exp.Column) and not part.table and part.name.lower() in arguments:
            return arguments[part.name.lower()].copy()
        return part
    return body.copy().transform(substitute)


def _exact_spark_functions(node: exp.Expression) -> exp.Expression:
    # sqlglot turns percentile_cont ... WITHIN GROUP into PERCENTILE_APPROX and quantile_cont into a
    # PERCENTILE_CONT call Spark does not have; Spark's PERCENTILE is exact, like DuckDB's.
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
        order = node.expression
        column = order.expressions[0].this if isinstance(order, exp.Order) else order
        return exp.Anonymous(this="PERCENTILE", expressions=[column.copy(), node.this.this.copy()])
    if isinstance(node, exp.PercentileCont) and node.args.get("expression") is not None \
            and not isinstance(node.parent, exp.WithinGroup):
        return exp.Anonymous(this="PERCENTILE", expressions=[node.this.copy(), node.expression.copy()])
    # A literal such as 100.0 is DECIMAL on both engines, but DuckDB divides decimals in DOUBLE while
    # Spark keeps DECIMAL and rounds to 6 places: make such literals DOUBLE on Spark.
    if isinstance(node, exp.Literal) and not node.is_string and re.search(r"[.eE]", node.name):
        return exp.cast(node.copy(), exp.DataType.build("DOUBLE"))
    # DuckDB's one-argument log() is log10; Spark's is the natural log
    if isinstance(node, exp.Log) and node.args.get("expression") is None:
        return exp.Anonymous(this="LOG10", expressions=[node.this.copy()])
    return node


_STRING_OR_COMMENT = re.compile(r"('(?:[^']|'')*')|--[^\n]*")


def _without_comments(sql: str) -> str:
    """The SQL with -- comments removed (they hold prose such as '->' that is not code); '--' inside
    a string literal stays."""
    return _STRING_OR_COMMENT.sub(lambda m: m.group(1) or "", sql)


def view_statements() -> list[tuple[str, str]]:
    """(view name, Spark SQL CREATE TEMPORARY VIEW statement) for every view, in creation order."""
    return [(view.name, f"CREATE OR REPLACE TEMPORARY VIEW `{view.name}` AS "
                        f"{transpile(view.sql, f'view {view.name}')}")
            for view in views.creation_order()]


def register(spark, warehouse_path: str | Path, catalog: str | None = None,
             views_for: str | None = None) -> list[str]:
    """Create every warehouse table and view as a temporary view in `spark`; returns their names.

    warehouse_path: the warehouse folder (a path the driver and the executors both read).
    catalog: its catalog URL when it is not catalog.sqlite in the folder (as for kwh --catalog).
    views_for: SQL text; only the views it names, and the views those read, are created (the tables
    always are): a view that others read is computed at register, seconds each on a local Spark."""
    from kwarehouse.store.warehouse import Warehouse
    from kwarehouse import normalize

    warehouse = Warehouse(warehouse_path, catalog)
    if not warehouse.exists:
        raise KwhError(f"{warehouse.root}: no warehouse here (no catalog); run kwh ingest first")
    from pyspark.sql import functions

    from kwarehouse.store import bind
    names = []
    snapshot = warehouse.snapshot()     # one catalog snapshot for every table
    for name, spec in schema.tables().items():
        ddl = table_ddl(name)
        frames = []
        # folders whose names abbreviate a long or odd model/GPU name get the real one from the catalog
        for group in bind.table_files(warehouse.root, snapshot, name):
            frame = spark.read.schema(ddl).option("basePath", str(group.base)).parquet(*map(str, group.paths))
            for column, value in group.real:
                frame = frame.withColumn(column, functions.lit(value))
            frames.append(frame.select(*[f"`{column}`" for column, _ in spec.sql_types]))
        if frames:
            frame = frames[0]
            for other in frames[1:]:
                frame = frame.unionByName(other)
        else:
            frame = spark.createDataFrame([], ddl)
        frame.createOrReplaceTempView(name)
        names.append(name)
    spark.createDataFrame(views.thresholds(warehouse.root), "name STRING, value DOUBLE, description STRING") \
        .createOrReplaceTempView("bottleneck_thresholds")
    catalog_rows = normalize.metric_catalog()
    spark.createDataFrame(catalog_rows.rows(), ", ".join(
        f"`{c}` {_polars_spark_type(t)}" for c, t in catalog_rows.schema.items())) \
        .createOrReplaceTempView("metric_catalog")
    from kwarehouse.normalize import peaks
    peak_rows = peaks.peak_frame()
    spark.createDataFrame(peak_rows.rows(), ", ".join(
        f"`{c}` {_polars_spark_type(t)}" for c, t in peak_rows.schema.items())).createOrReplaceTempView("gpu_peaks")
    names += ["bottleneck_thresholds", "metric_catalog", "gpu_peaks"]
    for name, (columns, rows) in views.reference_tables().items():
        spark.createDataFrame(rows, ", ".join(f"`{c}` STRING" for c in columns)).createOrReplaceTempView(name)
        names.append(name)
    # A view other views read is computed once and kept as a local checkpoint: Spark inlines views,
    # and the verdict views (design_signals, what_to_fix_first) nest kernel_time, bottleneck_class,
    # gemm_efficiency, ... so deeply that analysing their inlined plans ran the driver out of memory.
    shared = read_by_other_views()
    wanted = None if views_for is None else views_named_by(views_for)
    for view in views.creation_order():
        if wanted is not None and view.name not in wanted:
            continue
        select = transpile(view.sql, f"view {view.name}")
        if view.name in shared:
            spark.sql(select).localCheckpoint(eager=True).createOrReplaceTempView(view.name)
        else:
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{view.name}` AS {select}")
        names.append(view.name)
    return names


def views_named_by(sql: str) -> set[str]:
    """The views whose names are words of `sql`, and every view those read, transitively."""
    every = views.all_views()
    wanted = set(re.findall(r"\w+", sql)) & every.keys()
    pending = list(wanted)
    while pending:
        for name in views.reads(every[pending.pop()]) - wanted:
            wanted.add(name)
            pending.append(name)
    return wanted


def read_by_other_views() -> set[str]:
    """Names of the views that some other view reads."""
    every = views.all_views()
    return {name for view in every.values() for name in views.reads(view)}


def _polars_spark_type(dtype) -> str:
    import polars as pl
    if dtype == pl.String:
        return "STRING"
    if dtype.is_integer():
        return "BIGINT"
    if dtype.is_float():
        return "DOUBLE"
    if isinstance(dtype, pl.List) and dtype.inner == pl.String:
        return "ARRAY<STRING>"
    raise KwhError(f"internal: no Spark type for metric_catalog column type {dtype}")


def local_session(cores: int = 2, app_name: str = "kwh"):
    """A SparkSession on this machine (local[cores]) with kwh's settings: for tests and `kwh spark-sql`."""
    return session(f"local[{cores}]", app_name)


def session(master: str, app_name: str = "kwh"):
    """A SparkSession on `master` (local[N], spark://host:port, yarn, ...) with kwh's settings."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise KwhError("pyspark is not installed: pip install 'kwarehouse[spark]' (and Java 17)") from None
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        # local workers run this interpreter (with kwarehouse and its dependencies), not `python3`;
        # pyspark reads it from the environment when the context starts
        os.environ["PYSPARK_PYTHON"] = sys.executable
    for key, value in LOCAL_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def views_script(names: list[str] | None = None) -> str:
    """Spark SQL that creates the views (all, or those named), one statement each, in creation order:
    what `kwh views --dialect spark` prints. The base tables must be registered first (register())."""
    wanted = set(names) if names else None
    statements = [statement for name, statement in view_statements() if wanted is None or name in wanted]
    return "".join(f"{statement};\n\n" for statement in statements)


def run_sql(warehouse_path: str | Path, query: str, *, catalog: str | None = None,
            from_duckdb: bool = False, cores: int = 2) -> tuple[list[str], list[tuple]]:
    """(columns, rows) of one query on a local Spark session over the warehouse: `kwh spark-sql`.
    from_duckdb: the query is DuckDB SQL (as in queries/) and is transpiled first."""
    session = local_session(cores)
    # errors reach the user as one line below; Spark would also log each one with its JVM stack
    session.sparkContext.setLogLevel("OFF")
    _quiet_query_errors()
    # only the views the query names: each view other views read is computed at register
    register(session, warehouse_path, catalog, views_for=query)
    if from_duckdb:
        query = transpile(query)
    try:
        frame = session.sql(query.strip().rstrip(";"))
        rows = [tuple(_plain(v) for v in row) for row in frame.collect()]
    except Exception as exc:   # Spark's AnalysisException and friends: one line for the user
        if type(exc).__module__.startswith("pyspark"):
            raise KwhError(f"Spark: {str(exc).strip().splitlines()[0]}") from None
        raise
    return frame.columns, rows


def _quiet_query_errors() -> None:
    """pyspark logs every failing query (with its JVM stack) before raising; the CLI prints one line."""
    import logging
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:   # older pyspark does not log them
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)


def _plain(value):
    """A Spark value as the plain Python value DuckDB would return (Row -> dict)."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
