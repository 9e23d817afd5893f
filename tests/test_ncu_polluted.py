"""The ncu readers on polluted copies of real exports (issue 31, part 3): a row or cell kwh cannot read
exactly is that row's warning (naming file and line) and is left out, never silently changed; a row
ncu's own message was written into is read as ncu wrote it; a column written twice is read once.
Each pollution is made by code from a real export in tests/data (tests/pollution.py scores them all).
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from conftest import DATA

from kwarehouse import ingest
from kwarehouse.errors import InputError

RAW = DATA / "ncu-custom-cupy-h100/custom_cupy.raw.csv"
DETAILS = DATA / "profile-h100/custom_invocation/ncu/custom_kernel.details.csv"
TEXT = DATA / "text-ncu-gpt2-h100/gpt2.ncu-console.txt"
# what ncu writes to stderr (tests/data/meta-ncu-log-gpt2-h100/ncu.log), and what a Python program does
NCU_MESSAGE = "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling " \
              "results may be inconsistent."
PROGRAM_MESSAGE = "UserWarning: TypedStorage is deprecated."


def _polluted(tmp_path: Path, source: Path, lines: list[str]) -> Path:
    path = tmp_path / source.name
    path.write_text("".join(lines))
    return path


def _lines(source: Path) -> list[str]:
    return source.read_text().splitlines(keepends=True)


def _spliced(line: str, text: str) -> str:
    """`text` and a newline written into the middle of `line` (inside a quoted cell)."""
    half = line.index('","', len(line) // 2) - 2
    return line[:half] + text + "\n" + line[half:]


def _same(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    return a.sort(a.columns, nulls_last=True).equals(b.sort(b.columns, nulls_last=True))


# ------------------------------------------------------------------------------------ raw page

def test_a_raw_row_ncu_wrote_a_message_into_is_read_as_ncu_wrote_it(tmp_path):
    lines = _lines(RAW)
    lines[4] = _spliced(lines[4], NCU_MESSAGE)
    clean, polluted = ingest.read(RAW), ingest.read(_polluted(tmp_path, RAW, lines))
    assert _same(polluted.metrics, clean.metrics) and _same(polluted.launches, clean.launches)
    assert polluted.warnings == []


def test_a_raw_row_other_text_was_written_into_is_left_out_with_a_warning(tmp_path):
    lines = _lines(RAW)
    launch = int(lines[4].split('","')[0].strip('"'))
    lines[4] = _spliced(lines[4], PROGRAM_MESSAGE)
    lines.insert(7, NCU_MESSAGE + "\n")              # ncu's line between rows moves later lines down
    path = _polluted(tmp_path, RAW, lines)
    clean, polluted = ingest.read(RAW), ingest.read(path)
    assert polluted.warnings == [f"{path}:5: row left out: a cell holds a line break, so other text was written "
                                 "into the row (stdout and stderr in one file?); re-export it with ncu --csv into "
                                 "a file of its own"]
    assert _same(polluted.metrics, clean.metrics.filter(pl.col("launch_id") != launch))
    assert launch not in polluted.launches["launch_id"].to_list()
    assert polluted.launches.height == clean.launches.height - 1


def _with_column_twice(lines: list[str], column: str, edit=lambda index, value: value) -> list[str]:
    header = lines[0].rstrip("\n").split('","')
    at = header.index(column)
    out = []
    for index, line in enumerate(lines):
        fields = line.rstrip("\n").split('","')
        value = fields[at].strip('"')
        copy = edit(index, value) if index >= 2 else value
        out.append('","'.join(fields[:at + 1] + [copy] + fields[at + 1:]) + "\n")
    return out


def test_a_raw_column_written_twice_with_the_same_values_is_read_once(tmp_path):
    path = _polluted(tmp_path, RAW, _with_column_twice(_lines(RAW), "sm__throughput.avg.pct_of_peak_sustained_elapsed"))
    clean, polluted = ingest.read(RAW), ingest.read(path)
    assert _same(polluted.metrics, clean.metrics) and polluted.warnings == []


def test_a_raw_metric_written_twice_with_different_values_is_left_out_with_a_warning(tmp_path):
    metric = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    path = _polluted(tmp_path, RAW, _with_column_twice(_lines(RAW), metric, lambda i, v: "1" if i == 3 else v))
    clean, polluted = ingest.read(RAW), ingest.read(path)
    assert polluted.warnings == [f'{path}:1: the header names column "{metric}" twice, with different values: it '
                                 "is left out; re-export the file with ncu --csv"]
    assert _same(polluted.metrics, clean.metrics.filter(pl.col("metric") != metric))


def test_a_raw_kernel_name_written_twice_with_different_values_is_refused(tmp_path):
    path = _polluted(tmp_path, RAW, _with_column_twice(_lines(RAW), "Kernel Name", lambda i, v: v + "x"))
    with pytest.raises(InputError, match=r'custom_cupy.raw.csv:1: the header names column "Kernel Name" twice, '
                                         "with different values; re-export"):
        ingest.read(path)


def _localized(line: str, thousands: str) -> str:
    """A raw row's numbers as a German (".") or French (" ") locale prints them."""
    def one(match: re.Match) -> str:
        whole, _, fraction = match.group(1).replace(",", "").partition(".")
        grouped = re.sub(r"(?<=\d)(?=(\d{3})+$)", thousands, whole)
        return f'"{grouped}' + (f",{fraction}" if fraction else "") + '"'
    return re.sub(r'"(\d{1,3}(?:,\d{3})*(?:\.\d+)?|\d+\.\d+)"', one, line)


