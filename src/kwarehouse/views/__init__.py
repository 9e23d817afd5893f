"""Analytics views: one .sql file per view in this folder (file name = view name, first comment line =
its description), created over the warehouse's base tables in every DuckDB session kwh opens and in
warehouse.duckdb. Views name logical tables only (kernels, metrics, ...), so the same files run on
Spark (docs/portable-sql.md says how to keep them portable; tests/test_spark.py checks it).

bottleneck_thresholds is a small table the views read their cut-offs from: the defaults are in
bottleneck_thresholds.csv here, and a warehouse may override any of them in
<warehouse>/views/bottleneck_thresholds.csv (same columns), without editing SQL. Every other .csv here
is a reference table the views join (stall_reasons: cause and fix of each warp stall reason;
warp_specialized_kernels: name patterns of Hopper warp-specialised kernels), named after its file.

macros/ holds the DuckDB macros the views (and kwh rollup and the answers) call, one CREATE MACRO per
file (file name = macro name, first comment line = its description): a rule written once instead of
pasted into every column that applies it. create_all and duckdb_script create them before the views;
spark.py expands their calls, since Spark SQL has no macros.
"""

from __future__ import annotations

import csv
import difflib
import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kwarehouse.errors import InputError, KwhError

THRESHOLDS_FILE = "bottleneck_thresholds.csv"


@dataclass(frozen=True)
class View:
    name: str
    description: str
    sql: str


def _described_sql_files(folder, what: str) -> list[tuple[str, str, str]]:
    """(name, description, text) of each .sql file of `folder`, sorted: the name is the file's, the
    description its first line, which must be a -- comment."""
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            text = entry.read_text(encoding="utf-8")
            first = text.lstrip().splitlines()[0]
            if not first.startswith("--"):
                raise KwhError(f"internal: {what} {entry.name} must start with a -- description line")
            found.append((entry.name[:-4], first[2:].strip(), text))
    return found


@functools.cache
def all_views() -> dict[str, View]:
    """Every view of this package, by name, sorted."""
    return {name: View(name, description, text)
            for name, description, text in _described_sql_files(resources.files("kwarehouse.views"), "view")}


@dataclass(frozen=True)
class Macro:
    name: str
    description: str
    sql: str        # its CREATE OR REPLACE MACRO statement


@functools.cache
def all_macros() -> dict[str, Macro]:
    """Every macro of macros/, by name, sorted."""
    folder = resources.files("kwarehouse.views").joinpath("macros")
    return {name: Macro(name, description, text) for name, description, text in _described_sql_files(folder, "macro")}


