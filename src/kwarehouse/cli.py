"""kwh: the command line. Thin: parse flags, call one library function, print."""

from __future__ import annotations

import contextlib
import csv
import errno
import functools
import gc
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

# Only click and the standard library at the top: each command imports the library it runs (kwh --help
# and the fast read path of kwh sql / kwh query must not load SQLAlchemy, polars or pyarrow;
# tests/test_startup.py checks it).
from kwarehouse.errors import KwhError, first_line

if TYPE_CHECKING:
    from kwarehouse.store.warehouse import Warehouse

# kwh --wide: table cells are never cut
WIDE = False


class LazyCommand(click.Command):
    """A subcommand whose module is imported only when it runs or shows its own help (kwh --help
    lists it by `short_help`)."""

    def __init__(self, name: str, module: str, attribute: str, short_help: str):
        super().__init__(name, short_help=short_help)
        self.target = (module, attribute)

    def load(self) -> click.Command:
        import importlib
        module, attribute = self.target
        return getattr(importlib.import_module(module), attribute)


class KwhGroup(click.Group):
    """Turns every KwhError into `Error: ...` on one line and exit status 1."""

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, LazyCommand):
            command = command.load()
        return name, command, rest

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KwhError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(1)
        except Exception as exc:
            line = _storage_error(exc)
            if line is None:
                raise
            click.echo(f"Error: {line}", err=True)
            ctx.exit(1)


def _storage_error(exc: Exception) -> str | None:
    """One line for the failures of the machine and the storage underneath (the disk, a file that
    vanished, the catalog database, DuckDB, Parquet), which say that a file or the disk is in
    trouble, not that kwh has a bug; None for anything else."""
    text = first_line(exc)
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if full or "No space left" in text or "disk is full" in text:
        where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
        return (f"{where}the disk is full ({text}); the step that failed committed nothing and what was "
                "committed before it is kept: free space and run the command again")
    if isinstance(exc, FileNotFoundError) and ".parquet" in text:
        return f"{exc.filename or text}: a committed Parquet file is missing; run kwh check --repair"
    if isinstance(exc, OSError):
        return f"{exc.filename or 'kwh'}: {exc.strerror or text}"
    # (an exception of a library comes only from a library that is loaded: none is imported here)
    sa = sys.modules.get("sqlalchemy")
    if sa is not None and isinstance(exc, sa.exc.DatabaseError):
        from kwarehouse.store.catalog import database_error
        return str(database_error("the catalog", exc))
    duckdb, pa = sys.modules.get("duckdb"), sys.modules.get("pyarrow")
    if (duckdb is not None and isinstance(exc, duckdb.Error)) or (pa is not None and isinstance(exc, pa.ArrowException)):
        return f"{text}: a warehouse file cannot be read (damaged?); run kwh check, then kwh check --repair"
    return None


@click.group(cls=KwhGroup)
@click.option("--warehouse", "-w", type=click.Path(file_okay=False, path_type=Path),
              default=Path("warehouse"), envvar="KWH_WAREHOUSE", show_default=True,
              help="Warehouse directory (or set KWH_WAREHOUSE).")
@click.option("--catalog", metavar="URL", envvar="KWH_CATALOG",
              help="Catalog database (SQLAlchemy URL, e.g. postgresql://host/kwh; or set KWH_CATALOG). "
                   "Default: catalog.sqlite in the warehouse.")
@click.option("--wait", metavar="SECONDS", type=click.FloatRange(min=0), envvar="KWH_WAIT",
              help="How long a writing command waits for another writer's lock (default: as long as it takes).")
@click.option("--wide", is_flag=True, help="Print long table cells whole (on a terminal they are cut with …).")
@click.version_option(package_name="kwarehouse")
@click.pass_context
def main(ctx, warehouse: Path, catalog: str | None, wait: float | None, wide: bool):
    """kwarehouse: ingest CUDA profiler exports into a Parquet warehouse and query them with SQL.

    \b
    Example:
      kwh ingest runs/            # every ncu export under runs/
      kwh sql "SELECT model, count(*) FROM kernels GROUP BY 1"
    """
    global WIDE
    WIDE = wide
    ctx.obj = WarehouseArgs(warehouse, catalog, wait)


def say_warning(line: str) -> None:
    """Print a warning of the library (a writer waiting for a lock, committed files missing, a
    warehouse.duckdb changed outside kwh) on stderr, as it happens."""
    click.echo(f"kwh: {line}", err=True)


class WarehouseArgs:
    """--warehouse, --catalog and --wait; the Warehouse itself is made when a command asks for it
    (kwarehouse.store.warehouse loads duckdb, pyarrow and SQLAlchemy)."""

    def __init__(self, root: Path, catalog_url: str | None, wait: float | None):
        self.root = Path(root).absolute()
        self.catalog_url = catalog_url
        self.wait = wait
        self._warehouse = None

    def open(self):
        """The Warehouse (one per command)."""
        if self._warehouse is None:
            with _long_lived_imports():
                from kwarehouse.store.warehouse import Warehouse
            self._warehouse = Warehouse(self.root, self.catalog_url, wait=self.wait, warn=say_warning)
        return self._warehouse

    def connect_fast(self):
        """fast_read.connect on the default catalog (None for a --catalog URL, or whenever the full
        path must decide)."""
        if self.catalog_url:
            return None
        from kwarehouse.store import fast_read
        return fast_read.connect(self.root)


