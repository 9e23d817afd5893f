"""Every command the README shows works: each `kwh ...` line of its bash blocks runs, as written, in a
folder laid out as the README assumes (runs/, fleet/, out.csv, queries/, a drop folder), after the
quick start's demo ingest. The few that cannot run here say why (SKIPPED) and where they are tested.

Lines with shell syntax (redirections, $(...)) or a prompt run in bash through the installed `kwh`, as the
demo's do; the others run in this process through click's CliRunner, with the same arguments, folder and
environment: a fresh `kwh` process spends ~0.5 CPU-s importing, half of this file's CPU when every line
started one."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kwarehouse.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
BIN = Path(sys.executable).parent

# Lines that cannot run in the suite, with where they are covered instead.
SKIPPED = {
    "duckdb -readonly warehouse/warehouse.duckdb": "an interactive DuckDB shell; tests/test_duckdb_shell.py runs "
                                                   "the shell on warehouse.duckdb",
    "kwh spark-sql": "starts Spark (seconds each); tests/test_spark.py::test_spark_sql_command runs it",
    "kwh ingest --engine spark": "needs a Spark cluster; tests/test_spark.py ingests on local Spark",
}
# What the README's placeholders stand for here.
PLACEHOLDERS = {"/data/kwh-drop": "drop", "/shared/fleet/": "fleet/"}
# what only a shell gives a line's meaning
SHELL_SYNTAX = re.compile(r"[<>|$`;&]")


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            command = re.split(r"\s{2,}#", line)[0].strip()
            if command.startswith(("kwh ", "duckdb ")) or command == "kwh":
                commands.append(command)
    return commands


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder as the README assumes, with the demo's warehouse in it."""
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples" / "runs", work / "runs")
    shutil.copytree(ROOT / "examples" / "runs", work / "fleet")
    shutil.copytree(DATA / "ncu-custom-cupy-h100", work / "drop" / "cupy")
    shutil.copy(next((DATA / "ncu-gtx1080-raw").glob("*.csv")), work / "out.csv")
    (work / "queries").symlink_to(ROOT / "queries")
    (work / "my_queries.sql").write_text("SELECT count(*) AS runs FROM runs;\n.mode csv\nSELECT 1 AS one\n")
    demo = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], cwd=ROOT, capture_output=True, text=True,
                          env={**_env(work), "KWH_WAREHOUSE": str(work / "warehouse")}, timeout=600)
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "Kernels per model" in demo.stdout and "Design signals" in demo.stdout
    # the night before, for the README's `kwh diff model=gpt2,date=2026-11-22 model=gpt2,date=2026-11-23`
    night = work / "previous-night" / "gpt2"
    shutil.copytree(DATA / "ncu-gpt2-h100", night)
    manifest = night / "manifest.ncu.json"
    manifest.write_text(manifest.read_text().replace('"2026-11-23"', '"2026-11-22"'))
    earlier = subprocess.run([str(BIN / "kwh"), "ingest", str(night)], cwd=work, env=_env(work),
                             capture_output=True, text=True)
    assert earlier.returncode == 0, earlier.stderr
    return work


def _env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KWH_")}
    return {**env, "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "KWH_WAREHOUSE": str(work / "warehouse")}


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_runs(workdir, command, monkeypatch):
    for prefix, why in SKIPPED.items():
        if command.startswith(prefix):
            pytest.skip(why)
    for placeholder, here in PLACEHOLDERS.items():
        command = command.replace(placeholder, here)
    interactive = command == "kwh sql"
    # kwh diff --fail-above exits 3 when the candidate regressed: that is the command working
    allowed = (0, 3) if "--fail-above" in command else (0,)
    # only kwh's own lines run in process (a duckdb line is another program)
    if command.startswith("kwh ") and not interactive and not SHELL_SYNTAX.search(command):
        monkeypatch.chdir(workdir)
        env = {**{k: None for k in os.environ if k.startswith("KWH_")}, **_env(workdir)}
        result = CliRunner().invoke(main, shlex.split(command)[1:], env=env)
        assert result.exit_code in allowed, f"{command}\n{result.output[-3000:]}"
        # an exception other than click's exit would have been a traceback in a terminal
        assert result.exception is None or isinstance(result.exception, SystemExit), (command, result.exception)
        return
    done = subprocess.run(["bash", "-c", command], cwd=workdir, env=_env(workdir), capture_output=True, text=True,
                          input="SELECT count(*) FROM runs;\n.quit\n" if interactive else "", timeout=300)
    assert done.returncode in allowed, f"{command}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    assert "Traceback" not in done.stderr


def test_readme_mcp_config_starts_the_server(workdir):
    """The README's MCP client config, as a client runs it: its command and args (the warehouse placeholder
    pointed at the demo's), started over stdio by the mcp SDK's client, answer a query as kwh sql does."""
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```json\n(.*?)```", text, re.S) if '"mcpServers"' in b]
    import json
    config = json.loads(block)["mcpServers"]["kwarehouse"]
    args = [str(workdir / "warehouse") if a == "/data/kwh" else a for a in config["args"]]
    assert args != config["args"], "the README's config names its warehouse /data/kwh"
    query = "SELECT count(*) AS runs FROM runs"
    expected = CliRunner().invoke(main, ["--warehouse", str(workdir / "warehouse"), "sql", "--csv", query]).output

    async def ask() -> tuple[set[str], str]:
        server = StdioServerParameters(command=config["command"], args=args, env=_env(workdir), cwd=str(workdir))
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("sql", {"query": query})
            return tools, result.content[0].text

    tools, answer = anyio.run(ask)
    assert {"sql", "what_to_fix_first", "explain_kernel", "compare"} <= tools
    assert answer.splitlines()[:2] == ["| runs |", f"| {expected.splitlines()[1]} |"]
