"""Failure isolation (issue 31, part 1): whatever goes wrong with one file (a bad export, a reader's bug,
rows that do not fit the schema) is that file's one-line error, and every other file and run of the
command is committed. ncu rule messages no row of ncu_rules.csv knows are kept with an empty rule name.
A batch built run by run says why, and a clean corpus never falls back."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from conftest import DATA, EXPORT_FOLDERS, rows
from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse import build
from kwarehouse.jobs import fanout
from kwarehouse.cli import main
from kwarehouse.ingest import ncu_text
from kwarehouse.store.warehouse import Warehouse

ROOF = DATA / "roof-ncu-h100"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus"
# What the two messages of ncu 2025.3.1's SOLBottleneck rule start with, as issue 31 quotes them.
ROOF_MESSAGES = ("This workload is utilizing greater than 80.0% of the available compute or memory performance",
                 "Compute and Memory are well-balanced: To reduce runtime, both computation and memory traffic")
SOURCES = [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name.startswith(EXPORT_FOLDERS)]


def details_pages(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*details*.csv") if p.parent.name != "bad")


def mismatched_rule_names(paths: list[Path]) -> tuple[int, list[tuple]]:
    """Rule rows of details CSVs (which carry ncu's own Rule Name) whose description the lookup that
    names console-text rules (ncu_text.rule_name) names otherwise."""
    count, wrong = 0, []
    for path in paths:
        for row in ingest.read(path).rules.iter_rows(named=True):
            count += 1
            if ncu_text.rule_name(row["section"] or "", row["description"]) != row["rule_name"]:
                wrong.append((path.name, row["section"], row["rule_name"], row["description"][:80]))
    return count, wrong


# -- unknown rule texts --------------------------------------------------------------------------

def test_the_lookup_names_every_rule_of_every_details_page_as_ncu_does():
    count, wrong = mismatched_rule_names(details_pages(DATA))
    assert count > 300 and wrong == []


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/corpus not present")
def test_the_lookup_names_every_rule_of_the_corpus_as_ncu_does(whole_corpus):
    runs, _, _ = whole_corpus     # every corpus report, extracted once for the session
    count, wrong = mismatched_rule_names([p for p in details_pages(runs) if p.name.endswith(".details.csv")])
    assert count > 5000 and wrong == []


def test_the_roof_capture_names_both_solbottleneck_messages():
    """A real capture whose kernels run at the roof: its console text's rules all have names, among them
    the two SOLBottleneck messages ncu_rules.csv lacked before (they came back NULL and stopped ingest)."""
    rules = ingest.read(ROOF / "roof.ncu-console.txt").rules
    assert rules.height and rules["rule_name"].null_count() == 0 and "" not in rules["rule_name"].to_list()
    named = {(r["rule_name"], r["rule_type"]) for r in rules.iter_rows(named=True)
             if r["description"].startswith(ROOF_MESSAGES)}
    assert named == {("SOLBottleneck", "INF")}
    details = ingest.read(ROOF / "roof.details.csv").rules
    assert sorted(rules.select("launch_id", "rule_name", "description").rows()) == \
        sorted(details.select("launch_id", "rule_name", "description").rows())


def reworded(tmp_path: Path) -> Path:
    """The roof console text with one rule message reworded (as a newer ncu might print it) and one
    section renamed: texts no row of ncu_rules.csv or ncu_sections.csv knows."""
    folder = tmp_path / "newer-ncu"
    folder.mkdir()
    text = (ROOF / "roof.ncu-console.txt").read_text(encoding="utf-8")
    assert text.count("This workload is utilizing greater than") == 2
    text = text.replace("This workload is utilizing greater than", "This workload now runs at more than")
    assert text.count("    Section: Launch Statistics\n") == 5
    text = text.replace("    Section: Launch Statistics\n", "    Section: Launch Statistics (Beta)\n")
    (folder / "roof.ncu-console.txt").write_text(text, encoding="utf-8")
    return folder


def test_an_unknown_rule_message_and_section_keep_their_text_with_an_empty_rule_name(tmp_path, warehouse):
    report = ingest_job.ingest([reworded(tmp_path)], warehouse)
    assert report.failed == [] and len(report.runs) == 1
    got = rows(warehouse, "SELECT launch_id, section, rule_type, description FROM rules WHERE rule_name = '' "
                          "ORDER BY launch_id, description")
    # a known section's unknown message: under its identifier; an unknown section: under its label
    assert [(launch, section, kind, text[:36]) for launch, section, kind, text in got] == [
        (0, "Launch Statistics (Beta)", "OPT", "If you execute __syncthreads() to sy"),
        (0, "SpeedOfLight", "INF", "This workload now runs at more than "),
        (1, "Launch Statistics (Beta)", "OPT", "If you execute __syncthreads() to sy"),
        (2, "Launch Statistics (Beta)", "OPT", "If you execute __syncthreads() to sy"),
        (3, "SpeedOfLight", "INF", "This workload now runs at more than "),
    ]
    assert rows(warehouse, "SELECT count(*) FROM rules WHERE rule_name IS NULL") == [(0,)]


# -- failure isolation ---------------------------------------------------------------------------

def null_rule_names(monkeypatch) -> None:
    """The lookup as it was: no name (NULL) for a message it does not know; the roof capture's
    SOLBottleneck '> 80%' texts. The rules table's rule_name is NOT NULL, so those rows do not fit."""
    known = ncu_text.rule_name
    monkeypatch.setattr(ncu_text, "rule_name", lambda section, text: None if "greater than 80.0%" in text
                        else known(section, text))


def test_rows_that_do_not_fit_the_schema_cost_only_their_file(tmp_path, warehouse, monkeypatch):
    null_rule_names(monkeypatch)
    others = [DATA / "ncu-gpt2-h100", DATA / "ncu-custom-cupy-h100", DATA / "torch-trace-gpt2"]
    report = ingest_job.ingest([ROOF, *others], warehouse)
    assert report.failed == [
        f"{ROOF / 'roof.ncu-console.txt'}: internal error while building its run (SchemaError: internal: table "
        "rules has NULLs in NOT NULL column rule_name); nothing of it was stored, the other files are not "
        "affected: please report this with the file"]
    # the roof run keeps the pages that do fit (its raw and details CSV), and every other run goes in
    runs = {r.model: sorted(Path(f).name for f in r.files) for r in report.runs}
    assert runs["roof-ncu-h100"] == ["roof.details.csv", "roof.raw.csv"]
    assert set(runs) == {"roof-ncu-h100", "gpt2", "custom_cupy"}
    assert rows(warehouse, "SELECT count(*) FROM kernels") == [(5 + 3 + 4,)]
    # the batch of ncu runs failed for that file and went run by run: said once, with why
    assert len(report.fallbacks) == 1 and "SchemaError" in report.fallbacks[0]


def test_the_file_fixed_later_joins_its_run(tmp_path, warehouse, monkeypatch):
    with monkeypatch.context() as patched:
        null_rule_names(patched)
        assert len(ingest_job.ingest([ROOF], warehouse).failed) == 1
    again = ingest_job.ingest([ROOF], warehouse)
    assert again.failed == [] and [Path(f).name for f in again.runs[0].files] == ["roof.ncu-console.txt"]
    assert rows(warehouse, "SELECT count(*) FROM runs") == [(1,)]


def test_a_reader_bug_costs_only_its_file(tmp_path, warehouse, monkeypatch):
    """Any exception of a reader (not only KwhError) is its file's one line, naming it, saying to report it."""
    real = ingest.read_with

    def buggy(reader, path, data=None):
        if path.name == "gpt2.details.csv":
            raise IndexError("list index out of range")
        return real(reader, path, data)
    monkeypatch.setattr(ingest, "read_with", buggy)
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "ncu-custom-cupy-h100"], warehouse)
    assert report.failed == [
        f"{DATA / 'ncu-gpt2-h100/gpt2.details.csv'}: internal error while reading it (IndexError: list index out "
        "of range); nothing of it was stored, the other files are not affected: please report this with the file"]
    assert sorted(r.model for r in report.runs) == ["custom_cupy", "gpt2"]
    assert report.fallbacks == []