@contextlib.contextmanager
def _long_lived_imports():
    """Import the libraries a command that opens a warehouse runs (SQLAlchemy, DuckDB, pyarrow, polars
    and kwh's own modules: ~73,000 tracked objects that live as long as the process) with the cyclic garbage
    collector off, then put them out of its reach (gc.freeze): every later full collection would scan
    them all again, for nothing (0.1 of a one-file ingest's 1.0 CPU-s). Frozen once per process: one
    that runs several commands (a test's) freezes what it holds at the first."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()
        if enabled:
            gc.enable()


def pass_warehouse(command):
    """Like click.pass_obj, with the Warehouse of --warehouse/--catalog/--wait as the first argument."""
    @click.pass_context
    @functools.wraps(command)
    def wrapper(ctx, *args, **kwargs):
        return command(ctx.obj.open(), *args, **kwargs)
    return wrapper


def warehouse_options(command):
    """--warehouse/-w, --catalog and --wait accepted after the subcommand too (kwh ingest DIR -w W),
    where they override the ones given before it."""
    @click.option("--warehouse", "-w", "sub_warehouse", type=click.Path(file_okay=False, path_type=Path),
                  help="Warehouse directory (as before the subcommand).")
    @click.option("--catalog", "sub_catalog", metavar="URL", help="Catalog database URL (as before the subcommand).")
    @click.option("--wait", "sub_wait", metavar="SECONDS", type=click.FloatRange(min=0),
                  help="Writer lock wait (as before the subcommand).")
    @functools.wraps(command)
    def wrapper(*args, sub_warehouse=None, sub_catalog=None, sub_wait=None, **kwargs):
        if sub_warehouse is not None or sub_catalog is not None or sub_wait is not None:
            ctx = click.get_current_context()
            base: WarehouseArgs = ctx.obj
            ctx.obj = WarehouseArgs(sub_warehouse or base.root, sub_catalog or base.catalog_url,
                                    sub_wait if sub_wait is not None else base.wait)
        return command(*args, **kwargs)
    return wrapper


def _iso_date(value: str | None, param) -> str | None:
    """A YYYY-MM-DD option, checked (a bad date is a usage error, not a traceback later)."""
    if value is None:
        return None
    from datetime import date
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)", param=param) from None


@main.command()
@warehouse_options
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "format_", metavar="NAME", help="Force a reader (ncu-raw-csv, ncu-details-csv, ncu-rep, nsys-sqlite, nsys-stats-csv, torch-trace).")
@click.option("--model", help="Model name for exports without a manifest*.json beside them.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Run tag; repeatable.")
@click.option("--gpu", metavar="NAME", help="GPU name for exports that carry none (same as --tag gpu=NAME); "
                                           "a device name in the export or manifest wins.")
@click.option("--jobs", "-j", default=1, show_default=True, type=click.IntRange(min=1),
              help="Read and normalize folders in this many processes (with --engine spark: local[N] cores).")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="spark: fan the folders out as Spark tasks (pyspark and Java 17 needed).")
@click.option("--spark-master", metavar="URL", envvar="KWH_SPARK_MASTER",
              help="With --engine spark: the cluster's master URL (default local[JOBS]); the warehouse "
                   "and sources must be paths every executor reaches.")
@pass_warehouse
def ingest(warehouse: Warehouse, sources, format_, model, tags, gpu, jobs, engine, spark_master):
    """Ingest profiler exports (files or folders, searched recursively).

    Raw and details pages of one ncu report become one run. Files already ingested (same sha256)
    are skipped, and so are archives (with the command that extracts them). Exit status 1 when any
    file failed; the others still go in. A capture with no CUDA data (nothing to store) is not a
    failure: it is recorded, and later ingests skip it.

    \b
    Example:
      kwh ingest runs/ --tag branch=main
      kwh ingest out.csv --model bert --format ncu-raw-csv
      kwh ingest section.csv --model llm --gpu "NVIDIA GeForce RTX 5090"
      kwh ingest --jobs 2 fleet/
      kwh ingest --engine spark --spark-master spark://head:7077 /shared/fleet/
    """
    from kwarehouse.build import discover
    from kwarehouse.collect.tags import parse_tags
    from kwarehouse.jobs import ingest as ingest_job
    tag_map = parse_tags(tags)
    if gpu is not None:
        tag_map["gpu"] = gpu
    fan_out = None
    if engine == "spark":
        from kwarehouse import spark
        from kwarehouse.jobs import fanout
        fan_out = fanout.spark_tasks(spark.session(spark_master or f"local[{jobs}]"))
    elif jobs > 1:
        from kwarehouse.jobs import fanout
        fan_out = fanout.process_pool(jobs)
    found = discover.discover(sources)   # walked once: counted for the progress bar, then ingested
    if sys.stderr.isatty() and len(found.files) > 1:
        with click.progressbar(length=len(found.files), label="Reading exports", file=sys.stderr) as bar:
            report = ingest_job.ingest(found, warehouse, format=format_, model=model, tags=tag_map,
                                     progress=lambda _: bar.update(1), fan_out=fan_out)
    else:
        report = ingest_job.ingest(found, warehouse, format=format_, model=model, tags=tag_map, fan_out=fan_out)
    for line in report.repairs:
        click.echo(f"Repaired: {line}", err=True)
    for run in report.runs:
        verb = "new run" if run.new else "updated run"
        replaced = f" (replaces partial run {', '.join(run.replaced)})" if run.replaced else ""
        click.echo(f"{verb} {run.run_id}: {run.model} on {run.gpu}, {run.kernels} kernels "
                   f"from {len(run.files)} file(s){replaced}")
        for note in run.notes:
            click.echo(f"Note: {note}", err=True)
        for warning in run.warnings:
            click.echo(f"Warning: {warning}", err=True)
    for path, why in report.skipped:
        click.echo(f"skipped {path}: {why}")
    for line in report.fallbacks:
        click.echo(f"Note: {line}", err=True)
    _echo_empty(report)
    for line in report.failed:
        click.echo(f"Error: {line}", err=True)
    ignored = sum(1 for _, why in report.skipped if not why.startswith("already ingested"))
    empty = f"; {len(report.empty)} with nothing to store" if report.empty else ""
    click.echo(f"ingested {len(report.runs)} run(s), {sum(r.kernels for r in report.runs)} kernels; "
               f"{sum(1 for _, w in report.skipped if w.startswith('already'))} already ingested, "
               f"{ignored} other file(s) ignored, {len(report.failed)} failed{empty}"
               + (f", {warned} row(s) left out with a warning" if (warned := sum(len(r.warnings) for r in report.runs))
                  else ""))
    if not report.ok:
        sys.exit(1)


def _echo_empty(report) -> None:
    """One line per capture with nothing to store (not a failure: recorded, and skipped from now on)."""
    for capture in report.empty:
        click.echo(f"nothing to store in {capture.path}: {capture.reason} (recorded; later ingests skip it)")


def _print_rows(columns, rows, fmt: str) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=1))
    else:
        click.echo(format_table(columns, rows))


def _cell_limit() -> int | None:
    """Longest cell a table shows on a terminal (longer ones end in …; --wide or a pipe shows all)."""
    if WIDE or not sys.stdout.isatty():
        return None
    import shutil
    return max(24, shutil.get_terminal_size().columns // 2)


def _number(value: float) -> str:
    """One format for every float: plain digits with thousands separators, 6 significant digits for
    the small ones (2,415,750 not 2.41575e+06)."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:,.6g}"


