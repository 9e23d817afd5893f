"""kwh report: a self-contained HTML file, checked in a real headless browser with the network off."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from conftest import DATA

from kwarehouse import pipeline, report
from kwarehouse.store import Warehouse


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
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
    report_ = pipeline.ingest(folders + [DATA / "ncu-llama-h100-variants", DATA / "ncu-custom-cupy-h100",
                                         DATA / "torch-trace-gpt2"], warehouse)
    assert report_.failed == []
    path = base / "report.html"
    path.write_text(report.build(warehouse), encoding="utf-8")
    return path


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


def test_filters_narrow_the_report(ingested, tmp_path):
    text = report.build(ingested, report.Filters(model="custom_cupy"))
    assert "saxpy" in text and "vectorized_gather_kernel" not in text.split("Warp stall")[0]
    empty = report.build(ingested, report.Filters(model="no-such-model"))
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
    pipeline.ingest([DATA / "ncu-gpt2-h100", DATA / "ncu-llama-h100-variants"], warehouse)
    html = report.build(warehouse, report.Filters("llama", None, None))
    assert "Warp stall breakdown per op class" in html
    assert len(set(report.STALL_PALETTE)) == len(report.STALL_PALETTE) >= 19
    labels = report._unique_labels([("at::native::vectorized_elementwise_kernel", "aaaaaa11"),
                                    ("at::native::vectorized_elementwise_kernel", "bbbbbb22"),
                                    ("k", "cccccc33")])
    assert len(set(labels)) == 3 and labels[2] == "k" and labels[0].endswith("#aaaaaa")
