"""`kwh mcp` (issue 36), driven by the mcp SDK's own client over a real stdio subprocess: one server for
the module (a server process costs ~1 CPU-s to start), each tool's answer compared with the CLI's
answer to the same question, every hostile query refused (by the server and by kwh sql
--read-only-confined), and a warehouse written by a concurrent ingest seen one snapshot at a time."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("mcp")

from anyio.from_thread import start_blocking_portal  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from kwarehouse import views  # noqa: E402
from kwarehouse.jobs import ingest as ingest_job  # noqa: E402
from kwarehouse.answers import confined  # noqa: E402
from kwarehouse.cli import main  # noqa: E402
from kwarehouse.store.warehouse import Warehouse  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"
DATA = Path(__file__).parent / "data"
SGEMM = "49ed315aa29f0e20"       # naive_sgemm of custom_cupy: profiled by ncu, with a calibrated fix
TOOLS = {"list_views", "sql", "what_to_fix_first", "explain_kernel", "compare", "hot_unprofiled_kernels"}


@pytest.fixture(scope="module")
def warehouse(pristine_warehouse, tmp_path_factory) -> Warehouse:
    """A private copy of every good test export's warehouse (one ingest writes to it below)."""
    root = tmp_path_factory.mktemp("mcp") / "wh"
    shutil.copytree(pristine_warehouse, root)
    copy = Warehouse(root)
    copy.refresh_duckdb()
    return copy


@pytest.fixture(scope="module")
def server(warehouse):
    """call(tool, arguments) -> (is_error, text), and the client itself, over one `kwh mcp` subprocess."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "kwarehouse", "--warehouse", str(warehouse.root), "mcp", "--timeout", "120"],
                                   env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(params)) as client:
        def call(tool: str, **arguments) -> tuple[bool, str]:
            result = portal.call(client.call_tool, tool, arguments)
            return result.is_error, "\n".join(block.text for block in result.content)

        call.portal, call.client = portal, client
        yield call


def kwh(warehouse: Warehouse, *args: str) -> str:
    result = CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *args])
    assert result.exit_code == 0, result.output
    return result.output


def kwh_csv(warehouse: Warehouse, *args: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(kwh(warehouse, *args, "--csv"))))


def table(text: str) -> tuple[list[str], list[list[str]], str]:
    """(columns, rows, the count line) of the first pipe table in an answer."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in line[2:-2].split(" | ")] for line in lines]
    count = next(line for line in text.splitlines() if re.match(r"^\(\d+ ", line))
    return cells[0], cells[1:], count


def test_tools_and_resources_are_listed(server):
    tools = server.portal.call(server.client.list_tools)
    assert {t.name for t in tools.tools} == TOOLS
    assert all(t.annotations.read_only_hint for t in tools.tools)
    resources = server.portal.call(server.client.list_resources)
    assert {str(r.uri) for r in resources.resources} == {"kwh://views", "kwh://metric-catalog"}
    roofline = server.portal.call(server.client.read_resource, "kwh://views/roofline")
    assert roofline.contents[0].text == views.view_named("roofline").sql
    index = server.portal.call(server.client.read_resource, "kwh://views").contents[0].text
    assert index.splitlines() == [f"{v.name}: {v.description}" for v in views.all_views().values()]


def test_list_views_matches_kwh_views(server, warehouse):
    error, text = server("list_views")
    assert not error
    listed = kwh(warehouse, "views").splitlines()[2:-1]       # header, rule ... (N rows)
    assert len(listed) == len(views.all_views())
    for line in listed:
        name, description = re.split(r"\s{2,}", line, maxsplit=1)
        assert f"view {name}: {description}\n" in text
    error, one = server("list_views", name="what_to_fix_first")
    described = kwh_csv(warehouse, "sql", "DESCRIBE what_to_fix_first")
    assert not error and one.splitlines()[1] == "  columns: " + ", ".join(
        f"{c['column_name']} {c['column_type']}" for c in described)
    error, wrong = server("list_views", name="what_to_fix_frist")
    assert error and "did you mean what_to_fix_first" in wrong