def format_table(columns, rows) -> str:
    """A plain aligned text table (numbers right-aligned, long cells cut on a terminal)."""
    limit = _cell_limit()
    cells = [[("" if v is None else _number(v) if isinstance(v, float) else str(v)) for v in r] for r in rows]
    if limit:
        cells = [[c if len(c) <= limit else c[:limit - 1] + "…" for c in r] for r in cells]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(columns))]
    def line(values):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()
    out = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    return "\n".join(out) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"


def _require_warehouse(warehouse: Warehouse) -> None:
    """Reading commands never create a warehouse: a mistyped --warehouse should say so."""
    if not warehouse.exists:
        raise KwhError(f"{warehouse.root}: no warehouse here yet; run kwh ingest first "
                       "(or pass --warehouse / set KWH_WAREHOUSE)")


def _connect(args: WarehouseArgs):
    """A DuckDB connection over the warehouse: warehouse.duckdb attached read-only when the catalog
    says it is current (fast_read: no SQLAlchemy, polars or pyarrow is loaded), else the full path
    (Warehouse.connect: rebuilds a stale file, warns about missing files, reads PostgreSQL catalogs)."""
    con = args.connect_fast()
    if con is not None:
        return con
    warehouse = args.open()
    _require_warehouse(warehouse)
    con = warehouse.connect()
    copy = warehouse.copy_problem()
    if copy:
        click.echo(f"kwh: warning: {copy}", err=True)
    return con


def _run_sql(con, query: str):
    import duckdb
    try:
        cursor = con.execute(query)
        if cursor.description is not None:
            return [d[0] for d in cursor.description], cursor.fetchall()
    except duckdb.Error as exc:
        line = str(exc).splitlines()[0]
        if isinstance(exc, duckdb.IOException) or "parquet" in line.lower() or "buffer" in line.lower():
            line += " (a damaged warehouse file? kwh check finds it)"
        raise KwhError(line) from None
    return [], []


@main.command()
@warehouse_options
@click.argument("query", required=False)
@click.option("--file", "-f", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run the SQL in this file (e.g. one of queries/).")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@click.option("--read-only-confined", "confined", is_flag=True,
              help="Read only the warehouse: one SELECT per statement, no files outside it, no COPY/ATTACH/"
                   "SET/INSTALL, a time and memory limit (for shared dashboards; kwh mcp always runs so).")
