"""Cells at the edges (issue 32, item 6): a number that is not finite (1e400, inf, nan), a unit kwh cannot
convert (parsec), an integer beyond 64 bits and a time past 2262 are warnings naming the file, the line
(or the event / row where a format has no lines) and the column, stored as NULL (a timeline row whose
time is unusable is left out), counted in the ingest report; never stored as read, never polluted with
a builder's error. A details page cut inside its only (or last) launch's last section is refused as
cut short.

Every file here is a real export of tests/data, polluted by the test itself."""

from __future__ import annotations

import csv
import io
import re
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from kwarehouse import ingest
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.errors import InputError
from kwarehouse.normalize import units
from kwarehouse.store.warehouse import Warehouse

DATA = Path(__file__).parent / "data"
ONE_LAUNCH_DETAILS = DATA / "verdicts-ncu-h100/gpt2/gpt2.details.csv"
RTX5090_DETAILS = DATA / "ncu-rtx5090-details/ncu-details-with-rules_rtx5090-cc12.0_llm-perf-opt-kernel0001.csv"
RAW = DATA / "ncu-gpt2-h100/gpt2.raw.csv"
TEXT = DATA / "roof-ncu-h100/roof.ncu-console.txt"
TRACE = DATA / "torch-trace-custom_cupy/trace.json"
SQLITE = DATA / "nsys-sqlite-rtx3090/report1.sqlite"
STATS = DATA / "nsys-stats-derived-a100/stats_stdout.csv"
SMI_QUERY = DATA / "telemetry-smi-gpt2-h100/nvidia-smi-query.csv"
NVML = DATA / "profile-h100/conv_quick/discovery/nvml-samples.csv"
# What a warning or an error must never hold: polluted builder text, or advice that cannot help.
BUILDER_TEXT = re.compile(r"builder|i128|infer_schema_length|re-export it\b|Traceback|internal error", re.I)


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def edited(source: Path, target: Path, line_number: int, old: str, new: str) -> Path:
    """`source` with the first `old` on its line `line_number` (1-based) replaced by `new`."""
    lines = lines_of(source)
    assert old in lines[line_number - 1], (old, lines[line_number - 1][:200])
    lines[line_number - 1] = lines[line_number - 1].replace(old, new, 1)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines), encoding="utf-8")
    return target


def csv_line(cells: list[str]) -> str:
    """A row as ncu writes it: every cell quoted, quotes doubled."""
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(cells)
    return out.getvalue()


def line_with(path: Path, *parts: str) -> int:
    return next(i for i, line in enumerate(lines_of(path), 1) if all(p in line for p in parts))


def clean(warnings: list[str]) -> list[str]:
    for warning in warnings:
        assert "\n" not in warning and not BUILDER_TEXT.search(warning), warning
    return warnings


def metric_value(result, metric: str) -> pl.DataFrame:
    return result.metrics.filter(pl.col("metric") == metric)


# -- ncu details CSV -------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["1e400", "inf", "-inf", "nan", "1E400"])
def test_a_details_duration_that_is_not_finite_is_null_with_a_warning(tmp_path, cell):
    line = line_with(ONE_LAUNCH_DETAILS, '"Duration","us"')
    path = edited(ONE_LAUNCH_DETAILS, tmp_path / "gpt2.details.csv", line, '"us","8.48"', f'"us","{cell}"')
    result = ingest.read(path)
    assert metric_value(result, "Duration")["value_text"].to_list() == [None]
    warnings = clean(result.warnings)
    assert len(warnings) == 1
    assert warnings[0].startswith(f'{path}:{line}: column "Metric Value" (Duration, launch ID 9): {cell!r} is not '
                                  "a finite number")
    assert warnings[0].endswith("stored as NULL")


def test_a_details_unit_kwh_cannot_convert_is_null_with_a_warning(tmp_path):
    line = line_with(ONE_LAUNCH_DETAILS, '"Duration","us"')
    path = edited(ONE_LAUNCH_DETAILS, tmp_path / "gpt2.details.csv", line, '"Duration","us"', '"Duration","parsec"')
    result = ingest.read(path)
    assert metric_value(result, "Duration")["value_text"].to_list() == [None]
    (warning,) = clean(result.warnings)
    assert warning.startswith(f'{path}:{line}: column "Metric Unit" (Duration, launch ID 9): \'8.48\' is in unit '
                              "'parsec', which kwh cannot convert")


