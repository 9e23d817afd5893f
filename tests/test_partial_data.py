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
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kwarehouse import pipeline, views as views_lib
from kwarehouse.cli import main
from kwarehouse.store import Warehouse

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
    out["no-launchstats-cupy"] = root / "no-launchstats-cupy"
    _copy_columns(DATA / "ncu-custom-cupy-h100" / "custom_cupy.raw.csv",
                  root / "no-launchstats-cupy" / "custom_cupy.raw.csv", lambda c: not c.startswith("launch__"))
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
    report = pipeline.ingest(sources, warehouse)
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


def answers_everything(warehouse: Warehouse, tmp_path: Path) -> None:
    """Every view, summary, kernels, report, rollup and a diff between runs of different sources."""
    con = warehouse.connect()
    try:
        for name in views_lib.all_views():
            con.execute(f'SELECT * FROM "{name}"').fetchall()
    finally:
        con.close()
    invoke(warehouse, "summary")
    invoke(warehouse, "kernels", "--limit", "200")
    invoke(warehouse, "kernels", "--unclassified")
    for model in [m for m, in rows(warehouse, "SELECT DISTINCT model FROM runs ORDER BY 1")]:
        invoke(warehouse, "report", "-o", str(tmp_path / f"{model}.html"), "--model", model)
    invoke(warehouse, "report", "-o", str(tmp_path / "all.html"))
    invoke(warehouse, "rollup")
    invoke(warehouse, "rollup", "--full")


def test_every_answer_over_every_export(mixed, tmp_path):
    warehouse, _ = mixed
    answers_everything(warehouse, tmp_path)