@click.pass_obj
def sql(args: WarehouseArgs, query, path, fmt, confined):
    """Run SQL over the warehouse tables and views; no QUERY and no --file opens a prompt
    (line editing, history, Ctrl-C, .tables/.schema/.mode/.help), or reads a script from a pipe.

    Tables: runs, kernels, metrics, rules, metric_catalog, bottleneck_thresholds, gpu_peaks; views: kwh views.

    \b
    Example:
      kwh sql "SELECT model, count(*) FROM kernels GROUP BY 1"
      kwh sql --csv "SELECT * FROM kernels WHERE model = 'gpt2'" > gpt2.csv
      kwh sql -f queries/most_popular_kernels.sql
      kwh sql --read-only-confined "SELECT * FROM what_to_fix_first LIMIT 5"
    """
    if query and path:
        raise click.UsageError("give a QUERY or --file, not both")
    con = _connect(args)
    run_sql = _run_sql
    if confined:
        from kwarehouse.answers import confined as confined_lib
        con = confined_lib.confine(con, args.root)
        def run_sql(con, statement):
            page = confined_lib.run(con, statement)
            return page.columns, page.rows
    if path:
        query = path.read_text(encoding="utf-8")
    from kwarehouse.answers.shell import Shell, cancellable
    if query:
        _print_rows(*cancellable(con, run_sql, query), fmt or "table")   # Ctrl-C stops the query
        return
    shell = Shell(con, run_sql, _print_rows, fmt or "table")
    if sys.stdin.isatty():
        shell.interactive()
    elif not shell.script(sys.stdin.read()):
        sys.exit(1)


@main.command()
@warehouse_options
@click.option("--top", default=10, show_default=True, help="How many kernels to list.")
@pass_warehouse
def summary(warehouse: Warehouse, top):
    """Print each model's efficiency (MFU, tensor busy, padding, throttling), kernels per model and the
    top kernels by GPU time.

    \b
    Example:
      kwh summary --top 20
    """
    from kwarehouse.answers.summary import overview, replay_note
    _require_warehouse(warehouse)
    tables = overview(warehouse, top)
    efficiency_cols, efficiency_rows = tables.efficiency
    if efficiency_rows:
        click.echo("Model efficiency (MFU: useful FLOPs over the traced span at the datasheet dense peak; "
                   "views/model_efficiency.sql says how each column is made)\n"
                   + format_table(efficiency_cols, efficiency_rows) + "\n")
    (model_cols, model_rows), (top_cols, top_rows) = tables.per_model, tables.top_kernels
    click.echo("Kernels per model\n" + format_table(model_cols, model_rows))
    click.echo(f"\nTop {top} kernels by GPU time (real timeline time where a model has one; SM % and DRAM % "
               "weighted by it)\n" + format_table(top_cols, top_rows))
    fix_cols, fix_rows = tables.fix_first
    if fix_rows:
        click.echo("\nWhat to do first (estimated GPU time saved; what_to_fix_first and design_signals say how "
                   "each estimate was made)\n" + format_table(fix_cols, fix_rows))
    note = replay_note(tables.replay_only)
    if note:
        click.echo("\n" + note)
    click.echo(f"\nWarehouse: {warehouse.root}  (duckdb {warehouse.duckdb_path} sees the same tables)")


@main.command()
@warehouse_options
@click.option("--unclassified", is_flag=True, help="Only kernels whose library or op class is unknown.")
@click.option("--model", help="Only this model.")
@click.option("--limit", default=50, show_default=True, help="How many kernels to list.")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@pass_warehouse
def kernels(warehouse: Warehouse, unclassified, model, limit, fmt):
    """List kernels by identity (kernel_id) with library, op class and share of real GPU time.

    GPU time is the model's timeline time (nsys, PyTorch traces) where it has one, else ncu's replayed
    durations (time_basis); counter_coverage_pct is the share of it with ncu counters.

    With --unclassified, the kernels no rule classified: add rules for them to
    <warehouse>/normalize/library_rules.csv or op_class_rules.csv, then run kwh renormalize.

    \b
    Example:
      kwh kernels --unclassified
      kwh kernels --model llama --limit 20 --csv > llama-kernels.csv
    """
    from kwarehouse.answers.summary import kernel_list, replay_note, replay_only
    _require_warehouse(warehouse)
    columns, found = kernel_list(warehouse, unclassified=unclassified, model=model, limit=limit)
    _print_rows(columns, found, fmt or "table")
    note = replay_note(replay_only(warehouse, model)) if found else None
    if note and not fmt:          # CSV and JSON stay machine-readable; their time_basis column says it
        click.echo("\n" + note)


