"""Cells at the edges of what a value can be (issue 32, item 6): a number no float holds or that is
not finite (1e400, inf, nan), a unit kwh cannot convert (parsec), an integer beyond 64 bits, a time
past 2262 (where int64 nanoseconds end), a negative duration. Such a cell is never stored as it reads - an inf duration
poisons every sum, a value in an unknown unit would be taken for the metric's usual one - and never
ends a read in a builder's error: it is stored as NULL (a row whose time is unusable is left out),
with one warning naming the file, the line and the column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.normalize import units

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Columns that hold a time in nanoseconds: past INT64_MAX is past 2262-04-11 (since the epoch).
TIME_COLUMNS = ("start_ns", "timestamp_ns")
NOT_FINITE = "is not a finite number (it would make every sum it enters inf or nan)"
TOO_LARGE = "does not fit a 64-bit integer"
PAST_2262 = "is a time past 2262, where 64-bit nanoseconds end"
# Columns that hold how long something took: never negative (an end before its start).
DURATION_COLUMNS = ("duration_ns",)
NEGATIVE = "is a negative duration (an end before its start)"


def non_finite(cells: pl.Series) -> pl.Series | None:
    """Which text cells are numbers that are not finite once parsed: inf, -inf, nan, and numbers past
    the largest float (1e400); None where there is none (the usual page). A null cell and text that
    is no number ("n/a") are not. (A cast, not a regex: a case-blind regex over every cell cost 6x
    the read of a details page; on a raw page of 90,000 cells this costs ~4 ms of CPU.)"""
    number = cells.cast(pl.Float64, strict=False)
    spaced = cells.str.contains(" ", literal=True).fill_null(False)
    if spaced.any():        # padded numbers (ncu pads none): read stripped, as normalize.to_base_units reads them
        number = number.scatter(spaced.arg_true(), cells.filter(spaced).str.strip_chars().cast(pl.Float64, strict=False))
    if not (number.is_infinite().any() or number.is_nan().any()):
        return None
    return (number.is_infinite() | number.is_nan()).fill_null(False)


def unknown_unit(unit_cells: pl.Series) -> pl.Series | None:
    """Which unit cells name a unit kwh cannot convert (normalize/units.csv), or None where every one
    is known (the usual page): an empty unit is known."""
    names = unit_cells.unique().drop_nulls().to_list()
    unknown = [name for name in names if not units.is_known(name)]
    return unit_cells.is_in(unknown).fill_null(False) if unknown else None


def is_number_text(cells: pl.Series) -> pl.Series:
    """Which text cells are numbers (thousands separators allowed)."""
    return cells.str.replace_all(",", "", literal=True).str.strip_chars().cast(pl.Float64, strict=False).is_not_null()


def metric_cell_problem(value: str, unit: str) -> tuple[str, str] | None:
    """Why one metric cell (as printed, with its unit) cannot be stored as it reads: ("value" or
    "unit", why), or None."""
    try:
        number = float(value.replace(",", "").strip())
    except ValueError:
        return None                 # text, not a number: kept as text
    if not math.isfinite(number):
        return "value", f"{value!r} {NOT_FINITE}"
    if not units.is_known(unit):
        return "unit", unknown_unit_reason(unit, value)
    return None


def unknown_unit_reason(unit: str, value: str | None = None) -> str:
    what = f"{value!r} is in" if value is not None else "values are in"
    return (f"{what} unit {unit!r}, which kwh cannot convert (not a unit ncu prints: edited, or a newer "
            "ncu's?)")


def checked_metrics(path: Path, metrics: pl.DataFrame,
                    where: Callable[[list[int]], list[tuple[int | None, str, int | None, str]]],
                    warnings: list[str]) -> pl.DataFrame:
    """Long metric rows (launch_id, metric, unit, value_text) with each value that is not finite, or
    in a unit kwh cannot convert, stored as NULL: one warning each, naming the line and the column
    (of the value, or of the unit) that `where` gives for those row positions: (the value's line,
    its column, the unit's line, its column)."""
    values = metrics["value_text"]
    bad_number = non_finite(values)
    bad_unit = unknown_unit(metrics["unit"])
    if bad_number is None and bad_unit is None:
        return metrics
    if bad_number is None:
        bad_number = pl.Series([False] * values.len())
    bad = bad_number if bad_unit is None else bad_number | (bad_unit & is_number_text(values))
    if not bad.any():
        return metrics
    positions = bad.arg_true().to_list()
    for position, (value_line, value_column, unit_line, unit_column) in zip(positions, where(positions)):
        cell, unit, metric = values[position], metrics["unit"][position] or "", metrics["metric"][position]
        if bad_number[position]:
            line, column, why = value_line, value_column, f"{cell!r} {NOT_FINITE}"
        else:
            line, column, why = unit_line, unit_column, unknown_unit_reason(unit, cell)
        warnings.append(str(InputError(path, f'column "{column}" ({metric}, launch ID {metrics["launch_id"][position]})'
                                       f": {why}: stored as NULL", line=line)))
    return metrics.with_columns(pl.when(bad).then(None).otherwise(pl.col("value_text")).alias("value_text"))


def integer_problem(value, column: str, time_offset: int = 0) -> str | None:
    """Why a value for an integer column (an int, float or Decimal) cannot be stored, or None.
    time_offset: what a time column's values are relative to (an nsys session's start, since the
    epoch): the time they stand for must not pass 2262 either."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (float, Decimal)):
        if not (math.isfinite(value) if isinstance(value, float) else value.is_finite()):
            return f"{value} {NOT_FINITE}"
        if value != int(value):
            return None             # polars says what it says of a fraction where it did before
        value = int(value)
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"{value} {PAST_2262 if column in TIME_COLUMNS and value > 0 else TOO_LARGE}"
    if column in DURATION_COLUMNS and isinstance(value, int) and value < 0:
        return f"{value} {NEGATIVE}"
    if time_offset and column in TIME_COLUMNS and isinstance(value, int) and value + time_offset > INT64_MAX:
        return f"{value} ns after the session's start {PAST_2262}"
    return None


def float_problem(value) -> str | None:
    if isinstance(value, (float, Decimal)) and not (math.isfinite(value) if isinstance(value, float)
                                                    else value.is_finite()):
        return f"{value} {NOT_FINITE}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1 << 1023:
        return f"{value} {NOT_FINITE}"
    return None


def checked_rows(path: Path, rows: list[tuple], columns: dict, first: int, required: Sequence[str],
                 where: Callable[[tuple], tuple[int | None, str]], warnings: list[str],
                 time_offset: int = 0, rows_of_a_line: str | None = None) -> list[tuple]:
    """Rows (values of `columns` from field `first` on) with each value an Int64 or Float64 column
    cannot hold stored as None, one warning a row; a row where it is a `required` column's (a
    timeline's start or duration) is left out with its warning. `where(row)`: (line, what names the
    row) for the warning. rows_of_a_line: what the rows of one line are called, where a line gives
    several rows (a telemetry line's samples): a line whose `required` value is unusable then gets
    one warning, not one a row."""
    kinds = [(i + first, name, dtype) for i, (name, dtype) in enumerate(columns.items())
             if dtype in (pl.Int64, pl.Float64)]
    out = []
    warned_lines: set = set()
    for row in rows:
        problems = []
        for index, name, dtype in kinds:
            value = row[index]
            why = integer_problem(value, name, time_offset) if dtype == pl.Int64 else float_problem(value)
            if why:
                problems.append((index, name, why))
        if not problems:
            out.append(row)
            continue
        line, label = where(row)
        fatal = [p for p in problems if p[1] in required]
        outcome = "the row is left out" if fatal else "stored as NULL"
        what = "; ".join(f"{name}: {why}" for _, name, why in problems)
        if fatal and rows_of_a_line:
            if (line, what) not in warned_lines:
                warned_lines.add((line, what))
                warnings.append(str(InputError(path, f"{what}: the line's {rows_of_a_line} are left out", line=line)))
        else:
            warnings.append(str(InputError(path, f"{label}, {what}: {outcome}", line=line)))
        if fatal:
            continue
        fixed = list(row)
        for index, _, _ in problems:
            fixed[index] = None
        out.append(tuple(fixed))
    return out


def has_negative_duration(frame: pl.DataFrame) -> bool:
    """Whether a built frame holds a negative duration (checked_rows then takes its rows out)."""
    return any(column in frame.columns and (frame[column].min() or 0) < 0 for column in DURATION_COLUMNS)


def checked_frame(path: Path, rows: list[tuple], columns: dict, first: int, required: Sequence[str],
                  where: Callable[[tuple], tuple[int | None, str]], warnings: list[str],
                  rows_of_a_line: str | None = None) -> pl.DataFrame:
    """base.frame_of_rows, where a value no Int64 or Float64 column holds (inf, nan, beyond 64 bits,
    a time past 2262) is stored as NULL, or its row left out where the column is `required`, with a
    warning each (checked_rows), not a builder's error or an inf in the warehouse. Rows are checked
    one by one only when the frame cannot be built or holds a value that is not finite."""
    from kwarehouse.ingest import base
    floats = [name for name, dtype in columns.items() if dtype == pl.Float64]
    try:
        frame = base.frame_of_rows(rows, columns, first)
    except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
        frame = None
    if frame is not None and not (floats and frame.select(
            pl.any_horizontal([pl.col(c).is_infinite() | pl.col(c).is_nan() for c in floats]).any()).item()) \
            and not has_negative_duration(frame):
        return frame
    return base.frame_of_rows(checked_rows(path, rows, columns, first, required, where, warnings,
                                           rows_of_a_line=rows_of_a_line), columns, first)


# What polars and Python say of a value no column holds (their words, matched to say it in kwh's).
_BUILDER_VALUE = re.compile(r"could not append value: (\S+) of type: i128|int value too large for Polars integer "
                            r"types: (\d+)|found value of type (?:Float64|Int128): (\S+)|conversion from `f64` to `i64` failed"
                            r".*?\[(\S+?)\]")


def unstorable_value(exc: BaseException) -> str | None:
    """The value an exception says no column could hold (a number beyond 64 bits, inf), worded for a
    user ("a number beyond 64 bits (18446744073709551616)"); None for any other exception."""
    text = str(exc)
    if isinstance(exc, OverflowError) and "infinity" in text:
        return "a number that is not finite (inf)"
    found = _BUILDER_VALUE.search(text)
    if found is None:
        return None
    value = next(group for group in found.groups() if group)
    if value.lower().lstrip("+-") in ("inf", "nan"):
        return f"a number that is not finite ({value})"
    return f"a number beyond 64 bits ({value[:40]})"
