"""ncu console text (`ncu ./app > out.txt`, `--page details`, `--print-units base`): the same launches,
metrics and rules as the details CSV of the same report (issue 21).

tests/data/text-ncu-gpt2-h100 holds the first 5 launches of one real report (corpus h100-2026-11b,
gpt2) as ncu printed it by default, as `--page details --print-units base` text, and as its details
CSV; tests/data/README.md says how they were trimmed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError
from kwarehouse.normalize import nvtx
from kwarehouse.normalize.units import to_base
from kwarehouse.store.warehouse import Warehouse

from conftest import DATA, rows

FOLDER = DATA / "text-ncu-gpt2-h100"
CONSOLE = FOLDER / "gpt2.ncu-console.txt"        # `ncu --import R` (what `ncu ./app` prints)
BASE_TEXT = FOLDER / "gpt2.details-text.txt"     # `ncu --import R --page details --print-units base`
DETAILS = FOLDER / "gpt2.details.csv"            # `ncu --import R --csv --page details`
NUMBER = re.compile(r"^-?[\d,]+(\.(\d+))?$")


def _number(text: str, unit: str) -> tuple[float, float] | None:
    """(value in base units, half a unit of the last printed digit in base units), or None for text."""
    match = NUMBER.match(text)
    if not match:
        return None
    factor = to_base(unit)[1]
    decimals = len(match[2] or "")
    return float(text.replace(",", "")) * factor, 0.5 * 10 ** -decimals * factor


@pytest.mark.parametrize("text", [CONSOLE, BASE_TEXT], ids=["default", "details-base-units"])
def test_console_text_equals_the_details_csv_value_for_value(text: Path):
    got, want = ingest.read(text), ingest.read(DETAILS)
    assert got.format == "ncu-text" and got.page == "text" and got.base_units == (text == BASE_TEXT)
    same = ["launch_id", "kernel_name", "process_id", "process_name", "host_name", "context_id", "stream_id",
            "device_id", "compute_capability", "block_dims", "grid_dims"]
    assert got.launches.select(same).equals(want.launches.select(same))
    assert got.launches.height == 5
    # the NVTX stack: the same ranges (the text does not print payloads or colours, the CSV does)
    ranges = lambda frame: [[(r.domain, r.text) for r in nvtx.split_ranges(cell)] for cell in frame["nvtx_push_pop"]]
    assert ranges(got.launches) == ranges(want.launches) and ranges(got.launches)[0][0][1] == "gpt2.iteration"

    pairs = got.metrics.join(want.metrics, on=["launch_id", "section", "metric"], how="full", suffix="_csv")
    assert pairs.filter(pl.col("launch_id").is_null() | pl.col("launch_id_csv").is_null()).height == 0
    assert pairs.height == want.metrics.height == got.metrics.height
    compared = worst = 0
    for row in pairs.iter_rows(named=True):
        mine, theirs = _number(row["value_text"], row["unit"]), _number(row["value_text_csv"], row["unit_csv"])
        if mine is None or theirs is None:       # "no data", "PolicySpread", ...: the same text
            assert row["value_text"] == row["value_text_csv"] and mine is theirs is None, row
            continue
        # equal within what each printed: half a unit in the last digit of either
        assert abs(mine[0] - theirs[0]) <= mine[1] + theirs[1], row
        compared += 1
        worst = max(worst, abs(mine[0] - theirs[0]) / max(abs(theirs[0]), 1e-300))
    assert compared == 330
    if text == CONSOLE:   # the default text prints the details page's own units and digits
        assert worst == 0 and got.metrics.equals(want.metrics)

    # rules: type, speedup and the whole description, under the section identifier and with the rule's
    # name (which the text does not print: ncu_rules.csv)
    assert got.rules.height == want.rules.height == 43
    assert got.rules.equals(want.rules.with_columns(pl.col("speedup_type").replace("", None),
                                                    pl.col("speedup_text").replace("", None)))


def test_text_and_csv_pages_of_one_report_are_one_run(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([FOLDER], warehouse)
    assert report.ok and report.skipped == []
    assert [(r.kernels, len(r.files)) for r in report.runs] == [(5, 3)]
    details_only = Warehouse(tmp_path / "details")
    ingest_job.ingest([DETAILS], details_only)
    for table in ("metrics", "rules"):
        assert rows(warehouse, f"SELECT count(*) FROM {table}") == rows(details_only, f"SELECT count(*) FROM {table}")
    # where the pages overlap the CSV wins (console values are ranked below it)
    query = "SELECT launch_id, metric, value, value_text, source_page FROM metrics ORDER BY ALL"
    assert rows(warehouse, query) == rows(details_only, query)


def test_console_text_alone_makes_the_run_and_a_later_csv_joins_it(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    first = ingest_job.ingest([CONSOLE], warehouse)
    assert [(r.kernels, r.model, r.gpu) for r in first.runs] == [(5, "gpt2", "NVIDIA H100 80GB HBM3")]   # GPU from the manifest
    assert rows(warehouse, "SELECT count(*) FROM rules") == [(43,)]
    later = ingest_job.ingest([DETAILS], warehouse)
    assert [r.new for r in later.runs] == [False]
    assert rows(warehouse, "SELECT count(*), count(DISTINCT run_id) FROM kernels") == [(5, 1)]
    assert rows(warehouse, "SELECT count(*) FROM rules") == [(43,)]


def test_text_without_its_process_line_joins_the_csv_run_loosely(tmp_path):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    shutil.copy(DETAILS, folder)
    lines = CONSOLE.read_text().splitlines(keepends=True)
    assert lines[0].startswith("[464] python3.12@")
    (folder / "out.txt").write_text("".join(lines[1:]))
    text = ingest.read(folder / "out.txt")
    assert text.launches["process_id"].null_count() == 5
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert [(r.kernels, len(r.files)) for r in report.runs] == [(5, 2)]


def test_program_output_and_prof_lines_around_the_report_are_passed_over(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("==PROF== Connected to process 464 (/usr/bin/python3.12)\nstep 0 loss 10.9\n"
                    + CONSOLE.read_text() + "==PROF== Disconnected from process 464\n")
    got, want = ingest.read(path), ingest.read(CONSOLE)
    assert ingest.sniff(path).name == "ncu-text"
    assert got.launches.equals(want.launches) and got.metrics.equals(want.metrics) and got.rules.equals(want.rules)


def _cut_at(tmp_path, marker: str, occurrence: int = -1) -> Path:
    data = CONSOLE.read_text()
    starts = [m.start() for m in re.finditer(re.escape(marker), data)]
    path = tmp_path / "cut.txt"
    path.write_text(data[:starts[occurrence]])
    return path


def _refused(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        ingest.read(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_a_console_capture_cut_short_is_refused_with_one_line(tmp_path):
    # inside a table, at a line end
    message = _refused(_cut_at(tmp_path, "    L2 Hit Rate  "))
    assert 'ends in the middle of the "Memory Workload Analysis" table' in message
    # between two sections of the last launch
    message = _refused(_cut_at(tmp_path, "    Section: Occupancy"))
    assert "the last launch has 57 of the 70 metric rows" in message
    # in the middle of a line
    path = tmp_path / "cut.txt"
    path.write_bytes(CONSOLE.read_bytes()[:-7])
    assert "ends in the middle of a line" in _refused(path)
    # a cut folder is one failed file; the rest of the ingest goes in
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(path, folder / "console.txt")
    shutil.copy(DATA / "ncu-gpt2-h100/gpt2.raw.csv", folder)
    report = ingest_job.ingest([folder], Warehouse(tmp_path / "wh"))
    assert len(report.failed) == 1 and "console.txt:" in report.failed[0]
    assert [r.kernels for r in report.runs] == [3]