@pytest.mark.parametrize("thousands", [".", " "])
def test_a_raw_row_of_localized_numbers_is_left_out_with_a_warning(tmp_path, thousands):
    lines = _lines(RAW)
    launch = int(lines[3].split('","')[0].strip('"'))
    lines[3] = _localized(lines[3], thousands)
    path = _polluted(tmp_path, RAW, lines)
    clean, polluted = ingest.read(RAW), ingest.read(path)
    assert len(polluted.warnings) == 1
    assert re.fullmatch(rf"{re.escape(str(path))}:4: launch ID {launch}: numbers printed in a locale's format "
                        r"\('[^']+'\), not ncu's: its \d+ numbers with separators are left out; re-export \(or "
                        r"re-capture\) with LC_ALL=C so ncu prints 27,595,520 and 2.62", polluted.warnings[0])
    # the other launches as in the clean file; the localized one keeps only numbers without separators
    assert _same(polluted.metrics.filter(pl.col("launch_id") != launch),
                 clean.metrics.filter(pl.col("launch_id") != launch))
    mine = polluted.metrics.filter(pl.col("launch_id") == launch)["value_text"].drop_nulls()
    assert mine.len() > 0 and not mine.str.contains(r"^[\d., ]*[., ]\d+$").any()


def test_a_raw_page_localized_throughout_is_refused(tmp_path):
    lines = _lines(RAW)
    path = _polluted(tmp_path, RAW, lines[:2] + [_localized(line, ".") for line in lines[2:]])
    with pytest.raises(InputError, match=r"custom_cupy.raw.csv:3: numbers are locale-formatted \('[^']+'\); "
                                         r"re-export \(or re-capture\) with LC_ALL=C"):
        ingest.read(path)


# -------------------------------------------------------------------------------- details page

def test_a_details_row_ncu_wrote_a_message_into_is_read_as_ncu_wrote_it(tmp_path):
    lines = _lines(DETAILS)
    lines[12] = _spliced(lines[12], NCU_MESSAGE)
    clean, polluted = ingest.read(DETAILS), ingest.read(_polluted(tmp_path, DETAILS, lines))
    assert _same(polluted.metrics, clean.metrics) and _same(polluted.launches, clean.launches)
    assert polluted.warnings == []


def test_a_details_value_in_a_locales_format_is_left_out_with_a_warning(tmp_path):
    lines = _lines(DETAILS)
    assert '"DRAM Frequency","Ghz","2.62",' in lines[12]
    lines[12] = lines[12].replace('"2.62"', '"2,62"')
    path = _polluted(tmp_path, DETAILS, lines)
    clean, polluted = ingest.read(DETAILS), ingest.read(path)
    assert polluted.warnings == [f"{path}:13: DRAM Frequency: a number printed in a locale's format ('2,62'), not "
                                 "ncu's: left out; re-export (or re-capture) with LC_ALL=C so ncu prints 27,595,520 "
                                 "and 2.62"]
    changed = polluted.metrics.join(clean.metrics, on=["launch_id", "section", "metric"], how="inner")
    changed = changed.filter(pl.col("value_text").ne_missing(pl.col("value_text_right")))
    assert changed.select("launch_id", "metric", "value_text", "value_text_right").rows() == [
        (1, "DRAM Frequency", None, "2.62")]