def test_sql_pages_match_kwh_sql(server, warehouse):
    query = "SELECT model, count(*) AS kernels, sum(duration_ns) AS duration_ns FROM kernels GROUP BY 1 ORDER BY 1"
    expected = kwh_csv(warehouse, "sql", query)
    assert kwh_csv(warehouse, "sql", "--read-only-confined", query) == expected
    pages = []
    for offset in range(0, len(expected), 3):
        error, text = server("sql", query=query, limit=3, offset=offset)
        assert not error
        columns, rows, count = table(text)
        assert columns == ["model", "kernels", "duration_ns"]
        assert count.startswith(f"({len(expected)} rows")
        pages += rows
    assert count == f"({len(expected)} rows; showing {offset + 1}-{len(expected)})"
    assert [r[:2] for r in pages] == [[e["model"], e["kernels"]] for e in expected]
    assert [float(r[2]) for r in pages] == pytest.approx([float(e["duration_ns"]) for e in expected], rel=1e-5)


HOSTILE = {
    "read_text('/etc/passwd')": "SELECT * FROM read_text('/etc/passwd')",
    "read_csv of a file outside": "SELECT * FROM read_csv('{outside}')",
    "a glob outside": "SELECT * FROM glob('/etc/*')",
    "the catalog beside the Parquet": "SELECT * FROM read_blob('{root}/catalog.sqlite')",
    "out through ..": "SELECT * FROM read_text('{root}/_files/../../{outside_name}')",
    "COPY TO": "COPY (SELECT 1 AS a) TO '{written}'",
    "COPY in a SELECT's clothes": "SELECT * FROM query('COPY (SELECT 1) TO ''{written}''')",
    "ATTACH": "ATTACH '{written}.duckdb' AS other",
    "INSTALL": "INSTALL httpfs",
    "LOAD": "LOAD httpfs",
    "SET to undo the lock": "SET enable_external_access = true",
    "RESET": "RESET lock_configuration",
    "PRAGMA": "PRAGMA enable_profiling",
    "a write": "CREATE TABLE stolen AS SELECT * FROM runs",
    "multiple statements": "SELECT 1; SELECT * FROM read_text('/etc/passwd')",
    "a very long query": "SELECT 1 AS a" + " " * confined.MAX_QUERY_CHARS,
}


def test_hostile_queries_are_refused(server, warehouse, tmp_path):
    outside = tmp_path / "secret.csv"
    outside.write_text("password\nhunter2\n")
    written = tmp_path / "written.csv"
    values = {"outside": outside, "outside_name": outside.name, "root": warehouse.root, "written": written}
    for what, query in HOSTILE.items():
        query = query.format(**values)
        error, text = server("sql", query=query)
        assert error, what
        assert len(text.splitlines()) == 1 and ("refused" in text or "failed" in text), (what, text)
        assert "hunter2" not in text and "root:" not in text, what
        cli = CliRunner().invoke(main, ["--warehouse", str(warehouse.root), "sql", "--read-only-confined", query])
        assert cli.exit_code == 1 and cli.output.startswith("Error: ") and len(cli.output.splitlines()) == 1, (what, cli.output)
    assert not written.exists() and not Path(f"{written}.duckdb").exists()
    # without the flag, kwh sql keeps DuckDB's powers (the confinement is what refused above)
    assert "hunter2" in kwh(warehouse, "sql", f"SELECT * FROM read_csv('{outside}')")


def test_a_long_query_is_stopped(warehouse):
    con, root = confined.open_connection(warehouse.root)
    confined.confine(con, root)
    started = time.monotonic()
    with pytest.raises(confined.ConfinedQueryError, match="time limit of 0.3 s"):
        confined.run(con, "SELECT count(*) FROM range(1000000000000)", timeout_s=0.3)
    assert time.monotonic() - started < 10
    assert confined.run(con, "SELECT count(*) FROM runs").rows[0][0] > 0     # the connection still answers
    con.close()


def test_the_settings_are_locked_beneath_the_statement_checks(warehouse):
    """Defence in depth: a SET that got past the statement checks would still not undo the confinement."""
    import duckdb
    con, root = confined.open_connection(warehouse.root)
    confined.confine(con, root)
    try:
        for statement in ("SET enable_external_access = true", "RESET allowed_directories",
                          "SET lock_configuration = false", "SET autoload_known_extensions = true"):
            with pytest.raises(duckdb.Error, match="locked"):
                con.execute(statement)
        settings = confined.run(con, "SELECT current_setting('enable_external_access'), "
                                     "current_setting('autoload_known_extensions'), "
                                     "current_setting('autoinstall_known_extensions'), current_setting('temp_directory')")
        assert settings.rows == [(False, False, False, "")]
    finally:
        con.close()


