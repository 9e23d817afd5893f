"""kwh report: a self-contained HTML file, checked in a real headless browser with the network off."""

from __future__ import annotations

import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import DATA

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.answers import report
from kwarehouse.store.warehouse import Warehouse


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def report_warehouse(tmp_path_factory) -> tuple[Warehouse, Path]:
    """A warehouse with gpt2 on two days (the same report exported twice: default and mangled names),
    llama and the CuPy kernels, and its report."""
    base = tmp_path_factory.mktemp("report")
    folders = []
    for day, export in (("2026-11-23", "gpt2.raw.csv"), ("2026-11-24", "gpt2.raw.mangled.csv")):
        folder = base / f"gpt2-{day}"
        folder.mkdir()
        shutil.copy(DATA / "ncu-gpt2-h100" / export, folder)
        (folder / "manifest.ncu.json").write_text((DATA / "ncu-gpt2-h100/manifest.ncu.json").read_text()
                                                  .replace('"2026-11-23"', f'"{day}"'))
        folders.append(folder)
    warehouse = Warehouse(base / "wh")
    report_ = ingest_job.ingest(folders + [DATA / "ncu-llama-h100-variants", DATA / "ncu-custom-cupy-h100",
                                         DATA / "torch-trace-gpt2"], warehouse)
    assert report_.failed == []
    path = base / "report.html"
    path.write_text(report.build(warehouse), encoding="utf-8")
    return warehouse, path


@pytest.fixture(scope="module")
def report_file(report_warehouse) -> Path:
    return report_warehouse[1]


def test_the_report_is_self_contained_and_has_every_section(report_file):
    text = report_file.read_text()
    # nothing fetched: no src/href to a network, no scripts, no external fonts or styles
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text) and "<script" not in text and "@import" not in text
    for title in ("Roofline: NVIDIA H100 80GB HBM3", "Kernel popularity across models", "Library share of GPU time",
                  "Op class share of GPU time", "Bottleneck share of GPU time per model",
                  "Warp stall breakdown per op class", "Bottleneck class",
                  "Design signals", "Trend of the top kernels", "Latest changes: gpt2 2026-11-23 → 2026-11-24"):
        assert f"<h2>{title}" in text, title
    assert text.count("How to read this:") == text.count("<h2>")
    assert text.count("<svg") == 7   # roofline, popularity, library, op-class and bottleneck shares, stalls, trend


def test_filters_narrow_the_report(report_warehouse):
    warehouse, _ = report_warehouse     # the CuPy kernels beside gpt2's and llama's (the gather kernel)
    text = report.build(warehouse, report.Filters(model="custom_cupy"))
    assert "saxpy" in text and "vectorized_gather_kernel" not in text.split("Warp stall")[0]
    empty = report.build(warehouse, report.Filters(model="no-such-model"))
    assert "No kernels match." in empty