@main.command()
@warehouse_options
@pass_warehouse
def renormalize(warehouse: Warehouse):
    """Re-apply normalization to every run already in the warehouse.

    After upgrading kwh or editing <warehouse>/normalize/*.csv: identities, classification, NVTX
    context, canonical metric names and derived columns are recomputed from the stored rows.
    Runs that come out the same are not rewritten; each changed run is replaced atomically.

    \b
    Example:
      kwh renormalize
    """
    from kwarehouse.jobs import renormalize
    _require_warehouse(warehouse)
    report = renormalize.renormalize(warehouse)
    for line in report.repairs:
        click.echo(f"Repaired: {line}", err=True)
    for run in report.changed:
        click.echo(f"renormalized run {run.run_id}: {run.model} on {run.gpu}, {run.kernels} kernels")
    click.echo(f"{len(report.changed)} run(s) changed, {report.unchanged} unchanged")


DIALECTS = click.Choice(["duckdb", "spark"])


@main.group(invoke_without_command=True)
@click.option("--dialect", type=DIALECTS, help="Print every view's SQL in this dialect instead of the list "
                                               "(spark: transpiled with sqlglot, as kwarehouse.spark.register runs it).")
@click.pass_context
def views(ctx, dialect):
    """List the analytics views with their descriptions (kwh views show NAME prints one's SQL).

    \b
    Example:
      kwh views
      kwh views show bottleneck_class
      kwh views --dialect spark > views-spark.sql
    """
    from kwarehouse import views as views_lib
    if ctx.invoked_subcommand is not None:
        return
    if dialect == "spark":
        click.echo(_spark().views_script(), nl=False)
    elif dialect == "duckdb":
        click.echo(views_lib.duckdb_script(), nl=False)
    else:
        rows = [(v.name, v.description) for v in views_lib.all_views().values()]
        click.echo(format_table(["view", "description"], rows))


@views.command("show")
@click.argument("name")
@click.option("--dialect", type=DIALECTS, default="duckdb", show_default=True, help="SQL dialect to print.")
def views_show(name, dialect):
    """Print the SQL of one view.

    \b
    Example:
      kwh views show roofline
      kwh views show roofline --dialect spark
    """
    from kwarehouse import views as views_lib
    view = views_lib.view_named(name)
    if dialect == "spark":
        click.echo(_spark().views_script([view.name]), nl=False)
    else:
        click.echo(view.sql, nl=False)


def _spark():
    """kwarehouse.spark, imported only by the commands that use it (sqlglot and pyspark load slowly)."""
    from kwarehouse import spark
    return spark


@main.command("spark-sql")
@warehouse_options
@click.argument("query", required=False)
@click.option("--file", "-f", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run the SQL in this file.")
@click.option("--from-duckdb", is_flag=True, help="The query is DuckDB SQL (like queries/*.sql): transpile it first.")
@click.option("--cores", default=2, show_default=True, type=click.IntRange(min=1), help="Spark local[N] cores.")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@pass_warehouse
def spark_sql(warehouse: Warehouse, query, path, from_duckdb, cores, fmt):
    """Run one Spark SQL query over the warehouse on a local Spark (tables and views registered).

    For trying queries before a cluster runs them; needs pyspark (pip install 'kwarehouse[spark]')
    and Java 17. Starting Spark takes seconds.

    \b
    Example:
      kwh spark-sql "SELECT library, sum(gpu_time_ns) FROM library_share GROUP BY library"
      kwh spark-sql --from-duckdb -f queries/most_popular_kernels.sql
    """
    _require_warehouse(warehouse)
    if bool(query) == bool(path):
        raise click.UsageError("give a QUERY or --file (one of them)")
    if path:
        query = path.read_text(encoding="utf-8")
    columns, rows = _spark().run_sql(warehouse.root, query, catalog=warehouse.catalog_url,
                                     from_duckdb=from_duckdb, cores=cores)
    _print_rows(columns, rows, fmt or "table")


@main.command()
@warehouse_options
@click.argument("name")
@click.option("--where", "condition", metavar="SQL", help="Filter rows, e.g. \"model = 'llama'\".")
@click.option("--limit", type=click.IntRange(min=0), help="At most this many rows.")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@click.pass_obj
def query(args: WarehouseArgs, name, condition, limit, fmt):
    """Run one analytics view (kwh views lists them) or table, optionally filtered and limited.

    \b
    Example:
      kwh query kernel_popularity --limit 20
      kwh query bottleneck_class --where "model = 'llama' AND bottleneck = 'memory-bound'" --csv
      kwh query runs --where "tool = 'torch'"
    """
    from kwarehouse import schema
    from kwarehouse import views as views_lib
    tables = [*schema.table_names(), "metric_catalog", "bottleneck_thresholds", "gpu_peaks"]
    target = name if name in tables else views_lib.view_named(name, also=tables).name
    con = _connect(args)
    _print_rows(*_run_sql(con, views_lib.select_from(target, condition, limit, check=False)), fmt or "table")


# kwarehouse.answers.export.FORMATS (a test keeps them equal; importing export loads duckdb)
EXPORT_FORMATS = ("csv", "parquet", "json", "jsonl")


@main.command()
@warehouse_options
@click.argument("source")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path), help="File to write.")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS),
              help="csv, parquet, json (an array) or jsonl (a record a line); default: from the output's extension.")