def test_an_inf_duration_never_reaches_the_warehouse_and_is_counted_in_the_report(tmp_path):
    """The finding: 1e400 became an inf duration that poisoned every sum. Now: NULL, and the run's
    summary carries the warning (RunSummary.warnings, what `kwh ingest` prints and counts)."""
    folder = tmp_path / "runs" / "gpt2"
    folder.mkdir(parents=True)
    line = line_with(ONE_LAUNCH_DETAILS, '"Duration","us"')
    edited(ONE_LAUNCH_DETAILS, folder / "gpt2.details.csv", line, '"us","8.48"', '"us","1e400"')
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([tmp_path / "runs"], warehouse)
    assert report.failed == []
    (run,) = report.runs
    assert len(run.warnings) == 1 and "1e400" in run.warnings[0] and f":{line}:" in run.warnings[0]
    durations = pl.read_parquet(list((tmp_path / "wh").rglob("kernels/**/*.parquet")))["duration_ns"]
    assert durations.null_count() == durations.len() or not durations.drop_nulls().is_infinite().any()


# -- single-kernel truncation ----------------------------------------------------------------------

@pytest.mark.parametrize("source", [ONE_LAUNCH_DETAILS, RTX5090_DETAILS], ids=["h100", "rtx5090"])
def test_a_page_of_one_launch_cut_inside_its_last_section_is_refused(tmp_path, source):
    """The finding: a details page cut inside its only kernel was read as complete (exit 0). ncu writes
    each section's rows whole; its last section holding a leading part of them is a cut."""
    lines = lines_of(source)
    occupancy = [i for i, line in enumerate(lines) if '"Occupancy","' in line and not line.rstrip().endswith('""')]
    occupancy = [i for i in occupancy if lines[i].split('","')[14:15] != [""]]
    path = tmp_path / source.name
    for kept in (1, 6, 12):                          # the file ends after this many of its 13 rows
        path.write_text("".join(lines[:occupancy[0] + kept]), encoding="utf-8")
        with pytest.raises(InputError) as caught:
            ingest.read(path)
        message = str(caught.value)
        assert message.startswith(f"{path}:{occupancy[0] + kept}: the last launch (ID ")
        assert f'ends {kept} rows into its "Occupancy" section, where ncu writes 13: the file was cut short' in message
    # the whole section (and the whole file) read as before
    path.write_text("".join(lines[:occupancy[0] + 13]), encoding="utf-8")
    assert metric_value(ingest.read(path), "Theoretical Occupancy").height == 1
    assert ingest.read(source).metrics.height == ingest.read(path).metrics.height


def test_a_cut_between_two_sections_of_one_launch_is_not_refused(tmp_path):
    """Documented limit: a cut exactly after a section's last row leaves a page no different from one
    exported with fewer sections (--section): it is read, shorter."""
    lines = lines_of(ONE_LAUNCH_DETAILS)
    first_launch_stats = line_with(ONE_LAUNCH_DETAILS, '"Launch Statistics","')
    path = tmp_path / ONE_LAUNCH_DETAILS.name
    path.write_text("".join(lines[:first_launch_stats - 1]), encoding="utf-8")
    assert 0 < ingest.read(path).metrics.height < ingest.read(ONE_LAUNCH_DETAILS).metrics.height


# -- ncu raw CSV and console text --------------------------------------------------------------------