def view_named(name: str, also: list[str] | None = None) -> View:
    """The view called `name`, or an error that suggests the closest names (of views, and of the
    tables in `also` where the caller accepts those too)."""
    views = all_views()
    if name in views:
        return views[name]
    close = difflib.get_close_matches(name, list(views) + list(also or []), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else "; kwh views lists them"
    raise KwhError(f"no view named {name!r}{hint}")


def fill_thresholds(con, warehouse_root: Path | None = None) -> None:
    """bottleneck_thresholds' rows made those of thresholds(warehouse_root), in one INSERT (one per row,
    executemany, took ~10 ms in a database file)."""
    rows = thresholds(warehouse_root)
    con.execute("DELETE FROM bottleneck_thresholds")
    con.execute("INSERT INTO bottleneck_thresholds VALUES " + ", ".join(["(?, ?, ?)"] * len(rows)),
                [value for row in rows for value in row])


def thresholds(warehouse_root: Path | None = None) -> list[tuple[str, float, str]]:
    """(name, value, description) of every threshold: defaults, then the warehouse's overrides."""
    default_text = resources.files("kwarehouse.views").joinpath(THRESHOLDS_FILE).read_text(encoding="utf-8")
    rows = {r["name"]: (r["name"], float(r["value"]), r["description"])
            for r in csv.DictReader(line for line in default_text.splitlines() if not line.startswith("#"))}
    override = warehouse_root / "views" / THRESHOLDS_FILE if warehouse_root else None
    if override and override.is_file():
        lines = override.read_text(encoding="utf-8").splitlines()
        data = [(n, line) for n, line in enumerate(lines, 1) if line.strip() and not line.startswith("#")]
        for (number, _), row in zip(data[1:], csv.DictReader(line for _, line in data)):
            name = (row.get("name") or "").strip()
            if name not in rows:
                raise InputError(override, f"unknown threshold {name!r}; known: {', '.join(sorted(rows))}", number)
            try:
                value = float(row.get("value") or "")
            except ValueError:
                raise InputError(override, f"threshold {name!r} needs a number, not {row.get('value')!r}",
                                 number) from None
            rows[name] = (name, value, rows[name][2])
    return list(rows.values())


def reference_tables() -> dict[str, tuple[list[str], list[list[str]]]]:
    """name -> (columns, rows) of every reference table: each .csv of this folder but the thresholds;
    '#' lines are comments, every value is text."""
    tables = {}
    for entry in sorted(resources.files("kwarehouse.views").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".csv") and entry.name != THRESHOLDS_FILE:
            lines = [line for line in entry.read_text(encoding="utf-8").splitlines()
                     if line.strip() and not line.startswith("#")]
            header, *rows = list(csv.reader(lines))
            tables[entry.name[:-4]] = (header, rows)
    return tables


def reads(view: View) -> set[str]:
    """The other views `view` reads (their names among the words of its SQL, comments left out: one pass,
    not a regex per view)."""
    return (set(re.findall(r"\w+", re.sub(r"--[^\n]*", "", view.sql))) & all_views().keys()) - {view.name}


def creation_order() -> list[View]:
    """Views ordered so that each comes after the views it reads (found by name in its SQL)."""
    views = all_views()
    reads_of = {name: reads(view) for name, view in views.items()}
    ordered: list[View] = []
    while len(ordered) < len(views):
        done = {v.name for v in ordered}
        ready = [name for name in views if name not in done and reads_of[name] <= done]
        if not ready:
            raise KwhError(f"internal: views read each other in a cycle: {sorted(set(views) - done)}")
        ordered.extend(views[name] for name in ready)
    return ordered


# DuckDB's projection_pullup optimizer re-optimizes the subtree below every projection it removes: on the
# verdict views, which nest kernel_time, bottleneck_class, gemm_efficiency, ... ten deep, it took 0.9 of
# the 2.7 CPU-s of planning a query over design_signals or what_to_fix_first (1.6 of the 2.0 s the
# optimizer spent), where executing it on a small warehouse takes a fraction of that. Every view gives the
# same rows without it (the plan keeps a few redundant projections); bench/RESULTS.md, test-suite section.
SLOW_OPTIMIZERS = "projection_pullup"


def plan_quickly(con) -> None:
    """Turn SLOW_OPTIMIZERS off in a DuckDB connection kwh answers from, and keep the Parquet files'
    footers it read (parquet_metadata_cache): a heavy view reads the kernels table six times, and on a
    warehouse of one file per run and table (before kwh compact) each read parsed every footer again,
    a quarter of design_signals' CPU at 300 runs. kwh never rewrites a file in place (a commit writes
    new files), so a kept footer is never stale. A DuckDB without a setting ignores it."""
    import duckdb
    for setting in (f"SET disabled_optimizers = '{SLOW_OPTIMIZERS}'", "SET parquet_metadata_cache = true"):
        try:
            con.execute(setting)
        except duckdb.Error:    # a DuckDB older than the optimizer or the setting does not know its name
            pass


def create_all(con, warehouse_root: Path | None = None) -> None:
    """Create bottleneck_thresholds, the macros and every view in a DuckDB connection holding the base tables."""
    import duckdb     # here, not at the top: kwh --help and kwh views load no duckdb
    for macro in all_macros().values():
        con.execute(body(macro.sql))
    con.execute("CREATE OR REPLACE TABLE bottleneck_thresholds (name VARCHAR, value DOUBLE, description VARCHAR)")
    fill_thresholds(con, warehouse_root)
    for name, (columns, rows) in reference_tables().items():
        typed = ", ".join(f'"{column}" VARCHAR' for column in columns)
        con.execute(f'CREATE OR REPLACE TABLE "{name}" ({typed})')
        if rows:
            con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(columns))})', rows)
    for view in creation_order():
        try:
            con.execute(f'CREATE OR REPLACE VIEW "{view.name}" AS {body(view.sql)}')
        except (duckdb.CatalogException, duckdb.BinderException, duckdb.ParserException) as exc:
            raise KwhError(f"internal: view {view.name} does not compile: {str(exc).splitlines()[0]}") from exc