@click.option("--where", "condition", metavar="SQL", help="Filter rows.")
@click.option("--columns", metavar="A,B,...", help="Columns to write, in this order (default: all, in the view's order).")
@pass_warehouse
def export(warehouse: Warehouse, source, output, fmt, condition, columns):
    """Write a view, table, .sql file or query to CSV (or Parquet, JSON) for design reviews.

    CSV is UTF-8 with a header; column names carry units; numbers are plain decimals (no 1e-05).
    Text cells that a spreadsheet would run as a formula (starting with =, +, -, @, tab or CR) get
    a leading single quote; numbers, -1.5 included, stay numbers. Rows stream to the file, so large
    extracts need little memory.

    \b
    Example:
      kwh export kernel_popularity -o popularity.csv --where "level = 'kernel'"
      kwh export bottleneck_class -o llama.csv --where "model = 'llama'" --columns kernel_base,bottleneck,duration_ns
      kwh export "SELECT * FROM kernels" -o kernels.parquet
    """
    from kwarehouse.answers import export as export_lib
    _require_warehouse(warehouse)
    names = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    count = export_lib.export(warehouse, source, output, fmt=export_lib.format_for(output, fmt), where=condition,
                              columns=names)
    click.echo(f"wrote {count} row(s) to {output}")


# Exit status of kwh diff --fail-above when the candidate regressed (1 is any other error).
REGRESSION_EXIT = 3


@main.command()
@warehouse_options
@click.argument("baseline")
@click.argument("candidate")
@click.option("--threshold", default=5.0, show_default=True, help="Percent change that counts as slower/faster.")
@click.option("--fail-above", type=float, metavar="PCT",
              help=f"Exit {REGRESSION_EXIT} when the total, or a kernel on both sides, got more than PCT % slower.")
@click.option("--min-share", default=1.0, show_default=True,
              help="With --fail-above: ignore kernels below this share (%) of GPU time on both sides.")
@click.option("--all", "show_all", is_flag=True, help="List unchanged kernels too.")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@pass_warehouse
def diff(warehouse: Warehouse, baseline, candidate, threshold, fail_above, min_share, show_all, fmt):
    """Compare two runs (or sets of runs): kernels slower, faster, new, gone or with a new bottleneck.

    BASELINE and CANDIDATE are run ids (or unique prefixes) or selectors key=value[,key=value]
    over model, gpu, date, tool and tag.NAME; several runs on a side are averaged per run, and
    each kernel gets a significance note. When both sides hold ncu runs and traces, the ncu runs
    are compared (add tool=torch or tool=nsys to compare the traces).

    \b
    Example:
      kwh diff 3fe0084c 9a1b22f0
      kwh diff model=gpt2,date=2026-11-22 model=gpt2,date=2026-11-23 --fail-above 5
    """
    from kwarehouse.answers import diff as diff_lib
    _require_warehouse(warehouse)
    result = diff_lib.diff(warehouse, baseline, candidate, threshold)
    total = result.total_delta_pct
    if fmt != "json":
        click.echo(f"baseline {len(result.baseline_runs)} run(s) {result.baseline_total_ns / 1e3:,.1f} us/run, "
                   f"candidate {len(result.candidate_runs)} run(s) {result.candidate_total_ns / 1e3:,.1f} us/run"
                   + (f", total {total:+.1f}%" if total is not None else ""), err=fmt == "csv")
    if result.note:
        click.echo(f"Note: {result.note}", err=True)
    _print_rows(list(diff_lib.Diff.COLUMNS), result.rows(show_all), fmt or "table")
    if fail_above is not None:
        found = result.regressions(fail_above, min_share)
        if found:
            click.echo(f"Regression above {fail_above}%: " + "; ".join(found), err=True)
            sys.exit(REGRESSION_EXIT)


@main.command()
@warehouse_options
@click.option("--full", is_flag=True, help="Recompute every day from scratch (same result as incremental).")
@pass_warehouse
def rollup(warehouse: Warehouse, full):
    """Materialize the daily rollups (rollup_kernels_daily, rollup_libraries_daily).

    Incremental: only days touched by runs committed since the last rollup are recomputed.

    \b
    Example:
      kwh rollup
      kwh rollup --full
    """
    from kwarehouse.jobs import rollup as rollup_lib
    _require_warehouse(warehouse)
    report = rollup_lib.rollup(warehouse, full=full)
    for line in report.repairs:
        click.echo(f"Repaired: {line}", err=True)
    click.echo(f"rolled up {len(report.days)} day(s)" + (f": {', '.join(report.days)}" if report.days else "")
               + (f"; dropped {', '.join(report.dropped)}" if report.dropped else ""))


@main.command()
@warehouse_options
@pass_warehouse
def compact(warehouse: Warehouse):
    """Merge each partition's Parquet files into one; query results do not change.

    Readers never see a gap or a duplicate: the merged file replaces the small ones in one catalog
    transaction, and the small ones stay on disk until a later writer finds them unused.

    \b
    Example:
      kwh compact
    """
    from kwarehouse.jobs import compact
    _require_warehouse(warehouse)
    merged = compact.compact(warehouse)
    click.echo(f"compacted {len(merged)} partition(s)")