def test_a_raw_cell_that_is_not_finite_is_null_with_a_warning_naming_line_and_column(tmp_path):
    """It was an internal error (InvalidOperationError: f64 to i64 ... [inf]) where the cell fed an
    integer column (launch__registers_per_thread)."""
    lines = lines_of(RAW)
    header = next(csv.reader([lines[0]]))
    column = header.index("launch__registers_per_thread")
    row = next(csv.reader([lines[2]]))
    row[column] = "1e400"
    lines[2] = csv_line(row)
    path = tmp_path / RAW.name
    path.write_text("".join(lines), encoding="utf-8")
    result = ingest.read(path)
    (warning,) = clean(result.warnings)
    assert warning.startswith(f'{path}:3: column "launch__registers_per_thread" (launch__registers_per_thread, '
                              "launch ID 0): '1e400' is not a finite number")
    assert metric_value(result, "launch__registers_per_thread")["value_text"].to_list()[0] is None
    report = ingest_job.ingest([path], Warehouse(tmp_path / "wh"))
    assert report.failed == [] and report.runs[0].warnings == [warning]


def test_a_raw_unit_kwh_cannot_convert_nulls_its_column_with_warnings(tmp_path):
    lines = lines_of(RAW)
    header = next(csv.reader([lines[0]]))
    column = header.index("gpu__time_duration.sum")
    units_row = next(csv.reader([lines[1]]))
    assert units_row[column] in ("ns", "usecond", "us", "nsecond", "msecond")
    units_row[column] = "parsec"
    lines[1] = csv_line(units_row)
    path = tmp_path / RAW.name
    path.write_text("".join(lines), encoding="utf-8")
    result = ingest.read(path)
    assert metric_value(result, "gpu__time_duration.sum")["value_text"].null_count() == result.launches.height
    warnings = clean(result.warnings)
    assert len(warnings) == result.launches.height
    assert all(w.startswith(f'{path}:2: column "gpu__time_duration.sum"') and "unit 'parsec'" in w for w in warnings)


def test_a_console_text_value_that_is_not_finite_is_null_with_a_warning(tmp_path):
    number = line_with(TEXT, "Duration", " us ")
    value = lines_of(TEXT)[number - 1].split()[-1]
    path = edited(TEXT, tmp_path / TEXT.name, number, f" {value}\n", " 1e400\n".rjust(len(value) + 2))
    result = ingest.read(path)
    (warning,) = clean(result.warnings)
    assert warning.startswith(f"{path}:{number}: the \"GPU Speed Of Light Throughput\" table, Duration, value: "
                              "'1e400' is not a finite number")
    assert None in metric_value(result, "Duration")["value_text"].to_list()


# -- timelines ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, why", [
    ("dur", "1e400", "does not fit a 64-bit integer"),
    ("ts", "18446744073709551616", "is a time past 2262"),
    ("ts", "9999999999999999", "is a time past 2262"),
])
def test_a_trace_event_with_an_unusable_time_is_left_out_with_a_warning(tmp_path, key, value, why):
    """They were refusals quoting polars' builder ("could not append value ... i128 ... re-export it")."""
    text = TRACE.read_text(encoding="utf-8")
    kernel = text.index('"cat": "kernel", "name": "naive_sgemm"')
    found = re.compile(f'"{key}": [\\d.]+').search(text, kernel)
    path = tmp_path / TRACE.name
    path.write_text(text[:found.start()] + f'"{key}": {value}' + text[found.end():], encoding="utf-8")
    full, result = ingest.read(TRACE), ingest.read(path)
    assert result.timeline.height == full.timeline.height - 1
    names = result.timeline["kernel_name"].to_list()
    assert names.count("naive_sgemm") == full.timeline["kernel_name"].to_list().count("naive_sgemm") - 1
    (warning,) = clean(result.warnings)
    assert warning.startswith(f"{path}: traceEvents[") and "('naive_sgemm')" in warning
    assert why in warning and warning.endswith("the row is left out")


def _sqlite_with(tmp_path: Path, assignment: str) -> Path:
    path = tmp_path / SQLITE.name
    shutil.copy(SQLITE, path)
    con = sqlite3.connect(path)
    try:
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {assignment} WHERE correlationId = "
                    "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET 5)")
        con.commit()
    finally:
        con.close()
    return path