# Views that the published warehouse.duckdb holds as tables, computed at commit instead of by every query
# that reads them (each nests the per-launch chain again: design_signals read the kernels table ~30 times
# and took 12 s at 1,000 runs as a view). Their SQL stays the definition: in-memory sessions (a stale or
# incomplete warehouse.duckdb), `kwh views --dialect` and Spark run it as a view.
#
# PARTITION_LOCAL: views whose rows for one (model, gpu) are exactly the rows they give over that model and
# GPU's base rows alone (with the reference tables and thresholds), and none without a model and GPU: by
# their SQL (every window, grouping and join keyed by the run or the model and GPU, or a pure function of
# its key) and reading only views of this list (tests/store/test_materialize.py checks the reads, and the
# rows after commits; tests/test_views.py the rows of two partitions). publish recomputes only the
# partitions a commit changed (store/materialize.py) and keeps the others' rows. Several hold the
# per-partition work of fleet views, which then add up per-partition rows instead of reading every launch
# (issue 35): timeline_kernel_shapes, ncu_kernel_counters and ncu_kernel_rows (kernel_time), kernel_stalls
# (warp_stalls), partition_kernels and partition_peaks (counts, totals and peaks per partition:
# design_signals, gemm_efficiency, time_weighted_kernels, model_efficiency), design_signal_parts and
# shared_input_gemms (design_signals), kernel_run_counts (kernel_popularity), gemm_launch_groups
# (gemm_efficiency), kernel_launch_shapes (launch_shape_correlates), profiled_coverage (coverage). Each
# orders its rows by model first, as row_order says.
PARTITION_LOCAL = ("gpu_timeline", "launch_bound", "nvtx_gpu_time", "occupancy", "op_compulsory_bytes", "op_kernels",
                   "run_framework", "timeline_shape_flops", "cache_efficiency", "clock_throttling", "gpu_telemetry",
                   "rank_balance", "bottleneck_class", "timeline_kernel_shapes", "ncu_kernel_counters", "ncu_kernel_rows",
                   "kernel_stalls", "partition_kernels", "partition_peaks", "design_signal_parts", "kernel_run_counts",
                   "gemm_launch_groups", "shared_input_gemms", "kernel_launch_shapes", "profiled_coverage")
# Reads of other views that a local view may make: clock_throttling takes only the time of its own model's
# kernels from kernel_time (gpu_time_ns, time_basis: never the counters kernel_time borrows from other
# models); bottleneck_class names warp_stalls in its evidence text only.
LOCAL_READS_OF_FLEET = {("clock_throttling", "kernel_time"), ("bottleneck_class", "warp_stalls")}
# FLEET: the materialized views that read across models (kernel_time borrows ncu counters from other models
# on the same GPU, and its readers inherit that; a GEMM's most similar well-shaped GEMM; shares of the fleet's
# time; kernels across models; roofline's per-kernel rows over every model), computed whole at each commit
# that changed any partition, from the local ones' tables.
FLEET = ("kernel_time", "coverage", "fusion_candidates", "library_share", "speed_of_light", "roofline", "warp_stalls",
         "gemm_efficiency", "kernel_popularity", "launch_shape_correlates", "model_efficiency", "time_weighted_kernels",
         "bottleneck_share", "design_signals", "what_to_fix_first")
