"""The CLI through click's CliRunner: exact output lines and error text."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from kwarehouse import views as views_lib
from kwarehouse.cli import main

from conftest import DATA


@pytest.fixture
def run(tmp_path):
    runner = CliRunner()
    def invoke(*args, input=None):
        return runner.invoke(main, ["--warehouse", str(tmp_path / "wh"), *args], input=input)
    return invoke


def test_ingest_then_query_then_reingest(run):
    result = run("ingest", str(DATA / "ncu-gpt2-h100"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("new run ") and lines[0].endswith(": gpt2 on NVIDIA H100 80GB HBM3, 3 kernels from 4 file(s)")
    assert lines[-1] == "ingested 1 run(s), 3 kernels; 0 already ingested, 0 other file(s) ignored, 0 failed"
    result = run("sql", "--csv", "select model, count(*) as n from kernels group by 1")
    assert result.output == "model,n\ngpt2,3\n"
    result = run("sql", "--json", "select model, count(*) as n from kernels group by 1")
    assert json.loads(result.output) == [{"model": "gpt2", "n": 3}]
    again = run("ingest", str(DATA / "ncu-gpt2-h100"))
    assert again.exit_code == 0
    assert sum("already ingested (run " in line for line in again.output.splitlines()) == 4
    assert again.output.splitlines()[-1] == "ingested 0 run(s), 0 kernels; 4 already ingested, 0 other file(s) ignored, 0 failed"


def test_failed_files_set_the_exit_status_and_others_go_in(run, tmp_path):
    folder = tmp_path / "runs"
    shutil.copytree(DATA / "ncu-gpt2-h100", folder / "gpt2")
    shutil.copy(DATA / "bad/truncated.raw.csv", folder)
    result = run("ingest", str(folder))
    assert result.exit_code == 1
    assert f"Error: {folder}/truncated.raw.csv:4: file ends in the middle of a row (truncated?); re-export it with ncu --csv" in result.output
    assert run("sql", "--csv", "select count(*) as n from kernels").output == "n\n3\n"


def test_table_output_and_sql_errors(run):
    run("ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd", "--tag", "team=sim")
    table = run("sql", "select model, round(sum(duration_ns)) as ns from kernels group by 1")
    assert table.output.splitlines() == ["model      ns", "------  -----", "vecadd  8,160", "(1 row)"]
    bad = run("sql", "select nope from kernels")
    assert bad.exit_code == 1
    assert bad.output.startswith('Error: Binder Error: Referenced column "nope" not found')


def test_interactive_prompt(run):
    run("ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
    result = run("sql", input="select count(*) as n\nfrom kernels;\n.quit\n")
    assert result.exit_code == 0
    assert "n\n-\n3\n(1 row)" in result.output


def test_bad_tag_and_unknown_format(run):
    assert "'x' is not key=value" in run("ingest", str(DATA), "--tag", "x").output
    result = run("ingest", str(DATA / "ncu-gtx1080-raw"), "--format", "ncu-raww")
    assert result.exit_code == 1
    from kwarehouse.ingest import READERS
    assert result.output.strip() == "Error: unknown format 'ncu-raww'; known formats: " + ", ".join(READERS)
    assert list(READERS)[:2] == ["ncu-raw-csv", "ncu-details-csv"]


def test_reading_commands_never_create_a_warehouse(run, tmp_path):
    for args in (["summary"], ["sql", "select 1"]):
        result = run(*args)
        assert result.exit_code == 1
        assert result.output == (f"Error: {tmp_path / 'wh'}: no warehouse here yet; run kwh ingest first "
                                 "(or pass --warehouse / set KWH_WAREHOUSE)\n")
    assert not (tmp_path / "wh").exists()


def test_summary(run):
    run("ingest", str(DATA / "ncu-gpt2-h100"))
    output = run("summary").output
    assert "Kernels per model" in output and "Top 10 kernels by GPU time" in output
    assert "gpt2   NVIDIA H100 80GB HBM3     1  ncu          3" in output
    # runs counts traces too; with a trace, the kernels and their time are the trace's (real GPU time)
    run("ingest", str(DATA / "torch-trace-gpt2"))
    assert "gpt2   NVIDIA H100 80GB HBM3     2  ncu, torch       38" in run("summary").output


def test_every_command_has_help_with_an_example(run):
    for name in main.commands:
        result = run(name, "--help")
        assert result.exit_code == 0 and "Example:" in result.output, name


def test_kernels_and_renormalize(run):
    run("ingest", str(DATA / "ncu-custom-cupy-h100"))
    listed = run("kernels", "--csv").output.splitlines()
    assert listed[0].startswith("kernel_id,library,op_class,launches,models,gpu_time_us,share_pct,kernel_display,"
                                "bottleneck,fix,kernel_base")
    assert [line.split(",")[7] for line in listed[1:3]] == ["naive_sgemm", "saxpy"]
    # each identity's verdict (bottleneck_class of its longest launch): saxpy streams at the DRAM roof
    assert listed[2].split(",")[8] == "memory-bound (dram)"
    assert run("kernels", "--unclassified").output.endswith("(0 rows)\n")
    assert run("renormalize").output == "0 run(s) changed, 1 unchanged\n"


def test_views_lists_every_view_with_its_description(run):
    lines = run("views").output.splitlines()
    assert lines[0].split() == ["view", "description"]
    assert lines[2].startswith("bottleneck_class         Bottleneck of each launch (compute-bound, memory-bound, "
                               "cache-inefficient, latency-bound, occupancy-limited, grid-too-small, launch-overhead or mixed; "
                               "'not enough data' where the export lacks a metric the verdict needs")
    assert lines[-1] == f"({len(views_lib.all_views())} rows)"


def test_views_show_prints_the_sql(run):
    from kwarehouse.views import all_views
    assert run("views", "show", "library_share").output == all_views()["library_share"].sql
    result = run("views", "show", "library_shares")
    assert result.exit_code == 1
    assert result.output.startswith("Error: no view named 'library_shares'; did you mean library_share")   # the closest first


def test_query_runs_a_view_with_where_and_limit(run):
    run("ingest", str(DATA / "ncu-custom-cupy-h100"))
    result = run("query", "bottleneck_class", "--where", "bottleneck = 'memory-bound' AND limiting_unit = 'dram'", "--csv")
    lines = result.output.splitlines()
    assert lines[0].startswith("run_id,launch_id,model,gpu,kernel_id,library,op_class,kernel_base,bottleneck,limiting_unit,"
                               "seed_class,ncu_verdict,agrees_with_ncu,disagreement,decided_by,fix,missing_data,framework,duration_ns,")
    assert [line.split(",")[7] for line in lines[1:]] == ["saxpy", "cub::detail::reduce::DeviceReduceKernel"]
    assert run("query", "library_share", "--limit", "1").output == (
        "model        gpu                    library  op_class  launches  gpu_time_ns  op_class_pct  library_pct  time_basis  counter_coverage_pct\n"
        "-----------  ---------------------  -------  --------  --------  -----------  ------------  -----------  ----------  --------------------\n"
        "custom_cupy  NVIDIA H100 80GB HBM3  custom   gemm             1      415,296       80.5587      94.4258  ncu replay                   100\n"
        "(1 row)\n")
    records = json.loads(run("query", "kernel_popularity", "--where", "level = 'library'", "--json").output)
    assert [r["library"] for r in records] == ["custom", "CUB/Thrust"]


def test_query_errors(run):
    run("ingest", str(DATA / "ncu-custom-cupy-h100"))
    result = run("query", "speed_of_lite")
    assert (result.exit_code, result.output) == (1, "Error: no view named 'speed_of_lite'; did you mean speed_of_light?\n")
    result = run("query", "speed_of_light", "--where", "no_such_column = 1")
    assert result.exit_code == 1 and result.output.startswith("Error: Binder Error: Referenced column \"no_such_column\"")


def test_sql_file_runs_a_queries_file(run):
    from pathlib import Path
    run("ingest", str(DATA / "ncu-custom-cupy-h100"))
    queries = Path(__file__).parent.parent / "queries"
    result = run("sql", "-f", str(queries / "systemic_weaknesses.sql"), "--csv")
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == "signal,kernels_or_families,most_models_for_one_kernel,gpu_time_pct"
    assert run("sql", "SELECT 1", "-f", str(queries / "systemic_weaknesses.sql")).exit_code == 2


def test_cli_habits(tmp_path):
    """Options after the subcommand, export formats from the extension, checked dates, tables in
    kwh query, and a note when --model loses to a manifest."""
    runner = CliRunner()
    warehouse = str(tmp_path / "wh")
    ingested = runner.invoke(main, ["ingest", str(DATA / "ncu-custom-cupy-h100"), "--model", "other", "-w", warehouse])
    assert ingested.exit_code == 0, ingested.output
    assert "Note: --model other ignored for run" in ingested.output and "names the model 'custom_cupy'" in ingested.output
    assert runner.invoke(main, ["sql", "SELECT count(*) FROM kernels", "--warehouse", warehouse]).output.splitlines()[2].strip() == "4"
    for name, check in (("k.parquet", "parquet"), ("k.jsonl", "jsonl"), ("k.csv", "csv"), ("k.json", "json")):
        out = tmp_path / name
        done = runner.invoke(main, ["-w", warehouse, "export", "kernels", "-o", str(out)])
        assert done.exit_code == 0 and done.output == f"wrote 4 row(s) to {out}\n", done.output
        if check == "parquet":
            assert out.read_bytes()[:4] == b"PAR1"
        elif check == "jsonl":
            assert [json.loads(line)["model"] for line in out.read_text().splitlines()] == ["custom_cupy"] * 4
        elif check == "json":
            assert len(json.loads(out.read_text())) == 4
        else:
            assert out.read_text().startswith("run_id,")
    refused = runner.invoke(main, ["-w", warehouse, "export", "kernels", "-o", str(tmp_path / "k.txt")])
    assert refused.exit_code == 1 and "cannot tell the format from '.txt'" in refused.output
    assert not (tmp_path / "k.txt").exists()
    clash = runner.invoke(main, ["-w", warehouse, "export", "kernels", "-o", str(tmp_path / "x.csv"), "--format", "json"])
    assert clash.exit_code == 1 and "the name says csv but --format says json" in clash.output
    bad_date = runner.invoke(main, ["-w", warehouse, "report", "-o", str(tmp_path / "r.html"), "--since", "2026-13-01"])
    assert bad_date.exit_code == 2 and "'2026-13-01' is not a date (YYYY-MM-DD)" in bad_date.output
    table = runner.invoke(main, ["-w", warehouse, "query", "runs", "--json"])
    assert table.exit_code == 0 and [r["model"] for r in json.loads(table.output)] == ["custom_cupy"]
    assert "did you mean kernels" in runner.invoke(main, ["-w", warehouse, "query", "kernls"]).output


def test_the_prompt_on_a_terminal_edits_remembers_and_cancels(tmp_path):
    """kwh sql on a pseudo-terminal: a result, Up-arrow history, Ctrl-C cancelling a half-typed
    statement, dot commands, .quit."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time
    from pathlib import Path
    runner = CliRunner()
    runner.invoke(main, ["-w", str(tmp_path / "wh"), "ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd"])
    leader, follower = pty.openpty()
    env = {**os.environ, "HOME": str(tmp_path), "TERM": "xterm", "KWH_WAREHOUSE": str(tmp_path / "wh")}
    def own_terminal():     # a session of its own with the pty as its terminal, so Ctrl-C is a SIGINT
        import fcntl
        import termios
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    process = subprocess.Popen([str(Path(sys.executable).parent / "kwh"), "sql"], stdin=follower, stdout=follower,
                               stderr=follower, env=env, close_fds=True, preexec_fn=own_terminal)
    os.close(follower)
    seen = b""

    def until(text: bytes, timeout: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.2)[0]:
                try:
                    seen += os.read(leader, 65536)
                except OSError:
                    break
        assert text in seen, seen.decode(errors="replace")[-2000:]

    try:
        until(b"kwh> ")
        assert b"kernel_launches" in seen and b"roofline" in seen           # the banner lists everything
        os.write(leader, b"SELECT 40 + 2 AS answer;\r")
        until(b"42")
        seen = b""
        os.write(leader, b"\x1b[A\r")                                        # Up: the last statement again
        until(b"42")
        seen = b""
        os.write(leader, b"SELECT 'never run'")
        time.sleep(0.3)
        os.write(leader, b"\x03")                                            # Ctrl-C drops it
        until(b"^C")
        os.write(leader, b".tables\r")
        until(b"rollup_kernels_daily")
        os.write(leader, b".quit\r")
        assert process.wait(timeout=30) == 0
        assert "never run" not in (tmp_path / ".kwh_history").read_text()
        assert "SELECT 40 + 2 AS answer;" in (tmp_path / ".kwh_history").read_text()
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)