@pytest.mark.parametrize("assignment, why", [
    ('start = 9223372036854000000, "end" = 9223372036854000100', "is a time past 2262"),
    ("start = 18446744073709551616.0", "does not fit a 64-bit integer"),
    ('"end" = 1e400', "is not a finite number"),
])
def test_an_nsys_sqlite_kernel_with_an_unusable_time_is_left_out_with_a_warning(tmp_path, assignment, why):
    """A far start was stored as it read (292 years into the session); a REAL start or an inf end
    was a refusal quoting polars' builder."""
    path = _sqlite_with(tmp_path, assignment)
    full, result = ingest.read(SQLITE), ingest.read(path)
    assert result.timeline.height == full.timeline.height - 1
    (warning,) = clean(result.warnings)
    assert warning.startswith(f"{path}: CUPTI_ACTIVITY_KIND_KERNEL row of correlationId ")
    assert why in warning and warning.endswith("the row is left out")


def test_an_nsys_stats_integer_beyond_64_bits_leaves_its_row_out_with_a_warning(tmp_path):
    lines = lines_of(STATS)
    number = 1 + next(i for i, line in enumerate(lines) if line.startswith("Time (%),Total Time (ns),Instances"))
    fields = lines[number].split(",")
    fields[2] = "18446744073709551616"                # Instances
    number += 1
    path = tmp_path / STATS.name
    lines[number - 1] = ",".join(fields)
    path.write_text("".join(lines), encoding="utf-8")
    full, result = ingest.read(STATS), ingest.read(path)
    (warning,) = clean(result.warnings)
    assert warning.startswith(f"{path}:{number}: column ") and "'18446744073709551616' does not fit a 64-bit " \
        "integer: the row is left out" in warning
    assert result.summaries.height == full.summaries.height - 1


# -- telemetry ----------------------------------------------------------------------------------------

def test_a_telemetry_value_that_is_not_finite_is_null_with_a_warning(tmp_path):
    path = edited(SMI_QUERY, tmp_path / SMI_QUERY.name, 3, "74.16 W", "1e400 W")
    result = ingest.read(path)
    (warning,) = clean(result.warnings)
    assert warning == (f"{path}:3: field power.draw, value: inf is not a finite number (it would make every sum "
                       "it enters inf or nan): stored as NULL")
    power = result.samples.filter((pl.col("line") == 3) & (pl.col("source_field") == "power.draw"))
    assert power["value"].to_list() == [None]
    assert result.samples["value"].drop_nulls().is_finite().all()


def test_a_telemetry_integer_beyond_64_bits_is_null_and_a_timestamp_so_leaves_its_sample_out(tmp_path):
    # a value (a Float64 column): 2^64 is a float it holds, stored as read
    path = edited(NVML, tmp_path / NVML.name, 2, ",503316480,", ",18446744073709551616,")
    result = ingest.read(path)
    assert result.warnings == [] and result.samples["value"].max() == 2.0 ** 64
    # the time, an integer column: a sample past 2262 is left out
    timestamp = lines_of(NVML)[1].split(",")[0]
    path = edited(NVML, tmp_path / "far.csv", 2, timestamp, "18446744073709551616")
    full, result = ingest.read(NVML), ingest.read(path)
    (warning,) = clean(result.warnings)
    assert warning == (f"{path}:2: timestamp_ns: 18446744073709551616 is a time past 2262, where 64-bit "
                       "nanoseconds end: the line's samples are left out")
    assert result.samples.height < full.samples.height


# -- units --------------------------------------------------------------------------------------------

def test_every_unit_of_the_real_ncu_pages_is_known_and_parsec_is_not():
    seen = set()
    for path in [RAW, ONE_LAUNCH_DETAILS, RTX5090_DETAILS, TEXT, DATA / "ncu-llama-h100-variants/llama.raw.baseunits.csv"]:
        seen |= set(ingest.read(path).metrics["unit"].fill_null("").unique().to_list())
    assert {u for u in seen if not units.is_known(u)} == set()
    assert not units.is_known("parsec") and not units.is_known("byte/parsec") and units.is_known("byte/second")


# -- the pollution harness ----------------------------------------------------------------------------