MATERIALIZED = PARTITION_LOCAL + FLEET


def row_order(view: View) -> str | None:
    """The ORDER BY of `view`'s rows in terms of its own columns (its last top-level ORDER BY, table
    aliases dropped), None for a view that orders nothing: how a table holding its rows keeps them when
    some are replaced."""
    found = [line for line in view.sql.splitlines() if line.startswith("ORDER BY ")]
    if not found:
        return None
    last = found[-1]
    return re.sub(r"\b[a-z_]\w*\.(?=[a-z_])", "", last[len("ORDER BY "):].strip().rstrip(";"))


def materialize(con, names: tuple[str, ...] = MATERIALIZED) -> list[str]:
    """Replace each view of `names` in `con` by a table of its rows, in creation order (a view reads the
    tables of those before it). A view that cannot be computed (a damaged or missing Parquet file) stays
    a view, so a reader still gets the query's own error; returns the names left as views."""
    import duckdb
    left: list[str] = []
    for view in creation_order():
        if view.name not in names:
            continue
        try:
            con.execute(f'CREATE TABLE "{view.name}__rows" AS SELECT * FROM "{view.name}"')
            con.execute(f'DROP VIEW "{view.name}"')
            con.execute(f'ALTER TABLE "{view.name}__rows" RENAME TO "{view.name}"')
        except duckdb.Error:
            con.execute(f'DROP TABLE IF EXISTS "{view.name}__rows"')
            left.append(view.name)
    return left


# What the report and kwh summary read several times, directly or through other views: kernel_time (eight
# of the report's sections, four of the summary's tables, and under design_signals), bottleneck_class
# (under bottleneck_share, time_weighted_kernels, the kernel lists' verdicts and design_signals) and
# design_signals (under what_to_fix_first): compute_once computes them once for such an answer.
READ_BY_MANY_ANSWERS = ("kernel_time", "bottleneck_class", "design_signals")


def compute_once(con, names: tuple[str, ...]) -> None:
    """For a connection that answers several questions from the same views (the report): each view of
    `names` becomes a temporary table of its rows, in creation order, so that it is computed once rather
    than by every query that reads it or a view built on it (DuckDB inlines a view at each read). A
    temporary table shadows the view of its name for this connection alone, in the views that read it
    too, and goes with it; its rows are the view's, read in the same snapshot. A view already stored as
    a table (a published file above materialize_min_rows) is left as it is, and so is one that cannot be
    computed: the query that reads it then gets its own error."""
    import duckdb
    stored = {name for name, in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    for view in creation_order():
        if view.name not in names or view.name in stored:
            continue
        try:
            con.execute(f'CREATE TEMP TABLE "{view.name}" AS SELECT * FROM "{view.name}"')
        except duckdb.Error:
            continue


def duckdb_script() -> str:
    """The macros the views call, then every view as a CREATE OR REPLACE VIEW statement, in creation
    order: what `kwh views --dialect duckdb` prints (base tables and bottleneck_thresholds must exist)."""
    macros = "".join(f"{body(macro.sql)};\n\n" for macro in all_macros().values())
    return macros + "".join(f'CREATE OR REPLACE VIEW "{view.name}" AS\n{body(view.sql)};\n\n'
                            for view in creation_order())


def body(sql: str) -> str:
    """The view's query (or macro's statement) without its trailing semicolon."""
    return sql.strip().rstrip(";")


def select_from(name: str, condition: str | None = None, limit: int | None = None, check: bool = True) -> str:
    """SELECT over one view (or, with check=False, any table) with an optional WHERE condition and
    LIMIT; the view's own order is kept."""
    sql = f'SELECT * FROM "{view_named(name).name if check else name}"'
    if condition:
        sql += f" WHERE {condition}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql
