"""kwh export to CSV neutralises cells a spreadsheet would run as a formula (OWASP CSV injection):
text starting with =, +, -, @, a tab or a carriage return gets a leading single quote, while text
that is a number (-1.5, +7) and every numeric column stay as they are."""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner
from conftest import DATA

from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

# model names a hostile manifest or --model could carry, and what the CSV cell must read
MODELS = {
    '=HYPERLINK("http://example.invalid","x")': '\'=HYPERLINK("http://example.invalid","x")',
    "+SUM(1,2)": "'+SUM(1,2)",
    "-2+3": "'-2+3",
    "@SUM(A1)": "'@SUM(A1)",
    "=cmd|' /C calc'!A0": "'=cmd|' /C calc'!A0",
    "=1+1": "'=1+1",
    "-1.5": "-1.5",          # a number: a spreadsheet reads it as -1.5, nothing runs
    "+7": "+7",
    "plain": "plain",
}


RAW = DATA / "ncu-gtx1080-raw" / "ncu-raw_gtx1080-pascal_microgpusim-vecadd.csv"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Warehouse:
    """The real vecadd export (3 launches) with its kernel names swapped for hostile ones, 3 a copy."""
    folder = tmp_path_factory.mktemp("csv")
    with open(RAW, newline="", encoding="utf-8") as handle:
        table = list(csv.reader(handle))
    column, process = table[0].index("Kernel Name"), table[0].index("Process ID")
    names = list(MODELS)
    for number in range(0, len(names), 3):
        for row, name in zip(table[2:], names[number:number + 3]):
            row[column] = name
            row[process] = str(int(row[process]) + number)     # another process: another run
        copy = folder / f"vecadd-{number}.csv"
        with open(copy, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle, quoting=csv.QUOTE_ALL).writerows(table)
        warehouse = Warehouse(folder / "wh")
        assert len(ingest_job.ingest([copy], warehouse, model=f"vecadd{number}").runs) == 1
    return warehouse


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_formula_cells_are_neutralised_and_numbers_stay_numbers(hostile, tmp_path):
    out = tmp_path / "kernels.csv"
    done = CliRunner().invoke(main, ["-w", str(hostile.root), "export", "kernels", "-o", str(out)])
    assert done.exit_code == 0, done.output
    written = read_csv(out)
    assert sorted(row["kernel_name"] for row in written) == sorted(MODELS.values())
    # numeric columns are untouched: the kernel counts read back as plain integers
    kernels = tmp_path / "kernels.csv"
    assert CliRunner().invoke(main, ["-w", str(hostile.root), "export", "kernels", "-o", str(kernels),
                                     "--columns", "kernel_name,duration_ns"]).exit_code == 0
    for row in read_csv(kernels):
        assert float(row["duration_ns"]) > 0 and not row["duration_ns"].startswith("'")


def test_negative_numbers_of_float_columns_stay_numbers(hostile, tmp_path):
    out = tmp_path / "q.csv"
    done = CliRunner().invoke(main, ["-w", str(hostile.root), "export",
                                     "SELECT -1.5 AS delta_pct, -3 AS change, '=1' AS note, "
                                     "chr(9) || '=2' AS tab, chr(13) || '=3' AS cr, '-4.25' AS text_number",
                                     "-o", str(out)])
    assert done.exit_code == 0, done.output
    assert read_csv(out) == [{"delta_pct": "-1.5", "change": "-3", "note": "'=1", "tab": "'\t=2", "cr": "'\r=3",
                              "text_number": "-4.25"}]


def test_json_and_parquet_keep_the_text_exactly(hostile, tmp_path):
    import json
    out = tmp_path / "kernels.jsonl"
    assert CliRunner().invoke(main, ["-w", str(hostile.root), "export", "kernels", "-o", str(out)]).exit_code == 0
    assert sorted(json.loads(line)["kernel_name"] for line in out.read_text().splitlines()) == sorted(MODELS)


def test_the_export_help_says_so():
    done = CliRunner().invoke(main, ["export", "--help"])
    assert "single quote" in done.output and "-1.5" in done.output
