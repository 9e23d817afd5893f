"""Answers degrade, never crash (issue 31, part 5): every real export at hand in ONE warehouse, with
partial-data variants derived from them by code, and every view, `kwh summary`, `kwh report`, `kwh diff`
and `kwh rollup` over it.

The partial-data variants are what real users keep (each derived from a real export here, never
invented): an `ncu --metrics` list (a raw page of a few chosen metrics: no duration, no SOL section), a
single-section details page (`ncu --section Occupancy`: no duration either) and a raw page without the
LaunchStats section (no waves per SM). The slow variant adds ../shared's corpus tarballs and public samples.
"""

from __future__ import annotations

import csv
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kwarehouse import views as views_lib
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA, rows

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
# the columns ncu writes before the metrics on a raw page (identification, not measurements)
RAW_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
                "Grid Size", "Device", "CC")
# `ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,launch__registers_per_thread`: a list that
# ncu users type to measure bytes; it collects no duration and no SOL section
METRICS_LIST = ("dram__bytes_read.sum", "dram__bytes_write.sum", "launch__registers_per_thread")


def _copy_columns(source: Path, target: Path, keep) -> None:
    """A raw page (header row, units row, kernel rows) with only the columns `keep(name)` accepts."""
    with open(source, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    wanted = [i for i, name in enumerate(table[0]) if keep(name)]
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            [[row[i] for i in wanted] for row in table])


def _copy_sections(source: Path, target: Path, sections: set[str]) -> None:
    """A details page with only the rows of `sections` (what ncu --section NAME exports)."""
    with open(source, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    column = table[0].index("Section Name")
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
            [table[0]] + [row for row in table[1:] if row[column] in sections])


def partial_exports(root: Path) -> dict[str, Path]:
    """The partial-data variants, one folder each (the folder name is the model), derived from real
    exports under tests/data; {what is missing: folder}."""
    out = {}
    for name, source in (("metrics-list-gpt2", DATA / "ncu-gpt2-h100" / "gpt2.raw.csv"),
                         ("metrics-list-cupy", DATA / "ncu-custom-cupy-h100" / "custom_cupy.raw.csv")):
        out[name] = root / name
        _copy_columns(source, root / name / "metrics.raw.csv", lambda c: c in RAW_IDENTITY or c in METRICS_LIST)
    out["one-section-gpt2"] = root / "one-section-gpt2"
    _copy_sections(DATA / "ncu-gpt2-h100" / "gpt2.details.csv", root / "one-section-gpt2" / "occupancy.details.csv",
                   {"Occupancy"})
    # llama's embedding gather (5.5 us, SOL < 60 %) is judged on its waves per SM (0.97: the grid fills the GPU)
    out["no-launchstats-llama"] = root / "no-launchstats-llama"
    _copy_columns(DATA / "ncu-llama-h100-variants" / "llama.raw.csv", root / "no-launchstats-llama" / "llama.raw.csv",
                  lambda c: not c.startswith("launch__"))
    return out


def data_sources() -> list[Path]:
    """Every folder of real exports under tests/data (bad/ holds refusals, kernel-names/ no export)."""
    return [p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name not in ("bad", "kernel-names")]


def shared_sources(root: Path) -> list[Path]:
    """../shared's corpus tarballs extracted under root, and its public samples."""
    out = []
    for tarball in sorted((SHARED / "corpus").glob("*/*.tar.xz")):
        target = root / tarball.parent.name / tarball.name.removesuffix(".tar.xz")
        target.mkdir(parents=True)
        with tarfile.open(tarball) as archive:
            archive.extractall(target, filter="data")
        out.append(target)
    samples = root / "public-samples"
    shutil.copytree(SHARED / "public-samples", samples)
    return out + [samples]


def build(root: Path, sources: list[Path]) -> Warehouse:
    warehouse = Warehouse(root / "wh")
    report = ingest_job.ingest(sources, warehouse)
    assert report.runs, report.failed
    return warehouse


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> tuple[Warehouse, dict[str, Path]]:
    """One warehouse holding every export under tests/data and the partial-data variants."""
    root = tmp_path_factory.mktemp("mixed")
    partial = partial_exports(root / "partial")
    return build(root, data_sources() + list(partial.values())), partial


