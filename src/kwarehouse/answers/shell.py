"""`kwh sql` with no query: an interactive prompt on a terminal, a script reader on a pipe.

On a terminal: line editing and history (GNU readline, kept in ~/.kwh_history), Ctrl-C cancels the
statement being typed or run, Ctrl-D or .quit leaves, and the DuckDB shell's dot commands work
(.tables .schema .mode .help .quit). On a pipe (`kwh sql < report.sql`): no prompts, every
statement's result printed in order, the last statement runs without its `;`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from kwarehouse.errors import KwhError

HISTORY = Path("~/.kwh_history").expanduser()
MODES = ("table", "csv", "json")
HELP = """.tables            list the tables and views
.schema NAME       the columns of a table or view
.mode table|csv|json   how results print
.help              this list
.quit / .exit      leave (or Ctrl-D)
SQL statements end with ';' (several may share a line); Ctrl-C cancels the one being typed or run."""


def interrupted(exc: BaseException) -> bool:
    """Whether a query ended because it was interrupted: DuckDB ends it with InterruptException
    (con.interrupt()) or RuntimeError("Query interrupted") (DuckDB 2, on a signal it saw itself)."""
    return (isinstance(exc, duckdb.InterruptException)
            or isinstance(exc, RuntimeError) and "interrupted" in str(exc).lower())


def cancellable(con: duckdb.DuckDBPyConnection, run_sql: Callable, statement: str):
    """run_sql(con, statement), which Ctrl-C cancels: KeyboardInterrupt once the query has stopped.

    Why a thread: DuckDB looks for a pending SIGINT only between the tasks it runs on the calling
    thread, and one task can run for as long as the query: SIGINT alone stopped a scan of
    range(10^15) in 1 try of 6 and a big cross join in 3 of 5 (DuckDB 2.0.1). Here the calling thread
    only waits, a wait Ctrl-C interrupts at once, and con.interrupt() then stops the query from
    outside (within milliseconds in every try)."""
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["rows"] = run_sql(con, statement)
        except BaseException as exc:   # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="kwh-sql", daemon=True)
    worker.start()
    cancelled = False
    while worker.is_alive():
        try:
            worker.join()
        except KeyboardInterrupt:
            cancelled = True
            con.interrupt()      # then wait for the query to stop: the connection is free afterwards
    if cancelled:
        _wait_until_free(con)
        raise KeyboardInterrupt
    if "error" in outcome:
        error = outcome["error"]
        if interrupted(error):
            raise KeyboardInterrupt from None
        raise error
    return outcome["rows"]


# How long a cancelled query may keep its connection: DuckDB frees it a few milliseconds after the
# query has ended (5-25 ms here), and until then refuses the next statement ("connection is busy").
FREE_AFTER_CANCEL_SECONDS = 10.0


def _wait_until_free(con: duckdb.DuckDBPyConnection) -> None:
    """Return once the connection takes statements again (or FREE_AFTER_CANCEL_SECONDS passed: the
    next statement then says what is wrong), so the statement typed after a cancel runs."""
    end = time.monotonic() + FREE_AFTER_CANCEL_SECONDS
    while True:
        try:
            con.execute("SELECT 1").fetchall()
            return
        except duckdb.Error as exc:
            if "busy" not in str(exc).lower() or time.monotonic() > end:
                return
            time.sleep(0.005)


class Shell:
    def __init__(self, con: duckdb.DuckDBPyConnection, run_sql: Callable, print_rows: Callable,
                 mode: str = "table"):
        self.con, self.run_sql, self.print_rows, self.mode = con, run_sql, print_rows, mode
        self.done = False

    def names(self) -> tuple[list[str], list[str]]:
        """(tables, analytics views); kwh exposes its tables as views over Parquet, so ask the schema."""
        from kwarehouse import schema, views
        tables = [*schema.tables(), "metric_catalog", "bottleneck_thresholds", "gpu_peaks"]
        return tables, list(views.all_views())

    def banner(self) -> str:
        tables, views = self.names()
        return (f"kwh sql: tables {', '.join(tables)}\nviews {', '.join(views)}\n"
                "End statements with ';'. .help lists commands; .quit or Ctrl-D leaves.")

    def run(self, text: str) -> bool:
        """Run a dot command or one or more SQL statements; False when one failed."""
        stripped = text.strip()
        if stripped.startswith("."):
            return self.dot(stripped)
        ok = True
        for statement in self.statements(stripped):
            try:
                # Ctrl-C: KeyboardInterrupt, and the statements after this one do not run either
                self.print_rows(*cancellable(self.con, self.run_sql, statement), self.mode)
            except KwhError as exc:
                print(f"Error: {exc}", file=sys.stderr)
                ok = False
        return ok

    def statements(self, text: str) -> list[str]:
        """The statements of `text`, each run and printed on its own."""
        try:
            return [s.query for s in self.con.extract_statements(text)] or []
        except duckdb.Error:
            return [text] if text.strip().rstrip(";") else []   # run whole: the error says what is wrong

    def dot(self, command: str) -> bool:
        name, _, argument = command.partition(" ")
        argument = argument.strip().rstrip(";")
        if name in (".quit", ".exit"):
            self.done = True
        elif name == ".help":
            print(HELP)
        elif name == ".tables":
            tables, views = self.names()
            print("tables: " + ", ".join(tables) + "\nviews:  " + ", ".join(views))
        elif name == ".schema" and argument:
            return self.run(f'DESCRIBE "{argument}"')
        elif name == ".mode" and argument in MODES:
            self.mode = argument
        else:
            print(f"Error: unknown or incomplete command {command!r}; .help lists them", file=sys.stderr)
            return False
        return True

    def script(self, text: str) -> bool:
        """Everything from a pipe or file: dot commands on their own lines, SQL between them."""
        ok, pending = True, []
        for line in text.splitlines():
            if line.strip().startswith(".") and not "".join(pending).strip():
                ok = self.run(line) and ok
                if self.done:
                    return ok
            else:
                pending.append(line)
                if line.rstrip().endswith(";"):
                    ok = self.run("\n".join(pending)) and ok
                    pending = []
        if "".join(pending).strip():
            ok = self.run("\n".join(pending)) and ok
        return ok

    def run_at_prompt(self, text: str) -> None:
        """run(text), where Ctrl-C cancels what is running and the prompt comes back."""
        try:
            self.run(text)
        except KeyboardInterrupt:
            print("cancelled", file=sys.stderr)

    def interactive(self) -> None:
        try:
            import readline
            readline.set_history_length(1000)
            if HISTORY.exists():
                readline.read_history_file(HISTORY)
        except (ImportError, OSError):
            readline = None
        print(self.banner())
        buffer: list[str] = []
        try:
            while not self.done:
                try:
                    line = input("kwh> " if not buffer else "...> ")
                except KeyboardInterrupt:
                    print("^C")
                    buffer = []
                    continue
                except EOFError:
                    print()
                    return
                if not buffer and line.strip().startswith("."):
                    self.run_at_prompt(line)          # .schema of a slow view runs a query too
                    continue
                buffer.append(line)
                if line.rstrip().endswith(";"):
                    self.run_at_prompt("\n".join(buffer))
                    buffer = []
        finally:
            if readline is not None:
                try:
                    readline.write_history_file(HISTORY)
                except OSError:
                    pass
