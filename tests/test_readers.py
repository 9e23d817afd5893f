"""Every reader on every real export variant in tests/data."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pytest

from kwarehouse import ingest, normalize
from kwarehouse.errors import InputError

from conftest import DATA

NCU_FORMAT = {
    "gpt2.raw.csv": "ncu-raw-csv", "gpt2.raw.mangled.csv": "ncu-raw-csv",
    "gpt2.details.csv": "ncu-details-csv", "gpt2.details.mangled.csv": "ncu-details-csv",
    "llama.raw.csv": "ncu-raw-csv", "llama.raw.baseunits.csv": "ncu-raw-csv",
    "llama.details.csv": "ncu-details-csv", "llama.details.metricnames.csv": "ncu-details-csv",
    "stdout.details.csv": "ncu-details-csv", "raw.csv": "ncu-raw-csv", "details.csv": "ncu-details-csv",
    "ncu-raw_gtx1080-pascal_microgpusim-vecadd.csv": "ncu-raw-csv",
    "ncu-details-with-rules_rtx5090-cc12.0_llm-perf-opt-kernel0001.csv": "ncu-details-csv",
    "details.norules.csv": "ncu-details-csv", "custom_cupy.raw.csv": "ncu-raw-csv",
    "compiled_mlp.raw.csv": "ncu-raw-csv", "compiled_mlp.ncu-rep": "ncu-rep",
    "gpt2.ncu-console.txt": "ncu-text", "gpt2.details-text.txt": "ncu-text",
}
# ncu folders kept out of the shared test warehouse (their own tests ingest them)
NCU_FOLDERS = ("ncu-", "text-ncu-")
# Folders of other tools hold one format each.
FOLDER_FORMAT = {"nsys-sqlite-": "nsys-sqlite", "nsys-stats-": "nsys-stats-csv", "torch-trace-": "torch-trace",
                 "text-nsys-": "nsys-text", "csv-nsys-": "nsys-stats-csv"}
# GPU telemetry folders (tests/test_telemetry.py) hold several logs each: the format by file name.
TELEMETRY_FOLDERS = ("telemetry-",)
TELEMETRY_FORMAT = {"nvidia-smi-query": "nvidia-smi-query", "nvidia-smi-dmon": "nvidia-smi-dmon",
                    "nvidia-smi-pmon": "nvidia-smi-pmon", "dcgmi-dmon": "dcgmi-dmon", "nvml-samples": "nvml-samples",
                    "trace": "torch-trace"}
SIDECARS = ("manifest", "ncu_version", "gpu.txt")
GOOD = sorted(p for p in DATA.glob("*/*") if p.parent.name.startswith((*NCU_FOLDERS, *FOLDER_FORMAT, *TELEMETRY_FOLDERS))
              and not p.name.startswith(SIDECARS))


def expected_format(path: Path) -> str:
    if path.parent.name.startswith(TELEMETRY_FOLDERS):
        return next(name for prefix, name in TELEMETRY_FORMAT.items() if path.name.startswith(prefix))
    for prefix, name in FOLDER_FORMAT.items():
        if path.parent.name.startswith(prefix):
            return name
    return NCU_FORMAT[path.name]


def test_every_good_export_is_covered():
    ncu = {p.name for p in GOOD if p.parent.name.startswith(NCU_FOLDERS)}
    assert sorted(ncu) == sorted(NCU_FORMAT)
    assert {expected_format(p) for p in GOOD} == set(ingest.READERS)


@pytest.mark.parametrize("path", GOOD, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_conformance_each_reader_claims_only_its_own_files(path: Path):
    head = path.read_bytes()[: ingest.SNIFF_BYTES]
    claimed = [name for name, reader in ingest.READERS.items() if reader.sniff(path, head)]
    assert claimed == [expected_format(path)]


@pytest.mark.parametrize("path", sorted((DATA / "bad").iterdir()), ids=lambda p: p.name)
def test_no_reader_claims_a_wrong_tool_or_garbage_file(path: Path):
    if path.name in ("garbage.bin", "empty.csv"):
        head = path.read_bytes()[: ingest.SNIFF_BYTES]
        assert not any(r.sniff(path, head) for r in ingest.READERS.values())


def _cells(path: Path) -> list[list[str]]:
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def test_raw_page_reads_every_launch_and_metric():
    path = DATA / "ncu-gpt2-h100/gpt2.raw.csv"
    result = ingest.read(path)
    rows = _cells(path)
    metric_columns = rows[0][rows[0].index("CC") + 1:]   # everything after the launch columns
    assert result.page == "raw"
    assert result.launches["launch_id"].to_list() == [0, 1, 2]
    assert result.metrics.height == 3 * len(metric_columns)
    assert result.gpu_name == "NVIDIA H100 80GB HBM3"
    assert result.launches["kernel_name"][0] == (
        "void at::vectorized_gather_kernel<16, long>(char *, char *, T2 *, int, long, long, long, long, bool)")
    assert result.launches["grid_dims"][0] == "(1024, 1, 1)"
    assert result.launches["nvtx_push_pop"][0].startswith('743  "<default domain>:gpt2.iteration')
    assert not result.names_mangled


def test_mangled_pages_are_flagged():
    assert ingest.read(DATA / "ncu-gpt2-h100/gpt2.raw.mangled.csv").names_mangled
    details = ingest.read(DATA / "ncu-gpt2-h100/gpt2.details.mangled.csv")
    assert details.names_mangled
    assert details.launches["kernel_name"][0] == "_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb"


def test_details_page_keeps_metrics_and_rules():
    path = DATA / "ncu-gpt2-h100/gpt2.details.csv"
    result = ingest.read(path)
    rows = _cells(path)[1:]
    assert result.metrics.height == sum(1 for r in rows if r[14])
    assert result.rules.height == sum(1 for r in rows if len(r) > 17 and r[17])
    rule = result.rules.filter(pl.col("launch_id") == 0).row(0, named=True)
    assert rule["section"] == "SpeedOfLight" and rule["rule_name"] == "SOLBottleneck"
    assert rule["rule_type"] == "OPT" and "too small to fill" in rule["description"]


def test_details_estimated_speedup_is_read():
    result = ingest.read(DATA / "ncu-rtx5090-details/ncu-details-with-rules_rtx5090-cc12.0_llm-perf-opt-kernel0001.csv")
    issue = result.rules.filter(pl.col("rule_name") == "IssueSlotUtilization").row(0, named=True)
    assert issue["speedup_type"] == "local" and issue["speedup_text"] == "80.34"
    # metric rows there have 16 fields for a 20-column header: all of them are read
    assert result.metrics.height == 44
    assert result.launches["compute_capability"][0] == "12.0"


def test_program_output_and_prof_lines_before_the_csv_are_skipped():
    stdout = ingest.read(DATA / "ncu-cupy-h100-stdout/stdout.details.csv")
    assert stdout.launches["kernel_name"].to_list() == [
        "cupy_arange__float_float_float32", "cupy_fill", "cupy_multiply__float_float32_float32"]
    assert stdout.metrics.height == ingest.read(DATA / "ncu-cupy-h100-stdout/details.csv").metrics.height


def test_details_without_rule_columns():
    result = ingest.read(DATA / "ncu-h100-details-norules/details.norules.csv")
    assert result.rules.height == 0 and result.metrics.height == 69


def test_old_pascal_raw_export_with_kernel_time_column():
    result = ingest.read(DATA / "ncu-gtx1080-raw/ncu-raw_gtx1080-pascal_microgpusim-vecadd.csv")
    assert result.gpu_name == "NVIDIA GeForce GTX 1080"
    assert "Kernel Time" not in result.metrics["metric"].to_list()
    assert result.launches["block_dims"].null_count() == 3   # this version had no Block Size column
    headline = normalize.headline_columns(normalize.normalize_source_metrics(result.metrics, "raw"))
    row = headline.sort("launch_id").row(0, named=True)
    assert row["duration_ns"] == 2720.0          # gpu__time_duration, "nsecond"
    assert row["sm_pct"] == 0.09                 # sm__sol_pct, the Pascal-era name
    assert row["l2_hit_pct"] == 30.77            # lts__request_total_sectors_hitrate_pct
    assert row["block_size"] == 1024.0


BAD = {
    "empty.csv": "empty.csv: file is empty",
    "garbage.bin": "garbage.bin: not a recognised export",
    "nsys_no_cuda.sqlite": "nsys_no_cuda.sqlite: no CUDA kernel activity in this nsys export (no "
                           "CUPTI_ACTIVITY_KIND_KERNEL table); profile with nsys profile --trace=cuda",
    "truncated.raw.csv": "truncated.raw.csv:4: file ends in the middle of a row",
    "too_many_fields.details.csv": "too_many_fields.details.csv:3: malformed CSV row: 16 fields where the header has 15",
    "short_row.raw.csv": 'short_row.raw.csv:4: row ends before the "smsp__warps_eligible.sum.per_cycle_active" column',
    "no_units_row.raw.csv": "no_units_row.raw.csv:2: no units row after the header",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_one_clear_line(name):
    with pytest.raises(InputError) as caught:
        ingest.read(DATA / "bad" / name)
    message = str(caught.value)
    assert BAD[name] in message and "\n" not in message


def test_forced_format_on_the_wrong_page_names_the_missing_column():
    with pytest.raises(InputError, match=r'gpt2.raw.csv:1: no "Section Name", "Metric Name", "Metric Unit", '
                                         r'"Metric Value" column; was it exported with ncu --import REPORT '
                                         r"--csv --page details\?"):
        ingest.read(DATA / "ncu-gpt2-h100/gpt2.raw.csv", format="ncu-details-csv")