def invoke(warehouse: Warehouse, *args: str):
    result = CliRunner().invoke(main, ["--warehouse", str(warehouse.root), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"kwh {' '.join(args)} crashed: {result.exception!r}\n{result.output}")
    assert result.exit_code == 0, result.output
    return result


def answers_everything(warehouse: Warehouse, tmp_path: Path, report_models: list[str]) -> dict[str, str]:
    """Every view, summary, kernels, the report (whole, and for each of report_models) and rollup, each
    run once; their outputs by command."""
    con = warehouse.connect()
    try:
        # each view computed once, in creation order, over the rows of those before it (views.compute_once, as
        # the report does for what it reads several times): queried cold, a view inlines every view below it.
        # One that fails stays a view, and its query here raises its error.
        views_lib.compute_once(con, tuple(views_lib.all_views()))
        for name in views_lib.all_views():
            con.execute(f'SELECT * FROM "{name}"').fetchall()
    finally:
        con.close()
    out = {"summary": invoke(warehouse, "--wide", "summary", "--top", "200").output,
           "kernels": invoke(warehouse, "--wide", "kernels", "--limit", "500").output,
           "unclassified": invoke(warehouse, "kernels", "--unclassified").output,
           "report": invoke(warehouse, "report", "-o", str(tmp_path / "all.html")).output,
           "rollup": invoke(warehouse, "rollup", "--full").output}
    out["report.html"] = (tmp_path / "all.html").read_text(encoding="utf-8")
    for model in report_models:
        out[f"report {model}"] = invoke(warehouse, "report", "-o", str(tmp_path / f"{model}.html"), "--model", model).output
    return out


@pytest.fixture(scope="module")
def answers(mixed, tmp_path_factory) -> dict[str, str]:
    warehouse, _ = mixed
    # the report of one model alone too: a model whose every kernel lacks a duration once crashed it
    return answers_everything(warehouse, tmp_path_factory.mktemp("answers"), ["metrics-list-cupy"])


def test_every_answer_over_every_export(mixed, answers):
    assert answers["report"].startswith("wrote ") and answers["report metrics-list-cupy"].startswith("wrote ")
    assert answers["rollup"].startswith("rolled up ")
    # kwh summary leads with model_efficiency (issue 33 item 5): its first table, one line per model and run
    warehouse, _ = mixed
    first_table = answers["summary"].split("\n\n")[0].splitlines()
    assert first_table[0].startswith("Model efficiency") and first_table[1].split()[:4] == ["model", "run", "time_basis", "mfu_pct"]
    expected = rows(warehouse, "SELECT model, left(run_id, 8) FROM model_efficiency ORDER BY model, time_basis DESC, run_id")
    assert [tuple(line.split()[:2]) for line in first_table[3:-1]] == expected


def test_partial_data_says_not_enough_data(mixed, answers):
    """A verdict without its metrics names what is missing, in the view, in kwh summary's and kwh kernels'
    verdict column and in the report; never a class with blank numbers."""
    warehouse, partial = mixed
    verdicts = dict(rows(warehouse, "SELECT model, list(DISTINCT decided_by) FROM bottleneck_class "
                                    "WHERE list_contains(?, model) GROUP BY model", [list(partial)]))
    missing = {"metrics-list-gpt2": "no duration", "metrics-list-cupy": "no duration",
               "one-section-gpt2": "no duration", "no-launchstats-llama": "no waves per SM"}
    for model, what in missing.items():
        assert any(v.startswith(f"not enough data: {what}") for v in verdicts[model]), (model, verdicts[model])
    for model in ("metrics-list-gpt2", "metrics-list-cupy", "one-section-gpt2"):
        assert verdicts[model] and all(v.startswith("not enough data: ") for v in verdicts[model]), verdicts[model]
    # no verdict anywhere rests on a blank number ("memory  % < 60 with  waves per SM")
    assert rows(warehouse, "SELECT decided_by FROM bottleneck_class WHERE decided_by LIKE '%  %' "
                           "OR decided_by LIKE '% with  %' OR decided_by IS NULL") == []
    assert rows(warehouse, "SELECT count(*) FROM bottleneck_class WHERE bottleneck = 'not enough data' "
                           "AND (missing_data IS NULL OR fix NOT LIKE 'profile again%' OR limiting_unit IS NOT NULL)") == [(0,)]
    # kwh kernels and kwh summary give each kernel identity the verdict of its longest launch, here the
    # RTX 5090 GEMM that only the single-page public sample holds
    assert "not enough data: no waves per SM" in answers["kernels"]
    assert "not enough data: no waves per SM" in answers["summary"]


def test_the_report_says_what_each_partial_export_lacks(mixed, answers):
    """The report names, per model, the data its answers lack: a metrics list's launches without a
    duration, a trace without ncu counters, ncu without a timeline."""
    from test_report import ReportPage
    warehouse, _ = mixed
    lacks = {(r["model"], r["GPU"]): r["missing"] for r in ReportPage(answers["report.html"]).records("What the data lacks")}
    by_model = {}
    for (model, _), missing in lacks.items():
        by_model.setdefault(model, []).append(missing)
    for model in ("metrics-list-gpt2", "metrics-list-cupy", "one-section-gpt2"):
        assert any("launch(es) without a duration" in m for m in by_model[model]), by_model[model]
    # ncu profiled part of gpt2_train's kernels: the report gives the share of its real time it did not
    (unprofiled,) = rows(warehouse, "SELECT round(100 * sum(gpu_time_ns) FILTER (WHERE counter_match = 'not profiled') "
                                    "/ sum(gpu_time_ns), 1) FROM kernel_time WHERE model = 'gpt2_train'")[0]
    assert 0 < unprofiled < 100
    assert f"{unprofiled:g} % of its GPU time is in kernels ncu did not profile" in by_model["gpt2_train"]
    assert any(m.startswith("no ncu counters") for m in by_model["nsys-sqlite-a100"])   # an nsys report only
    # ncu only: every model whose runs on a GPU are all ncu runs (tests/data's llama has a trace too, from
    # gemm-trace-llama-h100, so which models these are comes from the warehouse)
    ncu_only = rows(warehouse, "SELECT model FROM runs GROUP BY model HAVING bool_and(tool = 'ncu')")
    assert ncu_only
    for (model,) in ncu_only:
        assert any(m.startswith("no timeline") for m in by_model[model]), (model, by_model[model])
    assert "compiled_mlp" not in by_model       # ncu and a trace, every kernel profiled: nothing to say


# One warehouse per kind of partial data (real exports of that kind alone): the report never crashes,
# says what is missing, and leaves out the sections that would need it.
ALONE = {
    "torch traces only": ([DATA / "torch-trace-gpt2", DATA / "torch-trace-gpt2_train"], "no ncu counters",
                          ["Idle time between kernels"], ["Roofline", "Warp stall"]),
    "nsys only": ([DATA / "nsys-sqlite-a100"], "no ncu counters", ["Idle time between kernels"], ["Roofline"]),
    "ncu replay runs only": ([DATA / "ncu-gpt2-h100", DATA / "ncu-llama-h100-variants"], "no timeline",
                             ["Bottleneck class per model", "Warp stall"], ["Idle time", "Top kernels ncu did not profile"]),
    "one run with no kernels": ([DATA / "text-nsys-l40s-nokernels"], "none holding a kernel", [], ["Roofline", "Model efficiency"]),
}


@pytest.mark.parametrize("case", sorted(ALONE))
def test_the_report_on_one_kind_of_data_alone(case, tmp_path):
    from test_report import ReportPage
    sources, lack, present, absent = ALONE[case]
    warehouse = Warehouse(tmp_path / "wh")
    assert ingest_job.ingest(sources, warehouse).failed == []
    output = invoke(warehouse, "report", "-o", str(tmp_path / "report.html")).output
    assert output.startswith("wrote ")
    page = ReportPage((tmp_path / "report.html").read_text(encoding="utf-8"))
    models = {m for m, in rows(warehouse, "SELECT DISTINCT model FROM runs")}
    lacks = page.records("What the data lacks")
    assert {r["model"] for r in lacks} == models and all(lack in r["missing"] for r in lacks), lacks
    for title in present:
        assert any(t.startswith(title) for t in page.sections), (title, list(page.sections))
    for title in absent:
        assert not any(t.startswith(title) for t in page.sections), (title, list(page.sections))


def test_fixes_only_for_the_stack_the_run_used(mixed):
    """No torch.compile, cudnn.benchmark or other PyTorch knob for a run whose stack is not PyTorch
    (the CUDA C vector add, the CuPy programs, the MPI saxpy), and the PyTorch runs still get theirs."""
    warehouse, _ = mixed
    stacks = dict(rows(warehouse, "SELECT model, min(framework) FROM run_framework GROUP BY model"))
    assert stacks["gpt2"] == stacks["compiled_mlp"] == stacks["text-nsys-vllm-truncated"] == "PyTorch"
    # the PyTorch profiler traced the CuPy workload: its trace is no evidence of PyTorch
    assert stacks["custom_cupy"] is None and stacks["ncu-cupy-h100-stdout"] == "CuPy"
    assert stacks["ncu-gtx1080-raw"] is None and stacks["nsys-sqlite-a100"] is None
    torch_knobs = "(torch|cudnn[.]benchmark)"
    leaks = rows(warehouse, "SELECT DISTINCT model, fix FROM bottleneck_class WHERE coalesce(framework, '') <> 'PyTorch' "
                            "AND regexp_matches(fix, ?)", [torch_knobs])
    assert leaks == []
    signals = rows(warehouse, "SELECT signal, model_list, framework, fix FROM design_signals")
    assert [s for s in signals if s[2] != "PyTorch" and re.search(torch_knobs, s[3])] == []
    signals = {models: fix for signal, models, _, fix in signals if signal.startswith("launch-bound")}
    assert "torch.compile" not in signals["nsys-sqlite-a100"] and "CUDA Graph" in signals["nsys-sqlite-a100"]
    assert "torch.compile" in signals["gpt2"]
    assert rows(warehouse, "SELECT DISTINCT fix LIKE '%torch.compile%' FROM bottleneck_class "
                           "WHERE model = 'gpt2' AND bottleneck = 'launch-overhead'") == [(True,)]
    assert rows(warehouse, "SELECT DISTINCT fix LIKE '%cupy.fuse%' FROM bottleneck_class "
                           "WHERE model = 'ncu-cupy-h100-stdout' AND bottleneck = 'launch-overhead'") in ([(True,)], [])


def test_rollups_cover_every_source_with_a_date(mixed, answers):
    """nsys runs get the day their export records; nsys, torch and ncu runs are all rolled up, each
    tool on its own rows (replay and timeline time are never added)."""
    warehouse, _ = mixed     # answers ran kwh rollup --full
    assert dict(rows(warehouse, "SELECT model, CAST(run_date AS VARCHAR) FROM runs WHERE tool = 'nsys' AND run_date IS NOT NULL")) == {
        "nsys-sqlite-a100": "2023-06-26", "nsys-sqlite-rtx3090": "2025-10-04", "nsys-sqlite-2026-ddl": "2025-10-04"}
    tools = {t for t, in rows(warehouse, "SELECT DISTINCT tool FROM rollup_kernels_daily")}
    assert tools == {"ncu", "nsys", "torch"}
    # the A100 MPI saxpy on its capture day, with its real (timeline) time
    assert rows(warehouse, "SELECT kernel_base, launches, total_ns FROM rollup_kernels_daily "
                           "WHERE day = DATE '2023-06-26'") == rows(
        warehouse, "SELECT min(kernel_base), count(*), CAST(sum(duration_ns) AS DOUBLE) FROM kernel_launches l "
                   "JOIN runs r USING (run_id) WHERE r.model = 'nsys-sqlite-a100' AND activity = 'kernel' GROUP BY kernel_id")
    # an nsys stats export (kernel summary only) is rolled up from its summary
    assert rows(warehouse, "SELECT count(*) > 0 FROM rollup_kernels_daily WHERE model = 'nsys-stats-rtx5090'") == [(True,)]
    # each tool's library shares add up to 100 on their own
    for (total,) in rows(warehouse, "SELECT sum(time_pct) FROM rollup_libraries_daily GROUP BY day, model, gpu, tool "
                                    "HAVING sum(total_ns) > 0"):
        assert total == pytest.approx(100.0)
    # every ncu identity's time is in exactly one of the nine classes, 'not enough data' included
    for (total,) in rows(warehouse, "SELECT coalesce(compute_bound_pct, 0) + coalesce(memory_bound_pct, 0) "
                                    "+ coalesce(cache_inefficient_pct, 0) + coalesce(latency_bound_pct, 0) "
                                    "+ coalesce(launch_overhead_pct, 0) + coalesce(mixed_pct, 0) "
                                    "+ coalesce(occupancy_limited_pct, 0) + coalesce(grid_too_small_pct, 0) "
                                    "+ coalesce(not_enough_data_pct, 0) FROM rollup_kernels_daily "
                                    "WHERE tool = 'ncu' AND total_ns > 0"):
        assert total == pytest.approx(100.0)


def test_diff_between_sources(mixed):
    """kwh diff of an ncu run against a trace of the same model compares with a note; an export without
    durations never reads 'unchanged'."""
    warehouse, _ = mixed
    result = invoke(warehouse, "diff", "model=gpt2,tool=ncu", "model=gpt2,tool=torch")
    assert "Note: the baseline is ncu replay time and the candidate timeline time" in result.output
    result = invoke(warehouse, "diff", "--all", "--csv", "model=metrics-list-cupy", "model=custom_cupy,tool=torch")
    changes = {line.split(",")[1]: line.split(",")[4] for line in result.output.splitlines()[1:] if line.count(",") > 5}
    assert changes["saxpy"] == "no duration on a side"
    invoke(warehouse, "diff", "model=nsys-stats-rtx5090", "model=nsys-sqlite-a100")
    invoke(warehouse, "diff", "model=ncu-gtx1080-raw", "model=text-nsys-a100-vectoradd")


@pytest.mark.slow
def test_every_answer_over_every_export_at_hand(tmp_path):
    """The same over ../shared as well: the corpus tarballs extracted, and the public samples."""
    if not (SHARED / "corpus").is_dir():
        pytest.skip("../shared/corpus not present")
    sources = data_sources() + list(partial_exports(tmp_path / "partial").values()) + shared_sources(tmp_path / "shared")
    warehouse = build(tmp_path, sources)
    answers_everything(warehouse, tmp_path, [m for m, in rows(warehouse, "SELECT DISTINCT model FROM runs ORDER BY 1")])
    invoke(warehouse, "diff", "model=gpt2,tool=ncu", "model=gpt2,tool=torch")