def test_a_normalization_bug_in_one_run_costs_only_that_run(tmp_path, warehouse, monkeypatch):
    real = build.run.build_run

    def buggy(run_id, members, *args, **kwargs):
        if any(m.result.path.name == "custom_cupy.raw.csv" for m in members):
            raise ZeroDivisionError("division by zero")
        return real(run_id, members, *args, **kwargs)
    monkeypatch.setattr(build.run, "build_run", buggy)
    warehouse.settings = dataclasses.replace(warehouse.settings, batch_runs=1)   # run by run: no batch to fall back from
    report = ingest_job.ingest([DATA / "ncu-custom-cupy-h100", DATA / "ncu-gpt2-h100"], warehouse)
    assert len(report.failed) == 1 and report.failed[0].startswith(
        f"{DATA / 'ncu-custom-cupy-h100/custom_cupy.raw.csv'}: internal error while building its run "
        "(ZeroDivisionError: division by zero)")
    assert [r.model for r in report.runs] == ["gpt2"]


def in_this_process(jobs, context):
    """A fan-out that prepares each job here (monkeypatches reach it; spawned workers start afresh)."""
    return (fanout.prepare_folder(job, context) for job in jobs)


def test_the_fan_out_isolates_files_too(tmp_path, warehouse, monkeypatch):
    null_rule_names(monkeypatch)
    report = ingest_job.ingest([ROOF, DATA / "ncu-gpt2-h100", DATA / "ncu-custom-cupy-h100"], warehouse,
                             fan_out=in_this_process)
    assert len(report.failed) == 1 and report.failed[0].startswith(f"{ROOF / 'roof.ncu-console.txt'}: internal error")
    assert sorted(r.model for r in report.runs) == ["custom_cupy", "gpt2", "roof-ncu-h100"]
    assert len(report.fallbacks) == 1 and "SchemaError" in report.fallbacks[0]