def test_piped_sql_is_a_script(run):
    run("ingest", str(DATA / "ncu-gtx1080-raw"), "--model", "vecadd")
    result = run("sql", input="SELECT 1 AS a; SELECT 2 AS b;\n.mode csv\nSELECT count(*) AS n FROM kernels")
    assert result.exit_code == 0, result.output
    assert "kwh>" not in result.output
    assert result.output.endswith("n\n3\n") and "a\n-\n1\n(1 row)" in result.output and "b\n-\n2\n(1 row)" in result.output


def test_tables_fit_the_terminal_and_numbers_have_one_format(monkeypatch):
    from kwarehouse import cli
    monkeypatch.setattr(cli, "_cell_limit", lambda: 24)
    text = cli.format_table(["kernel", "ns"], [("void cutlass::Kernel2<" + "x" * 200 + ">", 2415750.0), ("k", 0.5)])
    lines = text.splitlines()
    assert lines[2].startswith("void cutlass::Kernel2<x…") and len(lines[2]) < 40
    assert lines[2].endswith("2,415,750") and lines[3].endswith("0.5")
    monkeypatch.setattr(cli, "_cell_limit", lambda: None)     # --wide, or a pipe
    assert "x" * 200 in cli.format_table(["kernel"], [("void cutlass::Kernel2<" + "x" * 200 + ">",)])


def test_ingest_walks_its_sources_once(run, monkeypatch):
    """kwh ingest counts the files for its progress bar and ingests them from one walk of the folders
    (it walked them twice: once to count, once to ingest)."""
    import os
    walked = []
    real = os.walk

    def walk(top, *args, **kwargs):
        walked.append(str(top))
        return real(top, *args, **kwargs)
    monkeypatch.setattr(os, "walk", walk)
    result = run("ingest", str(DATA / "ncu-gpt2-h100"), str(DATA / "ncu-custom-cupy-h100"))
    assert result.exit_code == 0, result.output
    assert walked == [str(DATA / "ncu-gpt2-h100"), str(DATA / "ncu-custom-cupy-h100")]
    assert result.output.splitlines()[-1].startswith("ingested 2 run(s)")