def test_what_to_fix_first_matches_kwh_query(server, warehouse):
    expected = kwh_csv(warehouse, "query", "what_to_fix_first")
    error, text = server("what_to_fix_first", limit=5)
    assert not error
    columns, rows, count = table(text)
    assert count.startswith(f"({len(expected)} fixes")
    picked = [columns.index(c) for c in ("rank", "signal", "subject", "saves", "time_basis")]
    # long cells end in … (an answer must fit an agent's context)
    assert [[r[i] for i in picked] for r in rows] == [[confined.cell(e[c]) for c in ("rank", "signal", "subject", "saves",
                                                                                    "time_basis")] for e in expected[:5]]
    error, text = server("what_to_fix_first", model="gpt2", limit=50)
    of_gpt2 = [e for e in expected if "gpt2" in e["model_list"].split(",")]
    assert of_gpt2 and [r[0] for r in table(text)[1]] == [e["rank"] for e in of_gpt2]
    error, text = server("what_to_fix_first", model="gtp2")
    assert error and "did you mean gpt2" in text


def test_explain_kernel_matches_the_views(server, warehouse):
    error, text = server("explain_kernel", kernel=SGEMM)
    assert not error and text.startswith(f"Kernel {SGEMM}: naive_sgemm (models: custom_cupy)")
    sections = text.split("\n\n")
    verdicts = kwh_csv(warehouse, "query", "bottleneck_class", "--where", f"kernel_id = '{SGEMM}'")
    columns, rows, _ = table(sections[2])
    longest = max(verdicts, key=lambda v: float(v["duration_ns"] or 0))
    assert rows[0][columns.index("bottleneck")] == longest["bottleneck"]
    assert rows[0][columns.index("decided_by")] == longest["decided_by"]
    assert rows[0][columns.index("ncu_verdict")] == longest["ncu_verdict"]
    roofline = kwh_csv(warehouse, "query", "roofline", "--where", f"level = 'kernel' AND kernel_id = '{SGEMM}'")
    columns, rows, _ = table(sections[3])
    assert [r[columns.index("roof_side")] for r in rows] == [r["roof_side"] for r in roofline]
    assert float(rows[0][columns.index("pct_of_roof")]) == pytest.approx(float(roofline[0]["pct_of_roof"]), rel=1e-5)
    signals = kwh_csv(warehouse, "query", "design_signals", "--where", f"kernel_id = '{SGEMM}'")
    columns, rows, _ = table(sections[4])
    assert sorted(r[columns.index("signal")] for r in rows) == sorted(s["signal"] for s in signals)
    columns, rows, _ = table(sections[5])
    assert rows[0][columns.index("counter_match")] == "exact shape"
    # a name fragment naming several kernels lists them, one line
    error, text = server("explain_kernel", kernel="gemm")
    assert error and len(text.splitlines()) == 1 and SGEMM in text and "ask again with one kernel_id" in text


def test_hot_unprofiled_kernels_match_kernel_time(server, warehouse):
    rows = kwh_csv(warehouse, "query", "kernel_time", "--where", "model = 'gpt2_train'")
    unprofiled: dict[str, float] = {}
    for row in rows:
        if row["counter_match"] == "not profiled" and float(row["gpu_time_ns"] or 0) > 0:
            unprofiled[row["kernel_id"]] = unprofiled.get(row["kernel_id"], 0.0) + float(row["gpu_time_ns"])
    expected = sorted(unprofiled, key=lambda k: (-unprofiled[k], k))[:4]
    error, text = server("hot_unprofiled_kernels", model="gpt2_train", top=4)
    assert not error
    columns, listed, count = table(text)
    assert [r[0] for r in listed] == expected and count.startswith(f"({len(unprofiled)} unprofiled kernels")
    command = text.splitlines()[-1]
    assert command.startswith("kwh profile --model gpt2_train --kernel-regex '")
    regex = re.compile(command.split("'")[1])
    names = {r["kernel_id"]: r["kernel_base"] for r in rows}
    assert all(regex.search(names[k]) for k in expected)
    profiled = {r["kernel_base"] for r in rows if r["counter_match"] != "not profiled"} - {names[k] for k in expected}
    assert not any(regex.search(name) for name in profiled)