@pytest.mark.catalog
def test_a_failed_fan_out_job_is_done_by_the_driver_and_said(tmp_path, warehouse, monkeypatch):
    real = build.run.read_folder
    calls = []

    def read_folder(*args, **kwargs):   # the worker's read fails; the driver's succeeds
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a worker-only bug")
        return real(*args, **kwargs)
    monkeypatch.setattr(build.run, "read_folder", read_folder)
    report = ingest_job.ingest([DATA / "ncu-custom-cupy-h100"], warehouse, fan_out=in_this_process)
    assert report.failed == [] and [r.model for r in report.runs] == ["custom_cupy"]
    assert len(report.fallbacks) == 1 and "RuntimeError: a worker-only bug" in report.fallbacks[0]


def test_clean_test_exports_never_fall_back(tmp_path):
    report = ingest_job.ingest(SOURCES, Warehouse(tmp_path / "wh"))
    assert report.failed == [] and report.fallbacks == [] and len(report.runs) > 10
    fanned = ingest_job.ingest(SOURCES, Warehouse(tmp_path / "fanned"), fan_out=in_this_process)
    assert fanned.failed == [] and fanned.fallbacks == []


def test_two_runs_of_one_model_and_gpu_in_one_batch_do_not_fall_back(tmp_path):
    """Two reports of gpt2 on one H100 (as the corpus's two gpt2 folders): their metrics rows share one
    Parquet file, ordered run by run, which the writer sorts; its string_view columns once made that
    sort fail and the batch fall back (silently, before the fallback was recorded)."""
    report = ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "text-ncu-gpt2-h100"], Warehouse(tmp_path / "wh"))
    assert [(r.model, r.gpu) for r in report.runs] == [("gpt2", "NVIDIA H100 80GB HBM3")] * 2
    assert report.failed == [] and report.fallbacks == []


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/corpus not present")
def test_the_corpus_never_falls_back(whole_corpus):
    # the session's one ingest of every corpus report in one batch (conftest.whole_corpus)
    _, _, report = whole_corpus
    assert report.failed == [] and report.fallbacks == [] and len(report.runs) >= 9


