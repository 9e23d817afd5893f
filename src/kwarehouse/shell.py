"""`kwh sql` with no query: an interactive prompt on a terminal, a script reader on a pipe.

On a terminal: line editing and history (GNU readline, kept in ~/.kwh_history), Ctrl-C cancels the
statement being typed or run, Ctrl-D or .quit leaves, and the DuckDB shell's dot commands work
(.tables .schema .mode .help .quit). On a pipe (`kwh sql < report.sql`): no prompts, every
statement's result printed in order, the last statement runs without its `;`.
"""

from __future__ import annotations

import sys
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
                self.print_rows(*self.run_sql(self.con, statement), self.mode)
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
                    self.run(line)
                    continue
                buffer.append(line)
                if line.rstrip().endswith(";"):
                    try:
                        self.run("\n".join(buffer))
                    except KeyboardInterrupt:
                        self.con.interrupt()
                        print("cancelled", file=sys.stderr)
                    buffer = []
        finally:
            if readline is not None:
                try:
                    readline.write_history_file(HISTORY)
                except OSError:
                    pass
