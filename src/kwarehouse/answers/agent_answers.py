"""The answers `kwh mcp` gives an agent, as small text: each from the views (or the answers/ function the
CLI uses for the same question), each over one confined connection (answers/confined.py), so one
answer reads one catalog snapshot even while an ingest commits, and no answer reads outside the
warehouse. This module knows nothing of MCP (answers/mcp_server.py serves these).

Every answer is a compact table (answers/confined.format_page): numbers carry their unit in the column
name (_ns, _pct, _per_s), kernels go by their display name (kernel_base), long cells are cut, and a
table longer than its page says how many rows there are and which offset shows the next ones.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from kwarehouse.answers import confined, queries
from kwarehouse.errors import KwhError

KERNEL_ID = re.compile(r"^[0-9a-f]{16}$")
# what an agent's context holds comfortably per answer
DEFAULT_ROWS = 20
MAX_ROWS = 200
SECTION_ROWS = 10


def _rows(count: int) -> int:
    return max(1, min(int(count), MAX_ROWS))


class _Unclosed:
    """A connection the answers/ functions may "close" (diff and summary close the connection they
    asked for) while the tool call that lent it keeps it open for its next question."""

    def __init__(self, con):
        self._con = con

    def __getattr__(self, name):
        return getattr(self._con, name)

    def close(self) -> None:
        pass


class _OneSnapshot:
    """Stands in for a Warehouse where an answers/ function calls warehouse.connect() several times
    (diff: once per side, then for the kernels): each call gets the tool call's one confined
    connection, so both sides of a comparison read the same snapshot."""

    def __init__(self, con):
        self._con = con

    def connect(self):
        return _Unclosed(self._con)


class Answers:
    """The warehouse at `root` (catalog `catalog_url`), answered read-only and confined."""

    def __init__(self, root: Path, catalog_url: str | None = None, timeout_s: float = confined.QUERY_TIMEOUT_S,
                 warn: Callable[[str], None] | None = None):
        self.root = Path(root)
        self.warn = warn
        self.catalog_url = catalog_url
        self.timeout_s = timeout_s

    @contextmanager
    def connection(self):
        """A confined connection over the warehouse's current snapshot, closed after the answer; the
        whole answer is stopped after timeout_s (a timer thread interrupts DuckDB)."""
        con, real_root = confined.open_connection(self.root, self.catalog_url, self.warn)
        try:
            confined.confine(con, real_root)
            timer = threading.Timer(self.timeout_s, con.interrupt)
            timer.daemon = True
            timer.start()
            try:
                yield con
            except Exception as exc:
                if timer.finished.is_set() and not isinstance(exc, KwhError):
                    raise confined.ConfinedQueryError(f"the answer took longer than {self.timeout_s:g} s and was "
                                                      "stopped; narrow the question") from None
                raise
            finally:
                timer.cancel()
        finally:
            con.close()

    def _table(self, con, sql: str, params: dict, limit: int = SECTION_ROWS, offset: int = 0, what: str = "row") -> str:
        cursor = con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
        page = confined.Page(columns, rows[offset:offset + limit], offset, len(rows))
        return confined.format_page(page, what)

    # -- the tools -------------------------------------------------------------------------------
    def list_views(self, name: str | None = None) -> str:
        """Every view (what it answers: its file's first comment) and table, with its columns; or
        one of them."""
        from kwarehouse import views
        described = {v.name: v.description for v in views.all_views().values()}
        with self.connection() as con:
            columns: dict[str, list[str]] = {}
            for table, column, kind in con.execute(queries.load("columns_of_tables")).fetchall():
                # the whole list without types: it has to fit an agent's context (one view has them)
                columns.setdefault(table, []).append(f"{column} {kind}" if name else column)
        if name is not None and name not in columns:
            views.view_named(name, also=sorted(columns))      # the error names the closest ones
        lines = []
        for table in sorted(columns) if name is None else [name]:
            kind = "view" if table in described else "table"
            about = f": {described[table]}" if table in described else ""
            lines.append(f"{kind} {table}{about}\n  columns: {', '.join(columns[table])}")
        return "\n".join(lines)

    def sql(self, query: str, limit: int = DEFAULT_ROWS, offset: int = 0) -> str:
        """One read-only SELECT, rows offset..offset+limit and the total row count."""
        with self.connection() as con:
            page = confined.run(con, query, limit=_rows(limit), offset=max(0, int(offset)), timeout_s=self.timeout_s)
        return confined.format_page(page)

    def what_to_fix_first(self, model: str | None = None, limit: int = 10, offset: int = 0) -> str:
        """The fleet's ranked fixes, or those touching one model."""
        with self.connection() as con:
            if model is not None:
                self._known_model(con, model)
            table = self._table(con, queries.load("fix_first_of_model"), {"model": model}, _rows(limit), max(0, int(offset)),
                                "fix")
        scope = f"touching model {model}" if model else "of the fleet"
        return (f"What to fix first {scope} (what_to_fix_first: est_time_saved_ns is an estimate, its basis and "
                f"assumption say how it was made; saves: kernel time or idle time, which never add up)\n{table}")

    def explain_kernel(self, kernel: str, model: str | None = None) -> str:
        """One kernel identity: what it is, its time share, its verdict and why, ncu's verdict, its
        roofline position, its fixes with bounded estimates and where its counters come from."""
        with self.connection() as con:
            if model is not None:
                self._known_model(con, model)
            matches = con.execute(queries.load("explain_kernel_match"), {"kernel": kernel.strip(), "model": model}).fetchall()
            exact = [m for m in matches if m[0] == kernel.strip().lower()]
            if not matches:
                raise KwhError(f"no kernel matches {kernel!r}" + (f" in model {model}" if model else "")
                               + "; give a kernel_id or part of a kernel name (list_views: kernel_time)")
            if len(matches) > 1 and not exact:
                listed = "; ".join(f"{k} {base} ({models})" for k, base, _, models in matches[:10])
                more = " and more" if len(matches) > 10 else ""
                raise KwhError(f"{kernel!r} matches several kernels{more}: {listed}; ask again with one kernel_id")
            kernel_id, base, _, models = (exact or matches)[0]
            params = {"kernel_id": kernel_id, "model": model}
            sections = [f"Kernel {kernel_id}: {base} (models: {models})"]
            for title, query, limit_rows in (
                    ("Identity and time share (time_basis: timeline = real GPU time, ncu = replayed)", queries.load("explain_kernel_identity"), SECTION_ROWS),
                    ("Verdict (bottleneck_class) and ncu's verdict", queries.load("explain_kernel_verdict"), SECTION_ROWS),
                    ("Roofline position (roofline, per GPU)", queries.load("explain_kernel_roofline"), SECTION_ROWS),
                    ("Fixes with bounded estimates (design_signals: est_time_saved_ns at most bound_ns; floor_ns = the time it cannot go below)", queries.load("explain_kernel_fixes"), SECTION_ROWS),
                    ("Counters: its own ncu profile, borrowed, or none (kernel_time)", queries.load("explain_kernel_counters"), SECTION_ROWS)):
                sections.append(f"{title}\n{self._table(con, query, params, limit_rows)}")
        return "\n\n".join(sections)

    def compare(self, baseline: str, candidate: str, threshold_pct: float = 5.0, include_unchanged: bool = False,
                limit: int = DEFAULT_ROWS, offset: int = 0) -> str:
        """kwh diff: two runs, or two sets of runs (selectors such as model=gpt2,date=2026-11-22)."""
        from kwarehouse.answers import diff as diff_lib
        with self.connection() as con:
            result = diff_lib.diff(_OneSnapshot(con), baseline, candidate, threshold_pct)
        total = result.total_delta_pct
        head = (f"baseline {len(result.baseline_runs)} run(s) {result.baseline_total_ns / 1e3:,.1f} us/run, "
                f"candidate {len(result.candidate_runs)} run(s) {result.candidate_total_ns / 1e3:,.1f} us/run"
                + (f", total {total:+.1f}%" if total is not None else "")
                + f" (threshold {threshold_pct:g} %; significance: Welch's t over per-run times, |t| >= 2)")
        rows = result.rows(include_unchanged)
        offset = max(0, int(offset))
        page = confined.Page(list(diff_lib.Diff.COLUMNS), rows[offset:offset + _rows(limit)], offset, len(rows))
        note = f"\nNote: {result.note}" if result.note else ""
        return f"{head}{note}\n{confined.format_page(page, 'changed kernel' if not include_unchanged else 'kernel')}"

    def hot_unprofiled_kernels(self, model: str, top: int = 10) -> str:
        """A model's kernels with the most real GPU time that ncu has not profiled, and the kwh profile
        command whose ncu pass would profile them (the regex kwh hot-kernels and kwh profile build)."""
        from kwarehouse.collect import selection
        with self.connection() as con:
            self._known_model(con, model)
            cursor = con.execute(queries.load("unprofiled_of_model"), {"model": model})
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        top = _rows(top)
        page = confined.Page(columns, rows[:top], 0, len(rows))
        table = confined.format_page(page, "unprofiled kernel", more=f"ask again with a larger top for more")
        if not rows:
            return f"Every kernel of {model} with GPU time has ncu counters (kernel_time counter_match); nothing to profile."
        base, time_ns, launches = columns.index("kernel_base"), columns.index("gpu_time_ns"), columns.index("launches")
        chosen = selection.select(selection.aggregate((r[base], r[time_ns], r[launches]) for r in rows[:top]))
        if not chosen.kernels:
            return f"{table}\nNo ncu kernel function to name among them (copies, memsets or autotuning only)."
        regex = chosen.regex.replace("'", "'\\''")
        return (f"{table}\n\nProfile them (ncu on these {len(chosen.kernels)} kernel functions; replace the command "
                f"after -- with the one that runs {model}):\n"
                f"kwh profile --model {_shell_word(model)} --kernel-regex '{regex}' --ingest -- <command that runs {model}>")

    # -- resources -------------------------------------------------------------------------------
    @staticmethod
    def views_index() -> str:
        from kwarehouse import views
        return "\n".join(f"{v.name}: {v.description}" for v in views.all_views().values())

    @staticmethod
    def view_sql(name: str) -> str:
        from kwarehouse import views
        return views.view_named(name).sql

    def metric_catalog(self) -> str:
        with self.connection() as con:
            cursor = con.execute(queries.load("metric_catalog"))
            columns = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        return confined.format_page(confined.Page(columns, rows, 0, len(rows)), "metric")

    @staticmethod
    def _known_model(con, model: str) -> None:
        known = [m for (m,) in con.execute(queries.load("models")).fetchall()]
        if model not in known:
            import difflib
            close = difflib.get_close_matches(model, known, n=3, cutoff=0.5)
            raise KwhError(f"no model {model!r} in the warehouse"
                           + (f"; did you mean {' or '.join(close)}?" if close else f"; models: {', '.join(known[:20])}"))


def _shell_word(text: str) -> str:
    import shlex
    return shlex.quote(text)