@pytest.mark.parametrize("label, kind", [
    ("tests/data/verdicts-ncu-h100/gpt2/gpt2.details.csv", "cut-in-last-section"),
    ("tests/data/verdicts-ncu-h100/gpt2/gpt2.details.csv", "cell-inf"),
    ("tests/data/verdicts-ncu-h100/gpt2/gpt2.details.csv", "unknown-unit"),
    ("tests/data/profile-h100/ncu_log_names_shifted/conv_net.raw.csv", "cell-inf"),
    ("tests/data/torch-trace-custom_cupy/trace.json", "far-timestamp"),
    ("tests/data/nsys-sqlite-rtx3090/report1.sqlite", "far-timestamp"),
])
def test_cell_edge_pollutions_are_intact_or_refused(tmp_path, label, kind):
    import pollution
    path = DATA / label.removeprefix("tests/data/")
    sidecars = tuple(sorted(p for p in path.parent.iterdir() if p.name in pollution.SIDECAR_NAMES
                            or (p.name.startswith("manifest") and p.suffix == ".json")))
    source = pollution.Source(path, ingest.sniff(path).name, label, sidecars)
    (variant,) = [v for v in pollution.variants(source, tmp_path, [kind])]
    outcome = pollution.Harness(tmp_path / "ingests").score(variant)
    assert outcome.verdict in ("intact", "refused"), outcome.reason
    if kind == "cut-in-last-section":
        assert outcome.verdict == "refused" and "cut short" in outcome.reason
    else:
        assert not BUILDER_TEXT.search(outcome.reason)


# -- the last net: what a reader did not foresee --------------------------------------------------------

@pytest.mark.parametrize("build, said", [
    (lambda: pl.DataFrame([(2 ** 64,)], schema={"a": pl.Int64}, orient="row"), "a number beyond 64 bits (18446744073709551616)"),
    (lambda: int(float("inf")), "a number that is not finite (inf)"),
    (lambda: pl.Series([float("inf")]).cast(pl.Int64), "a number that is not finite (inf)"),
    (lambda: pl.Series("a", [10 ** 30], dtype=pl.Int64), "a number beyond 64 bits (1000000000000000000000000000000)"),
])
def test_a_value_no_column_holds_is_said_in_kwh_words_where_a_reader_did_not_foresee_it(tmp_path, monkeypatch, build, said):
    """A reader's unforeseen builder error became "not a readable X export (could not append value ...
    to the builder; make sure that all rows have the same schema or consider increasing
    `infer_schema_length`); re-export it": polars' advice, and a re-export writes the same number."""
    from kwarehouse.ingest import nvml_samples
    monkeypatch.setattr(nvml_samples.NvmlSamples, "read", lambda self, path: build())
    with pytest.raises(InputError) as caught:
        ingest.read(NVML)
    message = str(caught.value)
    assert message.startswith(f"{NVML}: holds {said}, which no nvml-samples column can store")
    assert not BUILDER_TEXT.search(message)


# -- negative durations ---------------------------------------------------------------------------------

def test_a_trace_kernel_with_a_negative_duration_is_left_out_with_a_warning(tmp_path):
    text = TRACE.read_text(encoding="utf-8")
    kernel = text.index('"cat": "kernel", "name": "naive_sgemm"')
    found = re.compile(r'"dur": [\d.]+').search(text, kernel)
    path = tmp_path / TRACE.name
    path.write_text(text[:found.start()] + '"dur": -3.5' + text[found.end():], encoding="utf-8")
    full, result = ingest.read(TRACE), ingest.read(path)
    assert result.timeline.height == full.timeline.height - 1
    assert result.timeline["duration_ns"].min() >= 0
    (warning,) = clean(result.warnings)
    assert "('naive_sgemm'), duration_ns: -3500 is a negative duration (an end before its start): the row is " \
        "left out" in warning


def test_an_nsys_sqlite_kernel_that_ends_before_it_starts_is_left_out_with_a_warning(tmp_path):
    path = _sqlite_with(tmp_path, '"end" = start - 1000')
    full, result = ingest.read(SQLITE), ingest.read(path)
    assert result.timeline.height == full.timeline.height - 1
    (warning,) = clean(result.warnings)
    assert warning.startswith(f"{path}: CUPTI_ACTIVITY_KIND_KERNEL row of correlationId ")
    assert warning.endswith("duration_ns: -1000 is a negative duration (an end before its start): the row is left out")