# ----------------------------------------------------------------------------------- console text

def test_a_text_row_with_a_byte_that_is_not_utf8_is_left_out_with_a_warning(tmp_path):
    lines = _lines(TEXT)
    row = next(i for i, line in enumerate(lines) if line.startswith("    Avg. Active Threads Per Warp"))
    path = tmp_path / TEXT.name
    data = "".join(lines).encode()
    at = len("".join(lines[:row]).encode()) + 5
    path.write_bytes(data[:at] + b"\xe9" + data[at:])
    clean, polluted = ingest.read(TEXT), ingest.read(path)
    assert polluted.warnings == [f'{path}:{row + 1}: a row of the "Warp State Statistics" table with a byte that is '
                                 "not UTF-8 (left out); the text was edited or re-encoded"]
    assert polluted.metrics.height == clean.metrics.height - 1


def test_a_text_value_in_a_locales_format_is_left_out_with_a_warning(tmp_path):
    lines = _lines(TEXT)
    row = next(i for i, line in enumerate(lines) if re.match(r"    DRAM Frequency +Ghz +\d\.\d+\n", line))
    lines[row] = re.sub(r"(\d)\.(\d+)\n", r"\1,\2\n", lines[row])
    path = _polluted(tmp_path, TEXT, lines)
    clean, polluted = ingest.read(TEXT), ingest.read(path)
    assert len(polluted.warnings) == 1 and polluted.warnings[0].startswith(
        f"{path}:{row + 1}: DRAM Frequency: a number printed in a locale's format (")
    assert polluted.metrics.height == clean.metrics.height - 1


@pytest.mark.parametrize("source, row", [(RAW, 3), (DETAILS, 12)])
def test_a_csv_row_with_a_byte_that_is_not_utf8_is_left_out_with_a_warning(tmp_path, source, row):
    """A Latin-1 byte in a kernel name: that row is left out (a raw page's launch, a details page's
    metric row), the rest of the file read, not the whole file refused."""
    lines = source.read_bytes().split(b"\n")
    launch = int(lines[row].split(b'","')[0].strip(b'"'))
    name = lines[0].decode().split('","').index("Kernel Name")
    fields = lines[row].split(b'","')
    fields[name] = fields[name][:2] + b"\xe9" + fields[name][2:]
    lines[row] = b'","'.join(fields)
    path = tmp_path / source.name
    path.write_bytes(b"\n".join(lines))
    clean, polluted = ingest.read(source), ingest.read(path)
    assert polluted.warnings == [f"{path}:{row + 1}: row left out: it holds a byte that is not UTF-8 (edited, or "
                                 "copied through another encoding?); re-export it with ncu --csv"]
    if source == RAW:
        assert _same(polluted.metrics, clean.metrics.filter(pl.col("launch_id") != launch))
    else:
        assert polluted.metrics.height == clean.metrics.height - 1
        assert _same(polluted.launches, clean.launches)


def test_a_page_whose_every_row_is_left_out_is_refused_saying_why(tmp_path):
    """A raw page of one launch whose row holds a byte that is not UTF-8: nothing usable, refused in
    one line that says why (not "did ncu profile any kernel?")."""
    source = DATA / "verdicts-ncu-h100/gpt2/gpt2.raw.csv"
    lines = source.read_bytes().split(b"\n")
    assert len([line for line in lines if line]) == 3          # header, units, one launch
    lines[2] = lines[2].replace(b'"python3', b'"pyth\xe9on3', 1)
    path = tmp_path / source.name
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(InputError, match=r"gpt2.raw.csv:3: no kernel row could be read: 1 left out, the first "
                                         r"because: row left out: it holds a byte that is not UTF-8"):
        ingest.read(path)
