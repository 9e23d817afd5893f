"""`kwh mcp`: the warehouse as a Model Context Protocol server (the official `mcp` SDK, 2.x: MCPServer),
over stdio as MCP clients start servers, or streamable HTTP on 127.0.0.1.

Read-only and confined: every tool and resource answers through answers/agent_answers.py, which
reads over a confined DuckDB connection (answers/confined.py): only the warehouse's Parquet
folders, one SELECT per query, a time and a memory limit. A refused or failed question comes back
to the agent as a tool error of one line, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kwarehouse.answers import confined
from kwarehouse.answers.agent_answers import DEFAULT_ROWS, Answers
from kwarehouse.errors import KwhError

INSTRUCTIONS = """kwarehouse (kwh) holds every profiled run of every model: Nsight Compute counters, Nsight Systems and
PyTorch timelines, with verdicts (bottleneck_class), evidence and estimated savings (design_signals,
what_to_fix_first). Start with what_to_fix_first (fleet or one model), explain_kernel for one kernel,
compare for a regression between runs or dates, list_views then sql for anything else. Times are in
ns unless a column says otherwise; time_basis says whether a time is real (timeline) or ncu's replay.
Read-only: one SELECT per sql call, nothing outside the warehouse."""


def build_server(root: Path, catalog_url: str | None = None, timeout_s: float = confined.QUERY_TIMEOUT_S,
                 warn: Callable[[str], None] | None = None):
    """The MCPServer with kwh's tools and resources over the warehouse at `root`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.types import ToolAnnotations

    answers = Answers(root, catalog_url, timeout_s, warn)
    # WARNING: the SDK logs every failed call at INFO to stderr, where MCP clients keep the server's log
    server = MCPServer("kwarehouse", instructions=INSTRUCTIONS, log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                                open_world_hint=False)

    def answer(function, *args, error=ToolError, **kwargs) -> str:
        """A KwhError (a refusal, an unknown name) becomes the tool's (or resource's) one-line error."""
        try:
            return function(*args, **kwargs)
        except KwhError as exc:
            raise error(str(exc).splitlines()[0]) from None

    @server.tool(annotations=read_only)
    def list_views(name: str | None = None) -> str:
        """The warehouse's analytics views and tables: what each view answers and its columns (all of
        them, or the one called `name`, with column types)."""
        return answer(answers.list_views, name)

    @server.tool(annotations=read_only)
    def sql(query: str, limit: int = DEFAULT_ROWS, offset: int = 0) -> str:
        """Run one read-only DuckDB SELECT over the warehouse's tables and views (list_views names them).
        Returns a compact table of rows offset..offset+limit (limit at most 200), the total row count and
        how to page on. One statement; no COPY, ATTACH, SET, INSTALL/LOAD or files outside the warehouse;
        stopped after its time limit."""
        return answer(answers.sql, query, limit, offset)

    @server.tool(annotations=read_only)
    def what_to_fix_first(model: str | None = None, limit: int = 10, offset: int = 0) -> str:
        """What to fix first: the fleet's fixes ranked by estimated GPU time saved (or those touching
        `model`), each with its evidence, the basis of the saving and the assumption behind it."""
        return answer(answers.what_to_fix_first, model, limit, offset)

    @server.tool(annotations=read_only)
    def explain_kernel(kernel: str, model: str | None = None) -> str:
        """Explain one kernel (its kernel_id, or part of its name): identity, library and op class, time
        share, kwh's verdict with the metrics that decided it, ncu's verdict, roofline position, fixes with
        their bounded estimates and where its counters come from (own profile or borrowed)."""
        return answer(answers.explain_kernel, kernel, model)

    @server.tool(annotations=read_only)
    def compare(baseline: str, candidate: str, threshold_pct: float = 5.0, include_unchanged: bool = False,
                limit: int = DEFAULT_ROWS, offset: int = 0) -> str:
        """Compare two runs or two sets of runs (kwh diff): each side a run id (or a unique prefix) or a
        selector key=value[,key=value] over model, gpu, date, tool and tag.NAME, e.g. baseline
        model=gpt2,date=2026-11-22 and candidate model=gpt2,date=2026-11-23. Kernels slower, faster, new,
        gone or with a new bottleneck, with their significance (Welch's t over runs)."""
        return answer(answers.compare, baseline, candidate, threshold_pct, include_unchanged, limit, offset)

    @server.tool(annotations=read_only)
    def hot_unprofiled_kernels(model: str, top: int = 10) -> str:
        """A model's kernels with the most real GPU time that ncu has not profiled (no counters, so no
        verdict), and the kwh profile command whose ncu pass would profile them."""
        return answer(answers.hot_unprofiled_kernels, model, top)

    @server.resource("kwh://views", mime_type="text/plain")
    def views_index() -> str:
        """Every analytics view with what it answers (its SQL file's first comment)."""
        return answers.views_index()

    @server.resource("kwh://views/{name}", mime_type="application/sql")
    def view_sql(name: str) -> str:
        """The SQL of one analytics view, its description first."""
        return answer(answers.view_sql, name, error=ResourceError)

    @server.resource("kwh://metric-catalog", mime_type="text/plain")
    def metric_catalog() -> str:
        """Every canonical metric: unit, the other names ncu versions give it, what it means."""
        return answer(answers.metric_catalog, error=ResourceError)

    return server


def serve(root: Path, catalog_url: str | None = None, http_port: int | None = None,
          timeout_s: float = confined.QUERY_TIMEOUT_S, warn: Callable[[str], None] | None = None) -> None:
    """Serve until the client closes stdio (or, with http_port, until interrupted). warn receives the
    store's warnings; `kwh mcp` prints them on stderr, which MCP clients keep as the server's log."""
    server = build_server(root, catalog_url, timeout_s, warn)
    if http_port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=http_port)