@pytest.fixture(scope="module")
def second_night(server, warehouse, tmp_path_factory):
    """gpt2 of the night before ingested while the server answers: the answers seen during the ingest."""
    night = tmp_path_factory.mktemp("night") / "gpt2"
    shutil.copytree(DATA / "ncu-gpt2-h100", night)
    manifest = night / "manifest.ncu.json"
    manifest.write_text(manifest.read_text().replace('"2026-11-23"', '"2026-11-22"'))
    for export in night.glob("*.csv"):      # another file (kwh skips a file it has by its sha256), the same rows
        export.write_bytes(export.read_bytes() + b"\n")
    query = "SELECT count(*) AS kernels, count(DISTINCT run_id) AS runs FROM kernels WHERE model = 'gpt2'"
    before = server("sql", query=query)
    done = threading.Event()

    def ingest():
        try:
            report = ingest_job.ingest([night], Warehouse(warehouse.root))
            assert report.failed == []
        finally:
            done.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    seen = []
    while not done.is_set():
        seen.append(server("sql", query=query))
    writer.join()
    after = server("sql", query=query)
    return before, seen, after


def test_a_concurrent_ingest_is_seen_one_snapshot_at_a_time(second_night):
    before, seen, after = second_night
    assert not before[0] and not after[0]
    assert table(before[1])[1][0][1] == "1" and table(after[1])[1][0][1] == "2"
    assert int(table(after[1])[1][0][0]) == 2 * int(table(before[1])[1][0][0])
    assert seen and all(answer in (before, after) for answer in seen), [a for a in seen if a not in (before, after)]


def test_compare_two_dates_matches_kwh_diff(server, warehouse, second_night):
    sides = ["model=gpt2,date=2026-11-22", "model=gpt2,date=2026-11-23"]
    expected = json.loads(CliRunner().invoke(main, ["--warehouse", str(warehouse.root), "diff", *sides, "--all",
                                                    "--json"]).output)
    error, text = server("compare", baseline=sides[0], candidate=sides[1], include_unchanged=True, limit=200)
    assert not error and text.startswith("baseline 1 run(s)")
    columns, rows, count = table(text)
    assert count.startswith(f"({len(expected)} kernel")
    assert [(r[0], r[columns.index("change")], r[columns.index("significance")]) for r in rows] == \
           [(e["kernel_id"], e["change"], e["significance"]) for e in expected]
    error, text = server("compare", baseline="model=nosuchmodel", candidate=sides[1])
    assert error and "no run matches 'model=nosuchmodel'" in text


def test_the_confinement_covers_the_in_memory_views_too(warehouse):
    """When warehouse.duckdb cannot be attached (here: a session holds it for writing), kwh reads the views of
    a private copy of its views template over the Parquet files themselves: the confined connection reads all
    of them still."""
    import gc

    import duckdb
    tables = ("runs", "kernels", "metrics", "kernel_launches", "kernel_summaries", "nvtx_summaries", "rules")
    query = " UNION ALL ".join(f"SELECT '{t}', count(*) FROM {t}" for t in tables)
    gc.collect()       # the connections of the kwh commands run in this process before, which attached the file
    held = duckdb.connect(str(warehouse.duckdb_path))
    try:
        con, root = confined.open_connection(warehouse.root)
        # not warehouse.duckdb: the views of a private copy of kwh's views template, over the snapshot's files
        attached = con.execute("SELECT database_name, path FROM duckdb_databases() WHERE NOT internal").fetchall()
        assert sorted(name for name, _ in attached) == ["kwh_views", "memory"], attached
        assert str(warehouse.duckdb_path) not in {path for _, path in attached}
        confined.confine(con, root)
        page = confined.run(con, query)
    finally:
        held.close()
    expected = kwh(warehouse, "sql", "--csv", query)
    assert [f"{t},{n}" for t, n in page.rows] == expected.splitlines()[1:]
    with pytest.raises(confined.ConfinedQueryError, match="refused"):
        confined.run(con, f"SELECT * FROM read_blob('{root}/catalog.sqlite')")