# -- the acceptance check of issue 31 ------------------------------------------------------------

def acceptance_folder(tmp_path: Path) -> Path:
    """One export with a rule text ncu_rules.csv does not know (the roof capture's console text,
    reworded), one polluted console capture (a real nsys --stats=true capture with nsys's stderr line
    written into a row of the kernel summary table kwh needs) and one clean CSV export."""
    drop = tmp_path / "drop"
    shutil.copytree(reworded(tmp_path), drop / "newer-ncu")
    polluted = drop / "polluted"
    polluted.mkdir()
    lines = (DATA / "text-nsys-a100-vectoradd/stats_console.txt").read_text(encoding="utf-8").split("\n")
    row = next(i for i, line in enumerate(lines) if line.rstrip().endswith("vectorAdd(const float *, const float *, float *, int)"))
    cut = lines[row].index("1,010")
    lines[row:row + 1] = [lines[row][:cut] + "SKIPPED: /tmp/report1.sqlite does not contain NV Tools Extension (NVTX) data.",
                          lines[row][cut:]]
    (polluted / "stats_console.txt").write_text("\n".join(lines), encoding="utf-8")
    shutil.copytree(DATA / "ncu-custom-cupy-h100", drop / "clean")
    return drop


def test_acceptance_ingest(tmp_path):
    drop = acceptance_folder(tmp_path)
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "ingest", str(drop)])
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code == (1 if errors else 0), result.output
    polluted = drop / "polluted" / "stats_console.txt"
    for line in errors:   # one line each, naming its file
        assert line.startswith(f"Error: {polluted}:"), line
    con = duckdb.connect(str(tmp_path / "wh" / "warehouse.duckdb"), read_only=True)
    models = dict(con.execute("SELECT model, kernel_count FROM runs").fetchall())
    assert models["custom_cupy"] == 4 and models["newer-ncu"] == 5   # the clean CSV (its manifest names it)
    assert con.execute("SELECT count(*) FROM rules WHERE rule_name = '' AND description LIKE "
                       "'This workload now runs at more than 80.0%'").fetchone() == (2,)
    # the polluted capture is refused with its line, or its intact tables are in
    assert errors or "polluted" in models


def test_acceptance_nightly_is_not_blocked(tmp_path):
    drop = acceptance_folder(tmp_path)
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "nightly", str(drop), "--settle", "0"])
    assert "nightly " in result.output and "Traceback" not in result.output, result.output
    con = duckdb.connect(str(tmp_path / "wh" / "warehouse.duckdb"), read_only=True)
    assert {"custom_cupy", "newer-ncu"} <= {m for m, in con.execute("SELECT model FROM runs").fetchall()}


def test_the_cli_says_why_a_batch_went_run_by_run(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("a bug of the batch path")
    monkeypatch.setattr(build.batch, "build_ncu_batch", broken)
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "ingest",
                                       str(DATA / "ncu-gpt2-h100"), str(DATA / "ncu-custom-cupy-h100")])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("Note: ")]
    assert notes == [f"Note: 2 runs ({DATA / 'ncu-custom-cupy-h100/custom_cupy.raw.csv'}, "
                     f"{DATA / 'ncu-gpt2-h100/gpt2.details.csv'}, {DATA / 'ncu-gpt2-h100/gpt2.details.mangled.csv'}, "
                     "...) were committed one by one: building them together failed (ValueError: a bug of the "
                     "batch path)"]
