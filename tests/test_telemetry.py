"""GPU telemetry (issue 25): nvidia-smi query/dmon/pmon, dcgmi dmon and NVML sample logs -> gpu_samples, and
the gpu_telemetry view that attaches samples to the profiled runs whose window they cover.

Fixtures are real logs trimmed by whole lines (tests/data/README.md, telemetry-*). Every value is checked
against the log itself, read here with plain string splitting, not with kwh's readers."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import DATA, rows
from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError
from kwarehouse.ingest import nvml_samples

SMI = DATA / "telemetry-smi-gpt2-h100"
DCGMI = DATA / "telemetry-dcgmi-h100nvl"
GEMM = DATA / "telemetry-gemm-h100"
FACTORS = {"MHz": 1e6, "MiB": 2 ** 20, "MB": 2 ** 20, "W": 1.0, "%": 1.0, "MB/s": 1e6}


def smi_time_ns(text: str) -> int:
    moment = datetime.strptime(text, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 10 ** 9 + moment.microsecond * 1000


def samples_by_line(path: Path) -> dict[tuple[int, str], dict]:
    frame = ingest.read(path).samples
    return {(r["line"], r["source_field"], r["process_id"]): r for r in frame.iter_rows(named=True)}


def query_log(path: Path) -> list[tuple[int, dict[str, str]]]:
    lines = path.read_text().splitlines()
    header = [c.strip() for c in lines[0].split(",")]
    return [(n, dict(zip(header, (c.strip() for c in line.split(","))))) for n, line in enumerate(lines[1:], 2)]


@pytest.mark.parametrize("name", ["nvidia-smi-query.csv", "nvidia-smi-query-nounits.csv"])
def test_query_log_values_equal_the_log(name):
    path = (SMI if name == "nvidia-smi-query.csv" else GEMM) / name
    if not path.exists():
        pytest.skip(f"{path} not in this checkout")
    got = samples_by_line(path)
    log = query_log(path)
    checked = 0
    for number, cells in log:
        for column, cell in cells.items():
            name, _, unit = column.partition(" [")
            unit = unit.rstrip("]") or None
            if name in ("timestamp", "index", "name", "uuid", "pci.bus_id"):
                continue
            row = got[(number, name, None)]
            assert row["timestamp_ns"] == smi_time_ns(cells["timestamp"])
            if "index" in cells:
                assert row["gpu_index"] == int(cells["index"])
            number_text = cell.removesuffix(f" {unit}") if unit else cell
            try:
                expected = float(int(number_text, 16)) if number_text.startswith("0x") else float(number_text)
            except ValueError:
                assert row["value"] is None and row["value_text"] == cell     # pstate "P0"
                continue
            assert row["value"] == pytest.approx(expected * FACTORS.get(unit, 1.0), rel=1e-12)
            checked += 1
    assert checked > 100
    assert len(got) == sum(len([c for c in cells if c.partition(" [")[0] not in
                                ("timestamp", "index", "name", "uuid", "pci.bus_id")]) for _, cells in log)


def test_query_log_fields_and_units():
    frame = ingest.read(SMI / "nvidia-smi-query.csv").samples
    units = dict(frame.select("field", "unit").unique().iter_rows())
    assert units == {"gpu_util": "%", "memory_util": "%", "sm_clock": "Hz", "memory_clock": "Hz", "power": "W",
                     "gpu_temperature": "C", "memory_used": "byte"}
    assert frame["gpu_name"].unique().to_list() == ["NVIDIA H100 80GB HBM3"]
    assert frame["gpu_uuid"].unique().to_list() == ["GPU-f2ab635b-2e64-61be-6c17-03258f3af589"]


def test_dmon_values_equal_the_log():
    path = SMI / "nvidia-smi-dmon.txt"
    got = samples_by_line(path)
    lines = path.read_text().splitlines()
    names, units = lines[0].lstrip("#").split(), lines[1].lstrip("#").split()
    checked = 0
    for number, line in enumerate(lines[2:], 3):
        cells = dict(zip(names, line.split()))
        for name, cell in cells.items():
            if name == "gpu":
                continue
            row = got[(number, name, None)]
            assert row["gpu_index"] == int(cells["gpu"]) and row["timestamp_ns"] is None   # no -o DT: no time
            assert row["value"] == pytest.approx(float(cell) * FACTORS.get(units[names.index(name)], 1.0))
            checked += 1
    assert checked == 20 * 21 == len(got)
    assert got[(21, "pclk", None)]["field"] == "graphics_clock" and got[(21, "pclk", None)]["value"] == 1.98e9
    assert got[(20, "fb", None)]["field"] == "memory_used" and got[(20, "fb", None)]["value"] == 1129 * 2 ** 20


def test_dcgmi_dmon_ratios_become_percent_and_na_is_missing():
    got = samples_by_line(DCGMI / "dcgmi-dmon.txt")
    assert {k[1] for k in got} == {"GRACT", "SMACT", "DRAMA"}
    assert [got[(3, f, None)]["value"] for f in ("GRACT", "SMACT", "DRAMA")] == [None, None, None]
    assert [got[(4, f, None)]["value"] for f in ("GRACT", "SMACT", "DRAMA")] == [0.0, 0.0, 0.0]
    assert got[(4, "SMACT", None)]["field"] == "sm_active" and got[(4, "SMACT", None)]["unit"] == "%"
    assert all(r["timestamp_ns"] is None and r["gpu_index"] == 0 for r in got.values())


def test_nvml_columns_are_the_documented_format():
    # kwh profile writes this format: the module constant is its column list
    assert nvml_samples.COLUMNS[:2] == nvml_samples.REQUIRED == ("timestamp_ns", "gpu_index")
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert ",".join(nvml_samples.COLUMNS) in readme


# --- bad input: one line naming the file and line; the rest of the ingest goes on ---------------------------

def _copy(tmp_path: Path, source: Path, text: str | None = None) -> Path:
    target = tmp_path / source.name
    if text is None:
        shutil.copy(source, target)
    else:
        target.write_text(text)
    return target


def test_log_cut_mid_line_is_one_error_naming_the_line(tmp_path):
    text = (SMI / "nvidia-smi-query.csv").read_text()
    cut = _copy(tmp_path, SMI / "nvidia-smi-query.csv", text[: text.rindex("\n", 0, len(text) - 1) + 40])
    with pytest.raises(InputError) as error:
        ingest.read(cut)
    assert str(error.value).startswith(f"{cut}:29: the file ends in the middle of a line")
    assert "\n" not in str(error.value)


def test_headerless_query_log_asks_for_the_header(tmp_path):
    lines = (SMI / "nvidia-smi-query.csv").read_text().splitlines(keepends=True)
    headerless = _copy(tmp_path, SMI / "nvidia-smi-query.csv", "".join(lines[1:]))
    assert ingest.sniff(headerless).name == "nvidia-smi-query"
    with pytest.raises(InputError, match=r":1: no header line: a --format=csv,noheader log does not say which"):
        ingest.read(headerless)


def test_units_mixed_in_a_column_is_one_error_naming_the_line(tmp_path):
    lines = (SMI / "nvidia-smi-query.csv").read_text().splitlines(keepends=True)
    lines[5] = lines[5].replace(" MHz,", ",", 1)     # one cell without its unit, as --format=csv,nounits writes
    mixed = _copy(tmp_path, SMI / "nvidia-smi-query.csv", "".join(lines))
    with pytest.raises(InputError, match=r":6: units mixed in column clocks.current.sm \[MHz\]: '1980', where "
                                         r"line 2 had '<number> MHz'"):
        ingest.read(mixed)


def test_unknown_nvml_column_is_one_error_on_line_one(tmp_path):
    log = tmp_path / "nvml-samples.csv"
    log.write_text("timestamp_ns,gpu_index,sm_clock_ghz\n1795461081785672014,0,1.98\n")
    with pytest.raises(InputError, match=r"nvml-samples.csv:1: unknown column 'sm_clock_ghz'"):
        ingest.read(log)


def test_unknown_query_fields_are_kept_by_their_printed_name(tmp_path):
    lines = (SMI / "nvidia-smi-query.csv").read_text().splitlines()
    renamed = _copy(tmp_path, SMI / "nvidia-smi-query.csv",
                    "\n".join([lines[0].replace("temperature.gpu", "fan.speed.new")] + lines[1:]) + "\n")
    frame = ingest.read(renamed).samples
    assert frame.filter(frame["source_field"] == "fan.speed.new")["field"].unique().to_list() == ["fan.speed.new"]


def test_a_bad_log_fails_alone_and_the_rest_of_the_folder_lands(tmp_path, new_warehouse):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    for path in SMI.iterdir():
        shutil.copy(path, folder / path.name)
    text = (folder / "nvidia-smi-query.csv").read_text()
    (folder / "nvidia-smi-query.csv").write_text(text[:-30])       # cut mid-line
    warehouse = new_warehouse()
    report = ingest_job.ingest([folder], warehouse)
    assert len(report.failed) == 1 and "nvidia-smi-query.csv:29: the file ends in the middle of a line" in report.failed[0]
    assert [r.model for r in report.runs] == ["gpt2"]
    assert rows(warehouse, "SELECT count(*), min(source), min(gpu) FROM gpu_samples") == \
        [(420, "nvidia-smi-dmon", "NVIDIA H100 80GB HBM3")]


# --- the warehouse: gpu_samples, and samples joined to runs by GPU and time window --------------------------

def test_telemetry_logs_land_as_runs_of_their_own(tmp_path, new_warehouse):
    warehouse = new_warehouse()
    report = ingest_job.ingest([SMI], warehouse)
    assert report.failed == [] and sorted(r.kernels for r in report.runs) == [0, 0]
    assert rows(warehouse, "SELECT tool, model, gpu, kernel_count FROM runs ORDER BY 1") == \
        [("telemetry", "gpt2", "NVIDIA H100 80GB HBM3", 0)] * 2
    # the query log's samples are 100 ms apart; dmon's lines have no time and so no interval
    assert rows(warehouse, "SELECT source, count(*), min(interval_ns), max(interval_ns), min(gpu_model) "
                           "FROM gpu_samples GROUP BY source ORDER BY source") == \
        [("nvidia-smi-dmon", 420, None, None, "H100 SXM"), ("nvidia-smi-query", 196, 100_000_000, 100_000_000, "H100 SXM")]
    # and nothing joins a run without a window
    assert rows(warehouse, "SELECT count(*) FROM gpu_telemetry") == [(0,)]


# --- the GEMM capture: bf16 16384x8192x8192 torch.mm x 300 under the PyTorch profiler on an H100 -------------

def nvml_log() -> list[tuple[int, dict[str, str]]]:
    lines = (GEMM / "nvml-samples.csv").read_text().splitlines()
    header = lines[0].split(",")
    return [(n, dict(zip(header, line.split(",")))) for n, line in enumerate(lines[1:], 2)]


NVML_FACTORS = {"sm_clock_mhz": 1e6, "mem_clock_mhz": 1e6, "power_mw": 1e-3}


def test_nvml_sample_values_equal_the_log():
    got = samples_by_line(GEMM / "nvml-samples.csv")
    checked = 0
    for number, cells in nvml_log():
        for column, cell in cells.items():
            if column in ("timestamp_ns", "gpu_index", "gpu_uuid", "gpu_name"):
                continue
            row = got[(number, column, None)]
            assert row["timestamp_ns"] == int(cells["timestamp_ns"]) and row["gpu_index"] == int(cells["gpu_index"])
            assert row["gpu_name"] == cells["gpu_name"] == "NVIDIA H100 80GB HBM3"
            if cell == "":
                assert row["value"] is None      # the first GPM value needs two samples
            else:
                assert row["value"] == pytest.approx(float(cell) * NVML_FACTORS.get(column, 1.0), rel=1e-12)
                checked += 1
    assert checked > 2000
    assert got[(2, "tensor_active_pct", None)]["field"] == "tensor_active"


def test_dmon_with_date_and_time_gives_each_line_its_time():
    path = GEMM / "nvidia-smi-dmon.txt"
    got = samples_by_line(path)
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("#"):
            continue
        day, clock, gpu, power = line.split()[:4]
        moment = datetime.strptime(f"{day} {clock}", "%Y%m%d %H:%M:%S").replace(tzinfo=UTC)
        row = got[(number, "pwr", None)]
        assert row["timestamp_ns"] == int(moment.timestamp()) * 10 ** 9
        assert (row["gpu_index"], row["value"], row["unit"]) == (int(gpu), float(power), "W")


def test_pmon_rows_are_per_process_and_empty_lines_are_passed_over():
    path = GEMM / "nvidia-smi-pmon.txt"
    frame = ingest.read(path).samples
    process_lines = [n for n, line in enumerate(path.read_text().splitlines(), 1)
                     if not line.startswith("#") and line.split()[3] != "-"]
    assert sorted(set(frame["line"])) == process_lines and len(process_lines) == 10
    assert set(frame["process_name"]) == {"python3"} and frame["process_id"].n_unique() == 1
    sm = {r["line"]: r["value"] for r in frame.filter(frame["field"] == "process_sm_util").iter_rows(named=True)}
    lines = path.read_text().splitlines()
    assert sm == {n: float(lines[n - 1].split()[5]) for n in process_lines}


def test_dcgmi_layout_of_devicemonitor_cpp_with_profiling_fields(tmp_path):
    # dcgmi dmon as DeviceMonitor.cpp prints it (#Entity padded to 10, each field to width + 6 + 2, doubles
    # with 3 decimals), filled with the real NVML GPM values of the GEMM capture: DCGM's profiling fields
    # are ratios, NVML's GPM metrics the same quantities in %.
    fields = [("SMACT", "sm_active_pct"), ("SMOCC", "sm_occupancy_pct"), ("TENSO", "tensor_active_pct"),
              ("DRAMA", "dram_active_pct"), ("SMCLK", "sm_clock_mhz"), ("POWER", "power_mw")]
    widths = {"SMCLK": 7 + 6, "POWER": 7 + 6}
    header = "#Entity".ljust(10) + "".join(s.ljust(widths.get(s, 5 + 6) + 2) for s, _ in fields)
    units = "ID".ljust(10) + "".join(u.ljust(widths.get(s, 5 + 6) + 2) for (s, _), u in
                                     zip(fields, ["", "", "", "", "", " W"]))
    body, expected = [], []
    for _, cells in nvml_log()[1:14]:
        values = [f"{float(cells[c]) / 100:.3f}" if c.endswith("_pct") else
                  cells[c] if c == "sm_clock_mhz" else f"{float(cells[c]) / 1000:.3f}" for _, c in fields]
        body.append("GPU 0".ljust(10) + "".join(v.ljust(widths.get(s, 5 + 6) + 2) for (s, _), v in zip(fields, values)))
        expected.append(values)
    log = tmp_path / "dcgmi-dmon.txt"
    log.write_text("\n".join([header, units, *body]) + "\n")
    got = ingest.read(log).samples
    for index, values in enumerate(expected):
        line = got.filter(got["line"] == index + 3)
        by_field = dict(zip(line["source_field"], line["value"]))
        for (short, _), value in zip(fields, values):
            scale = 100.0 if short in ("SMACT", "SMOCC", "TENSO", "DRAMA") else 1e6 if short == "SMCLK" else 1.0
            assert by_field[short] == pytest.approx(float(value) * scale)


def test_nounits_query_log_and_text_fields():
    frame = ingest.read(GEMM / "nvidia-smi-query-nounits.csv").samples
    pstate = frame.filter(frame["field"] == "pstate")
    assert set(pstate["value_text"]) == {"P0"} and pstate["value"].null_count() == pstate.height
    assert set(frame.filter(frame["field"] == "power_limit")["value"]) == {700.0}
    assert set(frame["pci_bus_id"]) == {"00000000:00:06.0"}


def nvml_interval() -> int:
    """The median gap between the NVML samples, as gpu_samples.interval_ns has it."""
    times = [int(c["timestamp_ns"]) for _, c in nvml_log()]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    middle = len(gaps) // 2
    return gaps[middle] if len(gaps) % 2 else round((gaps[middle - 1] + gaps[middle]) / 2)


def window_of_trace() -> tuple[int, int]:
    trace = json.loads((GEMM / "trace.json").read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    base = trace["baseTimeNanoseconds"]
    from decimal import Decimal
    starts = [base + int(Decimal(str(e["ts"])) * 1000) for e in kernels]
    ends = [base + int(Decimal(str(e["ts"])) * 1000) + int(Decimal(str(e["dur"])) * 1000) for e in kernels]
    return min(starts), max(ends)


def test_samples_join_the_run_whose_timeline_window_they_cover(new_warehouse):
    warehouse = new_warehouse()
    report = ingest_job.ingest([GEMM], warehouse)
    # the headerless log fails on its own; the trace and five logs land
    assert len(report.failed) == 1 and "nvidia-smi-query-noheader.csv:1: no header line" in report.failed[0]
    assert sorted(r.kernels for r in report.runs) == [0, 0, 0, 0, 0, 300]
    start, end = window_of_trace()
    [(run, source, window_start, window_end, samples, sources)] = rows(
        warehouse, "SELECT run_id, window_source, window_start_ns, window_end_ns, samples, sources FROM gpu_telemetry")
    assert (source, window_start, window_end) == ("timeline span", start, end)
    assert end - start == 989_004_971          # 300 GEMMs, back to back
    # the samples expected from the logs themselves: period (t - interval, t] overlapping the window
    nvml = [(int(c["timestamp_ns"]), c) for _, c in nvml_log()]
    interval = nvml_interval()
    inside = [c for t, c in nvml if t >= start and t - interval <= end]
    assert rows(warehouse, "SELECT count(*) FROM gpu_samples s JOIN runs r ON r.run_id = s.run_id "
                           "WHERE s.source = 'nvml-samples' AND s.field = 'sm_clock' AND s.timestamp_ns >= ? "
                           "AND s.timestamp_ns - s.interval_ns <= ?", (start, end)) == [(len(inside),)]
    assert len(inside) == 11
    query = [smi_time_ns(c["timestamp"]) for _, c in query_log(GEMM / "nvidia-smi-query.csv")]
    dmon = [line for line in (GEMM / "nvidia-smi-dmon.txt").read_text().splitlines() if not line.startswith("#")]
    assert samples > len(inside) and sources == "nvidia-smi-dmon, nvidia-smi-query, nvml-samples"
    assert len(query) and len(dmon)
    [(clock_min, clock_max, varied, throttled, power_max, tensor_p95)] = rows(
        warehouse, "SELECT sm_clock_min_hz, sm_clock_max_hz, sm_clock_varied, throttled, power_max_w, "
                   "tensor_active_p95_pct FROM gpu_telemetry")
    # the GEMMs ran into the 700 W power limit: clocks fell from 1980 to 1080 MHz, SW power cap set
    assert (clock_min, clock_max, varied, throttled) == (1.08e9, 1.98e9, True, True)
    assert power_max == max(float(c["power_mw"]) / 1000 for c in inside)
    assert tensor_p95 > 95


def test_estimated_tflops_is_peak_times_tensor_activity_times_clock(new_warehouse):
    warehouse = new_warehouse()
    ingest_job.ingest([GEMM], warehouse)
    [(estimate, peak, tensor, clock)] = rows(
        warehouse, "SELECT estimated_tensor_tflops_per_s, peak_tensor_tflops_per_s, tensor_active_mean_pct, "
                   "sm_clock_mean_hz FROM gpu_telemetry")
    assert peak == pytest.approx(989.5)            # H100 SXM dense BF16 (gpu_peaks.csv), the manifest's dtype
    assert estimate == pytest.approx(peak * tensor / 100 * clock / 1.98e9)
    # the workload's own FLOPs: 2*M*N*K x 300 over the kernels' 0.989 s = 667 TFLOP/s; the estimate is
    # within 5 % of it (the samples that straddle the start still hold idle time)
    achieved = 2 * 16384 * 8192 * 8192 * 300 / 0.989004971 / 1e12
    assert estimate == pytest.approx(achieved, rel=0.05)


def test_manifest_window_for_a_run_without_a_timeline(tmp_path, new_warehouse):
    # an ncu run has no times: the manifest's start_ns/end_ns (the workload's host clock around the
    # profiled iterations, real values) is its window
    folder = tmp_path / "fp8"
    folder.mkdir()
    shutil.copy(DATA / "tensor-ncu-fp8-h100" / "fp8_gemm.raw.csv", folder)
    shutil.copy(GEMM / "nvml-samples.csv", folder)
    manifest = json.loads((GEMM / "manifest.torchprof.json").read_text())
    (folder / "manifest.json").write_text(json.dumps(manifest))
    warehouse = new_warehouse()
    assert ingest_job.ingest([folder], warehouse).failed == []
    [(tool, source, start, end, samples, counter)] = rows(
        warehouse, "SELECT tool, window_source, window_start_ns, window_end_ns, samples, counter_source FROM gpu_telemetry")
    assert (tool, source, start, end) == ("ncu", "manifest", manifest["start_ns"], manifest["end_ns"])
    times = [int(c["timestamp_ns"]) for _, c in nvml_log()]
    interval = nvml_interval()
    assert samples == len([t for t in times if t >= manifest["start_ns"] and t - interval <= manifest["end_ns"]]) == 87
    assert counter == "ncu counters"


def test_nvml_json_lines_read_like_the_csv(tmp_path):
    records = []
    for _, cells in nvml_log()[:20]:
        record = {k: (None if v == "" else v if k in ("gpu_uuid", "gpu_name") else
                      int(v) if k in ("timestamp_ns", "gpu_index") else float(v)) for k, v in cells.items()}
        records.append(json.dumps(record))
    log = tmp_path / "samples.jsonl"
    log.write_text("\n".join(records) + "\n")
    as_json = ingest.read(log).samples.drop("line")
    as_csv = ingest.read(GEMM / "nvml-samples.csv").samples
    as_csv = as_csv.filter(as_csv["line"] <= 21).drop("line")
    assert as_json.equals(as_csv)


def test_dcgmi_mig_rows_and_stop_line(tmp_path):
    lines = (DCGMI / "dcgmi-dmon.txt").read_text().splitlines(keepends=True)
    stopped = tmp_path / "dcgmi-dmon.txt"
    stopped.write_text("".join(lines) + "\n\ndmon was stopped do to receiving a signal\n")   # (sic) DeviceMonitor.cpp
    assert ingest.read(stopped).samples.height == 6
    mig = tmp_path / "mig.txt"
    mig.write_text("".join(lines[:3]) + lines[3].replace("GPU 0  ", "GPU-I 1"))
    with pytest.raises(InputError, match=r"mig.txt:4: GPU-I \(MIG\) rows are not read"):
        ingest.read(mig)


def test_the_sampler_kwh_profile_runs_writes_the_columns_the_reader_reads():
    """collect/nvml_sampler.py runs as a file on GPU machines (pynvml only), so it repeats the column list."""
    import ast

    from kwarehouse.ingest import nvml_samples
    source = (Path(nvml_samples.__file__).parents[1] / "collect" / "nvml_sampler.py").read_text()
    assigned = next(node.value for node in ast.parse(source).body
                    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COLUMNS")
    assert ast.literal_eval(assigned) == nvml_samples.COLUMNS