def test_the_report_renders_in_headless_chromium_offline(report_file, tmp_path):
    browser_path = chromium()
    if browser_path is None:
        pytest.skip("no Chromium (scripts/test.sh installs Debian's chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            context = browser.new_context(offline=True, viewport={"width": 1200, "height": 900})
            page = context.new_page()
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(report_file.as_uri())
            charts = page.query_selector_all("svg")
            assert len(charts) == 7
            for chart in charts:
                box = chart.bounding_box()
                marks = chart.evaluate("e => e.querySelectorAll('circle, rect, polyline, line').length")
                assert box["width"] > 100 and box["height"] > 100 and marks > 3
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert (tmp_path / "report.png").stat().st_size > 50_000


def test_filters_keep_the_stall_section_and_labels_and_colours_are_distinct(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-gpt2-h100", DATA / "ncu-llama-h100-variants"], warehouse)
    html = report.build(warehouse, report.Filters("llama", None, None))
    assert "Warp stall breakdown per op class" in html
    assert len(set(report.STALL_PALETTE)) == len(report.STALL_PALETTE) >= 19
    labels = report._unique_labels([("at::native::vectorized_elementwise_kernel", "aaaaaa11"),
                                    ("at::native::vectorized_elementwise_kernel", "bbbbbb22"),
                                    ("k", "cccccc33")])
    assert len(set(labels)) == 3 and labels[2] == "k" and labels[0].endswith("#aaaaaa")


# --- issue 33 item 6: each report item checked against the views it draws on ------------------------------

class ReportPage(HTMLParser):
    """The report's sections as data: per <h2> title, its tables (grouped under the <h3> before them:
    [heading, header row, rows]), its circles (attributes and tooltip) and its lines."""

    def __init__(self, text: str):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self._section: dict | None = None
        self._heading: str | None = None
        self._text: str | None = None
        self._cell: list[str] | None = None
        self._circle: dict | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h2", "h3", "title"):
            self._text = ""
        elif tag == "table":
            self._section["tables"].append([self._heading, []])
        elif tag == "tr":
            self._section["tables"][-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "circle":
            self._circle = attrs
            self._section["circles"].append(attrs)
        elif tag == "line" and self._section is not None:
            self._section["lines"].append(attrs)

    def handle_endtag(self, tag):
        if tag == "h2":
            self._section = self.sections[self._text] = {"tables": [], "circles": [], "lines": []}
            self._heading, self._text = None, None
        elif tag == "h3":
            self._heading, self._text = self._text, None
        elif tag == "title" and self._circle is not None:
            self._circle["title"], self._text = self._text, None
        elif tag == "title":
            self._text = None
        elif tag in ("td", "th"):
            self._section["tables"][-1][1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "circle":
            self._circle = None

    def handle_data(self, data):
        if self._text is not None:
            self._text += data
        if self._cell is not None:
            self._cell.append(data)

    def section(self, prefix: str) -> dict:
        (title,) = [t for t in self.sections if t.startswith(prefix)]
        return self.sections[title]

    def records(self, prefix: str) -> list[dict]:
        """Every row of a section's tables as {column: text}, with the table's <h3> heading as 'heading'."""
        out = []
        for heading, (header, *rows) in self.section(prefix)["tables"]:
            out.extend({"heading": heading, **dict(zip(header, row))} for row in rows)
        return out


def number(cell: str) -> float | None:
    """A table cell back as a number (the report prints thousands separators: 16,337.9)."""
    return float(cell.replace(",", "")) if cell.strip() else None


H100 = "NVIDIA H100 80GB HBM3"


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


@pytest.fixture(scope="module", params=["test exports", pytest.param("corpus", marks=pytest.mark.skipif(
    not CORPUS.is_dir(), reason="../shared/corpus not present"))])
def issue33(request, tmp_path_factory) -> tuple[Warehouse, ReportPage, str]:
    """'test exports': gpt2 profiled with the tensor roofline section (padded cuDNN attention, the QKV
    GEMM) beside its PyTorch trace and gpt2_train's (kernels ncu never profiled, GEMMs two models share,
    launch-bound runs), CuPy's ncu run and trace, and llama with ncu replay time only. 'corpus': both
    corpora of ../shared (B with tensor counters: padded convolutions and attention). And its report."""
    if request.param == "corpus":
        # the session's one ingest of both corpora (conftest.whole_corpus), which this module only reads
        _, warehouse, result = request.getfixturevalue("whole_corpus")
        assert result.failed == []
        return warehouse, ReportPage(request.getfixturevalue("whole_corpus_report")), request.param
    sources = [DATA / "tensor-ncu-gpt2-h100", DATA / "torch-trace-gpt2", DATA / "torch-trace-gpt2_train",
               DATA / "ncu-custom-cupy-h100", DATA / "torch-trace-custom_cupy", DATA / "ncu-llama-h100-variants"]
    warehouse = Warehouse(tmp_path_factory.mktemp("issue33") / "wh")
    result = ingest_job.ingest(sources, warehouse)
    assert result.failed == []
    return warehouse, ReportPage(report.build(warehouse)), request.param


def query(warehouse: Warehouse, sql: str, params=None) -> list[tuple]:
    con = warehouse.connect()
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_roofline_dots_are_sized_by_real_gpu_time(issue33):
    warehouse, page, source = issue33
    dots = [c for c in page.section(f"Roofline: {H100}")["circles"] if c.get("class") == "executed"]
    real = dict(query(warehouse, "SELECT kernel_id, sum(gpu_time_ns) FROM kernel_time WHERE gpu = ? GROUP BY 1", [H100]))
    replay = dict(query(warehouse, "SELECT kernel_id, sum(duration_ns) FROM kernels WHERE gpu = ? GROUP BY 1", [H100]))
    assert len(dots) >= 5
    for dot in dots:
        assert float(dot["data-size-ns"]) == pytest.approx(real[dot["data-kernel-id"]], abs=1), dot["title"]
        assert f"; {real[dot['data-kernel-id']] / 1e3:,.1f} us " in dot["title"]
    # the radius grows with the square root of real time, the biggest 15 px: not with ncu's replay time
    biggest = max(real[d["data-kernel-id"]] for d in dots)
    for dot in dots:
        assert float(dot["r"]) == pytest.approx(3 + 12 * (real[dot["data-kernel-id"]] / biggest) ** 0.5, abs=0.06)
    # a check that can fail: real time and replay time rank these kernels differently
    by_real = sorted(dots, key=lambda d: real[d["data-kernel-id"]])
    assert by_real != sorted(dots, key=lambda d: replay[d["data-kernel-id"]])


def test_padded_kernels_show_a_useful_point_joined_to_the_executed_one(issue33):
    warehouse, page, source = issue33
    chart = page.section(f"Roofline: {H100}")
    padding = dict(query(warehouse, "SELECT kernel_id, padding_factor FROM roofline WHERE level = 'kernel' AND gpu = ? "
                                    "AND limiter IS NOT NULL", [H100]))
    executed = {c["data-kernel-id"]: c for c in chart["circles"] if c.get("class") == "executed"}
    useful = {c["data-kernel-id"]: c for c in chart["circles"] if c.get("class") == "useful"}
    padded = {k for k, factor in padding.items() if factor and round(factor, 2) > 1.0 and k in executed}
    # the cuDNN SDPA (causal: half its tiles masked, 1.5) and GPT-2's QKV GEMM (2304 = 18 x 128 tiles, 1.03)
    assert len(padded) >= 2 and set(useful) == padded
    for kernel_id in padded:
        top, bottom = executed[kernel_id], useful[kernel_id]
        assert top["cx"] == bottom["cx"] and float(bottom["cy"]) > float(top["cy"])   # below: fewer FLOP/s
        assert {"x1": top["cx"], "x2": top["cx"], "y1": top["cy"], "y2": bottom["cy"]}.items() <= next(
            line for line in chart["lines"] if line.get("y2") == bottom["cy"] and line.get("x1") == top["cx"]).items()
        assert f"padding factor {padding[kernel_id]:.2f}" in bottom["title"]
        executed_rate = re.search(r"executed ([\d.]+)TFLOP/s", bottom["title"]).group(1)
        useful_rate = re.search(r"useful ([\d.]+)TFLOP/s", bottom["title"]).group(1)
        assert float(executed_rate) / float(useful_rate) == pytest.approx(padding[kernel_id], rel=0.02)


def test_top_kernels_ncu_did_not_profile_are_listed_by_real_time(issue33):
    warehouse, page, source = issue33
    listed = page.records(f"Top kernels ncu did not profile: {H100}")
    expected = query(warehouse, "SELECT min(kernel_base), round(sum(gpu_time_ns) / 1e3, 1) FROM kernel_time "
                                "WHERE gpu = ? AND counter_match = 'not profiled' AND gpu_time_ns > 0 "
                                "GROUP BY kernel_id ORDER BY 2 DESC, kernel_id LIMIT 10", [H100])
    assert [(r["kernel"], number(r["GPU time (us)"])) for r in listed] == expected
    # gpt2_train's biggest kernel ncu never profiled (its fused AdamW in the corpus, 11.5 % of its time) is named
    top = query(warehouse, "SELECT kernel_base FROM kernel_time WHERE model = 'gpt2_train' "
                           "AND counter_match = 'not profiled' ORDER BY gpu_time_ns DESC LIMIT 1")[0][0]
    assert top in [r["kernel"] for r in listed]


def test_bottleneck_tables_are_per_model_with_shares_of_that_models_time(issue33):
    warehouse, page, source = issue33
    rows = page.records("Bottleneck class per model")
    headings = [h for h, _ in page.section("Bottleneck class per model")["tables"]]
    assert len(headings) == len(set(headings)) >= 4
    model_time = dict(query(warehouse, "SELECT model || ' on ' || gpu, sum(gpu_time_ns) FROM kernel_time GROUP BY 1"))
    for heading in headings:
        mine = [r for r in rows if r["heading"] == heading]
        assert 1 <= len(mine) <= 10
        times = [number(r["GPU time (us)"]) for r in mine]
        assert times == sorted(times, reverse=True)
        for r in mine:   # the share is of this model's GPU time, not the fleet's
            assert number(r["% of model GPU time"]) == pytest.approx(
                100 * number(r["GPU time (us)"]) * 1e3 / model_time[heading], abs=_rounding(model_time[heading]))
    # llama rests on ncu replay time; gpt2_train has no ncu run: its kernels are 'not profiled'
    if source == "test exports":
        assert {r["time basis"] for r in rows if r["heading"].startswith("llama ")} == {"ncu replay"}
    assert {r["bottleneck"] for r in rows if r["heading"].startswith("gpt2_train ")} >= {"not profiled"}


def test_signals_are_in_per_model_shares_and_idle_time_is_apart(issue33):
    warehouse, page, source = issue33
    kernel_rows = page.records("Design signals: what to fix first (kernel time)")
    model_time = dict(query(warehouse, "SELECT model, sum(gpu_time_ns) FROM kernel_time GROUP BY 1"))
    assert kernel_rows and not any(r["signal"].startswith("launch-bound") for r in kernel_rows)
    for r in kernel_rows:
        assert number(r["% of model GPU time"]) == pytest.approx(
            100 * number(r["GPU time (us)"]) * 1e3 / model_time[r["heading"]], abs=_rounding(model_time[r["heading"]]))
        if r["est. saved (us)"]:
            assert number(r["est. saved, % of model GPU time"]) == pytest.approx(
                100 * number(r["est. saved (us)"]) * 1e3 / model_time[r["heading"]], abs=_rounding(model_time[r["heading"]]))
    # a signal two models share is split between them by their time in its kernel (so the parts add up)
    shared = [r for r in kernel_rows if "," in r["models sharing it"]]
    assert shared
    # each view queried once, not once per row (design_signals takes seconds to plan on the corpus)
    calibrated = {}
    for signal, subject, model_list, *found in query(
            warehouse, "SELECT signal, subject, model_list, kernel_id, time_basis, gpu_time_ns FROM design_signals "
                       "WHERE source = 'calibrated'"):
        calibrated.setdefault((signal, subject, model_list), []).append(tuple(found))
    model_time_in = {}
    for kernel_id, time_basis, model, ns in query(warehouse, "SELECT kernel_id, time_basis, model, sum(gpu_time_ns) "
                                                             "FROM kernel_time GROUP BY ALL"):
        model_time_in.setdefault((kernel_id, time_basis), {})[model] = ns
    for r in shared:
        ((kernel_id, time_basis, total),) = calibrated[(r["signal"], r["subject"], r["models sharing it"])]
        in_kernel = model_time_in[(kernel_id, time_basis)]
        models = r["models sharing it"].split(",")
        part = total * in_kernel[r["heading"]] / sum(in_kernel.get(m, 0) for m in models)
        assert number(r["GPU time (us)"]) == pytest.approx(part / 1e3, abs=0.051)
    # per model, the kernel-time savings shown stay within its GPU time
    for model, parts in _groups(kernel_rows, ("heading",)).items():
        assert sum(number(p["est. saved (us)"]) or 0 for p in parts) * 1e3 <= model_time[model[0]]
    # idle time: its own table, on its own basis, the what_to_fix_first rows that are not kernel time
    idle = page.records("Idle time between kernels")
    expected = query(warehouse, "SELECT model_list, basis, round(est_time_saved_ns / 1e3, 1) FROM what_to_fix_first "
                                "WHERE basis <> 'kernel time' ORDER BY rank")
    assert expected and [(r["model"], r["basis"], number(r["est. idle saved per run (us)"])) for r in idle] == expected
    assert all(r["CPU launch interval (us)"] for r in idle)


def _rounding(model_ns: float) -> float:
    """How far a share recomputed from a time printed to 0.1 us (and itself printed to 0.01) may be off."""
    return 100 * 50 / model_ns + 0.006


def _groups(rows: list[dict], keys: tuple[str, ...]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def test_the_package_ships_every_sql_file_of_the_answers():
    """pyproject's package-data names the folders by glob: a new folder of queries must be added there."""
    import tomllib
    from kwarehouse.answers import queries
    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kwarehouse"]
    package = Path(queries.__file__).parents[1]
    files = [path.relative_to(package) for path in (package / "answers").rglob("*.sql")]
    assert files and not [f for f in files if not any(f.match(g) and len(f.parts) == len(Path(g).parts)
                                                      for g in globs)]

def test_every_answers_query_is_a_described_sql_file_that_is_loaded():
    from kwarehouse.answers import agent_answers, diff, export, queries, summary
    sources = {module: Path(module.__file__).read_text()
               for module in (report, summary, diff, export, agent_answers)}
    folder = Path(queries.__file__).with_name("sql")
    shared = {path.stem: path.read_text() for path in sorted((folder / "shared").glob("*.sql"))}
    texts = {name: (folder / f"{name}.sql").read_text() for name in queries.names()}
    assert texts and shared
    for name, text in [*texts.items(), *shared.items()]:
        assert text.startswith("-- "), f"{name}.sql: its first line must say what it answers"
    for name, text in texts.items():
        assert any(f'{call}"{name}"' in source for source in sources.values()
                   for call in ("q(", "queries.load(", "_query(warehouse, ")), f"{name}.sql is not loaded"
        # every placeholder is a shared piece, but diff's selector: the one piece Python composes
        assert set(queries.PLACEHOLDER.findall(text)) <= set(shared) | {"selector"}, name
    # a shared piece serves several queries and is written once: no query holds a copy of its body
    for piece, text in shared.items():
        assert sum("{" + piece + "}" in t for t in texts.values()) >= 2, f"shared/{piece}.sql serves one query"
        body = text.split("\n", 1)[1].strip()
        assert not [name for name, t in texts.items() if body in t], f"a query repeats shared/{piece}.sql"
    # no query text left in the modules: every SELECT lives in sql/ (an error's hint may quote one: \");
    # export composes its COPY around the user's source, columns and --where, which vary
    for module in (report, summary, diff):
        source = sources[module]
        assert not re.search(r'(?<!\\)"\s*(SELECT|WITH)\b', source)
