"""Read-only, confined SQL over a warehouse: for `kwh mcp` (queries an agent writes, possibly under a
prompt's influence) and `kwh sql --read-only-confined` (shared dashboards).

A kwh connection has DuckDB's full powers: read_text('/etc/passwd'), COPY ... TO, ATTACH, INSTALL all
work from any query. A confined connection can read only the files the warehouse's views read (the
_files/ links and the table folders: not the catalog, not warehouse.json, nothing outside), cannot
write, attach, install or load anything, autoloads no extension, has a memory limit, and its settings
are locked so no query can undo them. On top of that, every query is checked before it runs: one
statement, a SELECT (WITH, FROM-first, VALUES, DESCRIBE and SUMMARIZE parse as SELECT), at most
MAX_QUERY_CHARS long; and it is interrupted from a timer thread after its time limit. A refusal is
one line (ConfinedQueryError).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from kwarehouse.errors import KwhError, first_line

MAX_QUERY_CHARS = 20_000
QUERY_TIMEOUT_S = 30.0
MEMORY_LIMIT = "2GB"
# The longest cell an answer shows; longer ones end in "…" (kernel names are shown by their display
# names, kernel_base, which are short; a mangled signature is not).
CELL_CHARS = 160
# What a confined query may be: DuckDB's statement type of each.
FETCH_BATCH = 10_000
ALLOWED_STATEMENTS = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


class ConfinedQueryError(KwhError):
    """A query a confined connection refuses, or one it stopped (time, memory): one line."""


def open_connection(root: Path, catalog_url: str | None = None,
                    warn: Callable[[str], None] | None = None) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """(a kwh read connection over the warehouse at `root`, the warehouse folder's real path).

    The one place that touches the store: the rest of this module works on any DuckDB connection
    whose views read Parquet files under the warehouse folder. warn receives the store's warnings
    (committed files missing, warehouse.duckdb changed outside kwh) as they happen."""
    from kwarehouse.store.warehouse import Warehouse
    warehouse = Warehouse(root, catalog_url, warn=warn)
    if not warehouse.exists:
        raise KwhError(f"{warehouse.root}: no warehouse here yet; run kwh ingest first "
                       "(or pass --warehouse / set KWH_WAREHOUSE)")
    return warehouse.connect(), Path(os.path.realpath(warehouse.root))


def readable_directories(root: Path) -> list[str]:
    """The folders the warehouse's views read Parquet from: each committed file's _files/ link, and
    the table folders (files an older kwh wrote before the links, and the daily rollups)."""
    from kwarehouse import schema
    root = Path(os.path.realpath(root))
    return [f"{root / name}{os.sep}" for name in ("_files", *schema.tables())]


def confine(con: duckdb.DuckDBPyConnection, root: Path) -> duckdb.DuckDBPyConnection:
    """Confine an open kwh connection (its views already bound) to reading the warehouse at `root`.
    The order matters: the locks come last, and once locked nothing (SET, RESET, PRAGMA) changes them."""
    folders = ", ".join("'" + f.replace("'", "''") + "'" for f in readable_directories(root))
    for statement in (f"SET memory_limit = '{MEMORY_LIMIT}'",
                      # no spilling to a temp folder: a confined query writes nothing anywhere (set
                      # before external access is off, which forbids changing it)
                      "SET temp_directory = ''",
                      "SET autoinstall_known_extensions = false",
                      "SET autoload_known_extensions = false",
                      "SET allow_community_extensions = false",
                      f"SET allowed_directories = [{folders}]",
                      "SET enable_external_access = false",
                      "SET lock_configuration = true"):
        con.execute(statement)
    return con


def check_query(con: duckdb.DuckDBPyConnection, query: str) -> str:
    """The query's one statement, or ConfinedQueryError saying why it is refused."""
    if len(query) > MAX_QUERY_CHARS:
        raise ConfinedQueryError(f"refused: the query is {len(query):,} characters long, over the limit of "
                                 f"{MAX_QUERY_CHARS:,}; ask for less (a view already computes most answers)")
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise ConfinedQueryError(f"refused: {first_line(exc)}") from None
    if not statements:
        raise ConfinedQueryError("refused: no SQL statement in the query")
    if len(statements) > 1:
        raise ConfinedQueryError(f"refused: {len(statements)} statements; send one SELECT at a time")
    kind = statements[0].type
    if kind not in ALLOWED_STATEMENTS:
        keyword = (statements[0].query.split() or [kind.name])[0].upper()     # INSTALL parses as LOAD
        raise ConfinedQueryError(f"refused: {keyword} statements are not allowed here; this connection only "
                                 "reads (one SELECT, WITH ... SELECT, DESCRIBE, SUMMARIZE or EXPLAIN)")
    return query


@dataclass
class Page:
    columns: list[str]
    rows: list[tuple]
    offset: int            # rows skipped before the first shown
    total_rows: int        # rows the query returns in all

    @property
    def truncated(self) -> bool:
        return self.offset + len(self.rows) < self.total_rows


def run(con: duckdb.DuckDBPyConnection, query: str, *, limit: int | None = None, offset: int = 0,
        timeout_s: float = QUERY_TIMEOUT_S) -> Page:
    """Check and run one query on a confined connection: rows offset..offset+limit (all with
    limit=None) and the query's total row count; interrupted after timeout_s."""
    check_query(con, query)
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.daemon = True
    timer.start()
    try:
        cursor = con.execute(query)
        if cursor.description is None:
            return Page([], [], 0, 0)
        columns = [d[0] for d in cursor.description]
        # one run of the query: the rows of the page are kept, the others only counted
        end = None if limit is None else offset + limit
        rows, total = [], 0
        while batch := cursor.fetchmany(FETCH_BATCH):
            if end is None or total < end:
                rows.extend(batch[max(0, offset - total):None if end is None else end - total])
            total += len(batch)
        return Page(columns, rows, offset, total)
    except duckdb.Error as exc:
        raise ConfinedQueryError(_why(exc, timer, timeout_s)) from None
    except RuntimeError as exc:      # DuckDB 2 words some interrupts as RuntimeError("Query interrupted")
        if "interrupt" not in str(exc).lower():
            raise
        raise ConfinedQueryError(_why(exc, timer, timeout_s)) from None
    finally:
        timer.cancel()


def _why(exc: BaseException, timer: threading.Timer, timeout_s: float) -> str:
    """One line for a query DuckDB stopped or refused."""
    if timer.finished.is_set() or isinstance(exc, duckdb.InterruptException):
        return f"refused: the query ran past its time limit of {timeout_s:g} s and was stopped; narrow it"
    if isinstance(exc, duckdb.PermissionException) or "disabled by configuration" in str(exc) or "locked" in str(exc):
        return f"refused: {first_line(exc)} (this connection reads only the warehouse's tables and views)"
    if isinstance(exc, duckdb.OutOfMemoryException):
        return f"refused: the query needs more than the memory limit of {MEMORY_LIMIT}; aggregate or filter more"
    return f"query failed: {first_line(exc)}"


def cell(value) -> str:
    """One cell as text: floats to 6 significant digits (plain digits from 1e5 up), long text cut."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        return f"{value:.0f}" if abs(value) >= 1e5 else f"{value:.6g}"
    text = str(value).replace("\n", " ").replace("|", "/")
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS - 1] + "…"


def format_page(page: Page, what: str = "row", more: str | None = None) -> str:
    """A compact pipe table, then the row count and, when rows are left out, how to see them (`more`;
    by default: ask again with the next offset)."""
    lines = ["| " + " | ".join(page.columns) + " |"] if page.columns else []
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in page.rows]
    shown = len(page.rows)
    whats = what + ("es" if what.endswith(("s", "x")) else "s")
    if not page.columns:
        return "(no result set)"
    if page.truncated:
        lines.append(f"({page.total_rows} {whats}; showing {page.offset + 1}-{page.offset + shown}: "
                     f"{more or f'ask again with offset={page.offset + shown} for more'})")
    elif page.offset and not shown:
        lines.append(f"({page.total_rows} {whats}; none from offset={page.offset} on)")
    elif page.offset:
        lines.append(f"({page.total_rows} {whats}; showing {page.offset + 1}-{page.offset + shown})")
    else:
        lines.append(f"({page.total_rows} {what if page.total_rows == 1 else whats})")
    return "\n".join(lines)