@main.command()
@warehouse_options
@click.argument("drop", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--settle", default=60.0, show_default=True, type=click.FloatRange(min=0), metavar="SECONDS",
              help="Leave files modified in the last SECONDS for the next run (they may still be copying).")
@pass_warehouse
def nightly(warehouse: Warehouse, drop, settle):
    """The scheduled job: ingest DROP folder(s), roll up the touched days, compact; one summary line.

    Exit status 1 when any file failed (the rest still goes in); a capture with nothing to store
    (no CUDA data) is no failure: it is recorded and skipped from then on. See deploy/ for cron,
    systemd and CI examples.

    \b
    Example:
      kwh --warehouse /data/kwh nightly /data/drop
    """
    from kwarehouse.jobs import nightly as nightly_lib
    report = nightly_lib.nightly(warehouse, list(drop), settle_seconds=settle)
    for line in report.ingest.repairs:
        click.echo(f"Repaired: {line}", err=True)
    for line in report.ingest.fallbacks:
        click.echo(f"Note: {line}", err=True)
    _echo_empty(report.ingest)
    for line in report.ingest.failed:
        click.echo(f"Error: {line}", err=True)
    click.echo(report.summary())
    if not report.ok:
        sys.exit(1)


@main.command()
@warehouse_options
@click.option("--repair", is_flag=True, help="Rebuild what can be rebuilt; take out runs whose files are lost "
                                             "(and say which sources to ingest again). Never deletes unknown files.")
@click.option("--quick", is_flag=True, help="Read each Parquet file's footer only, not every page (faster on "
                                            "large warehouses; misses damaged data pages).")
@click.option("--force", is_flag=True, help="With --repair: take out runs whose files are lost here even while "
                                            "another folder of the same catalog (a copy) may hold them.")
@pass_warehouse
def check(warehouse: Warehouse, repair, quick, force):
    """Check that the catalog, the Parquet files and warehouse.duckdb agree; one line per problem.

    Exit status 1 when a problem remains.

    \b
    Example:
      kwh check
      kwh check --repair
    """
    from kwarehouse.jobs import rollup
    from kwarehouse.store import check as check_lib
    _require_warehouse(warehouse)
    report = check_lib.check(warehouse, repair=repair, quick=quick, force=force, verify_rollups=rollup.verify_sample)
    for line in report.repaired:
        click.echo(f"Repaired: {line}")
    for line in report.notes:
        click.echo(f"Note: {line}")
    for line in report.problems:
        click.echo(f"Problem: {line}")
    click.echo(f"{'ok' if report.ok else 'PROBLEMS'}: {report.runs} run(s), {report.files} committed file(s), "
               f"{len(report.problems)} problem(s)" + ("" if report.ok or repair else "; kwh check --repair fixes what it can"))
    if not report.ok:
        sys.exit(1)


@main.command()
@warehouse_options
@click.option("--new-catalog", metavar="URL", help="An empty database for the folder's own catalog "
                                                   "(default: catalog.sqlite in the folder).")
@pass_warehouse
def detach(warehouse: Warehouse, new_catalog):
    """Give a copy of a warehouse folder (one kwh refuses to write) a catalog of its own, holding the
    runs whose files it has; the shared catalog and the other folder are left as they are.

    \b
    Example:
      kwh --warehouse /data/kwh-copy --catalog postgresql://db/kwh detach
      kwh -w /data/kwh-copy --catalog postgresql://db/kwh detach --new-catalog postgresql://db/kwh_copy
    """
    from kwarehouse.jobs import copies
    _require_warehouse(warehouse)
    done = copies.detach(warehouse, new_catalog)
    for run_id, path in sorted(done.left_out.items()):
        click.echo(f"Note: left out run {run_id}: its file {path} is not in this folder; ingest its sources again "
                   "to restore it")
    if done.unknown_files:
        click.echo(f"Note: {done.unknown_files} file(s) of the runs left out stay on disk, unknown to the new catalog")
    if done.rollups_dropped:
        click.echo("Note: the daily rollups were left out (not every run came along): run kwh rollup --full")
    how = "pass --catalog with it from now on" if new_catalog else "use the folder without --catalog / KWH_CATALOG"
    click.echo(f"detached {warehouse.root}: {done.runs} run(s) in its own catalog {done.catalog}; {how}")


@main.command()
@warehouse_options
@click.option("--moved", is_flag=True, help="This folder is the warehouse (moved here, or the original beside a "
                                            "stale copy); required.")
@pass_warehouse
def attach(warehouse: Warehouse, moved):
    """Make this folder the one that writes its catalog, after kwh refused it as a copy of another
    folder; that folder is then refused, and kwh check --repair asks for --force before taking out runs
    whose files only it may have.

    \b
    Example:
      kwh --warehouse /data/kwh --catalog postgresql://db/kwh attach --moved
    """
    from kwarehouse.jobs import copies
    if not moved:
        raise click.UsageError("say what this folder is: kwh attach --moved (it is the warehouse); for a copy that "
                               "should become a warehouse of its own, kwh detach")
    _require_warehouse(warehouse)
    displaced = copies.attach_moved(warehouse)
    click.echo(f"attached {warehouse.root}: it writes the catalog {warehouse.catalog_name}"
               + (f"; {displaced.path} is refused from now on (run kwh detach there to keep it)" if displaced else ""))


