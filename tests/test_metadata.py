"""GPU and run metadata (issue 21, item 4): --gpu, a partition per what is known of an unnamed GPU,
sm_count / compute_capability from the exports, ncu's clock control from the ncu.log beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from conftest import rows
from kwarehouse import runmeta
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.cli import main
from kwarehouse.store.warehouse import Warehouse

DATA = Path(__file__).parent / "data"


def run_row(warehouse: Warehouse, model: str) -> tuple:
    return rows(warehouse, "SELECT gpu, compute_capability, sm_count, clock_control, cache_control, replay_mode "
                           "FROM runs WHERE model = ?", [model])[0]


def test_ncu_log_beside_the_export_gives_clock_control_and_the_raw_page_the_sm_count(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([DATA / "meta-ncu-log-gpt2-h100"], warehouse)
    assert report.ok and report.skipped == []          # ncu.log is run metadata, not a skipped file
    # corpus gpt2 was profiled with --clock-control none: ncu warned so in its log
    assert run_row(warehouse, "meta-ncu-log-gpt2-h100") == ("NVIDIA H100 80GB HBM3", "9.0", 132, "none", None, None)


def test_ncu_settings_from_a_logged_command_line():
    assert runmeta.ncu_settings("$ ncu --clock-control base --cache-control none --replay-mode=application "
                                "-o r python app.py") == {"clock_control": "base", "cache_control": "none",
                                                          "replay_mode": "application"}
    assert runmeta.ncu_settings("==PROF== Connected to process 743") == {}


def test_exports_without_a_device_name_are_partitioned_by_what_is_known(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "ncu-rtx5090-details", DATA / "ncu-h100-details-norules", DATA / "nsys-stats-rtx5090"],
                    warehouse)
    # two different GPUs no longer share one "unknown"; a summary that says nothing stays "unknown"
    assert run_row(warehouse, "ncu-rtx5090-details")[:3] == ("unknown (CC 12.0)", "12.0", None)
    assert run_row(warehouse, "ncu-h100-details-norules")[:3] == ("unknown (CC 9.0)", "9.0", None)
    assert run_row(warehouse, "nsys-stats-rtx5090")[:3] == ("unknown", None, None)


def test_nsys_runs_get_sm_count_and_compute_capability_from_the_gpu_tables(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    ingest_job.ingest([DATA / "nsys-sqlite-a100", DATA / "nsys-sqlite-rtx3090"], warehouse)
    assert run_row(warehouse, "nsys-sqlite-a100")[:3] == ("NVIDIA A100-SXM4-40GB", "8.0", 108)
    assert run_row(warehouse, "nsys-sqlite-rtx3090")[:3] == ("NVIDIA GeForce RTX 3090", "8.6", 82)


def test_gpu_option_names_the_gpu_of_an_export_that_has_none(tmp_path):
    for folder in ("ncu-rtx5090-details", "ncu-gtx1080-raw"):
        shutil.copytree(DATA / folder, tmp_path / "runs" / folder)
    result = CliRunner().invoke(main, ["--warehouse", str(tmp_path / "wh"), "ingest", str(tmp_path / "runs"),
                                       "--gpu", "NVIDIA GeForce RTX 5090"])
    assert result.exit_code == 0, result.output
    warehouse = Warehouse(tmp_path / "wh")
    assert run_row(warehouse, "ncu-rtx5090-details")[:2] == ("NVIDIA GeForce RTX 5090", "12.0")
    # the GTX 1080's raw page names its device: the export wins over --gpu
    assert run_row(warehouse, "ncu-gtx1080-raw")[:3] == ("NVIDIA GeForce GTX 1080", "6.1", 20)