@main.command()
@warehouse_options
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False, path_type=Path), help="HTML file to write.")
@click.option("--model", help="Only this model.")
@click.option("--gpu", help="Only this GPU.")
@click.option("--since", metavar="YYYY-MM-DD", callback=lambda ctx, param, value: _iso_date(value, param),
              help="Only runs of this day or later.")
@pass_warehouse
def report(warehouse: Warehouse, output, model, gpu, since):
    """Write a self-contained HTML report: roofline, popularity, shares, stalls, bottlenecks, trends.

    The file needs no network to open (charts are inline SVG, no scripts or fonts are fetched).

    \b
    Example:
      kwh report -o report.html
      kwh report -o llama.html --model llama --since 2026-11-01
    """
    from kwarehouse.answers import report as report_lib
    _require_warehouse(warehouse)
    text = report_lib.build(warehouse, report_lib.Filters(model, gpu, since))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output} ({len(text) // 1024} KiB)")


@main.command()
@warehouse_options
@click.option("--http", "http_port", type=click.IntRange(1, 65535), metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT instead of stdio.")
@click.option("--timeout", "timeout_s", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              metavar="SECONDS", help="Stop an answer (a query) after this long.")
@click.pass_obj
def mcp(args: WarehouseArgs, http_port, timeout_s):
    """Serve the warehouse to coding agents as a Model Context Protocol server (stdio; read-only and
    confined to the warehouse). Needs the mcp extra: pip install 'kwarehouse[mcp]'.

    Tools: list_views, sql, what_to_fix_first, explain_kernel, compare, hot_unprofiled_kernels;
    resources: the views' SQL and descriptions, the metric catalog. An MCP client starts it from its
    config (README: MCP server).

    \b
    Example:
      kwh --warehouse /data/kwh mcp
      kwh mcp --warehouse /data/kwh --http 8765
    """
    try:
        from kwarehouse.answers import mcp_server
        import mcp  # noqa: F401 - the SDK: a missing extra is one line, not a traceback
    except ImportError:
        raise KwhError("kwh mcp needs the MCP SDK: pip install 'kwarehouse[mcp]'") from None
    _require_warehouse(args.open())
    mcp_server.serve(args.root, args.catalog_url, http_port, timeout_s, warn=say_warning)


# kwh profile lives in kwarehouse.collect.command: it needs only click and the standard library, so a GPU
# machine without the warehouse's dependencies runs the same command as `python3 -m kwarehouse.collect`.
# Loaded when it runs (its help is built from presets.toml): kwh --help lists it by PROFILE_SHORT_HELP.
PROFILE_SHORT_HELP = "Profile a command's hot kernels with ncu: a discovery..."
main.add_command(LazyCommand("profile", "kwarehouse.collect.command", "profile", PROFILE_SHORT_HELP))


@main.command("hot-kernels")
@warehouse_options
@click.option("--model", "models", multiple=True, help="Only this model; repeatable (merged into one regex).")
@click.option("--top", type=click.IntRange(min=1), help="The N kernel functions with the most GPU time (default 10).")
@click.option("--cover", "cover_pct", type=click.FloatRange(0, 100, min_open=True),
              help="The kernel functions that cover PCT % of the GPU time.")
@click.option("--per-model", is_flag=True, help="One selection and regex per model instead of one merged.")
@click.option("--regex-only", is_flag=True, help="Print only the regex (one line per model with --per-model).")
@click.option("--csv", "fmt", flag_value="csv", help="Print CSV.")
@click.option("--json", "fmt", flag_value="json", help="Print JSON records.")
@pass_warehouse
def hot_kernels(warehouse: Warehouse, models, top, cover_pct, per_model, regex_only, fmt):
    """The kernel functions with the most GPU time (fleet popularity, or --model's kernels) and the
    ncu kernel-name regex that profiles them, as kwh profile builds it from a discovery pass.

    \b
    Example:
      kwh hot-kernels --top 5
      kwh hot-kernels --model gpt2 --cover 80 --regex-only
    """
    from kwarehouse.collect.hot_kernels import COLUMNS, hot_kernels as find
    _require_warehouse(warehouse)
    found = find(warehouse, tuple(models), top, cover_pct, per_model)
    if regex_only:
        for model, chosen in found.selections.items():
            click.echo(chosen.regex if len(found.selections) == 1 else f"{model}\t{chosen.regex}")
        return
    rows = found.rows()
    if fmt:
        _print_rows(COLUMNS, rows, fmt)
        return
    _print_rows(COLUMNS[:-2], [r[:-2] for r in rows], "table")
    for model, chosen in found.selections.items():
        click.echo(f"\n{model}: {len(chosen.kernels)} of {chosen.seen} kernel functions, "
                   f"{chosen.covered_pct:.1f} % of the GPU time\nregex: {chosen.regex}")


if __name__ == "__main__":
    main()
