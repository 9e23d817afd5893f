"""ncu raw page CSV (`ncu --import R --csv --page raw`): row 1 metric names, row 2 units, a row per launch."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import cells, ncu_csv
from kwarehouse.ingest.base import ReadResult
from kwarehouse.normalize.units import to_base


class NcuRawCsv:
    takes_bytes: ClassVar[bool] = True   # read(path, data): parses bytes ingest already read
    name: ClassVar[str] = "ncu-raw-csv"

    def sniff(self, path: Path, head: bytes) -> bool:
        columns = ncu_csv.header_columns(head)
        return bool(columns) and "Kernel Name" in columns and "Metric Name" not in columns

    def read(self, path: Path, data: bytes | None = None) -> ReadResult:
        # a metric column the header names twice with different values is left out (with a warning)
        table = ncu_csv.read_table(path, data, droppable=ncu_csv.is_metric_column)
        ncu_csv.require_columns(path, table, ["ID", "Kernel Name"],
                                "was it exported with ncu --import REPORT --csv --page raw?")
        frame = table.frame.with_row_index("_row")
        if frame.height == 0 or (frame["ID"][0] or "") != "":
            raise InputError(path, "no units row after the header; expected ncu --csv --page raw output",
                             line=table.header_line + 1)
        units_row, launches_rows = frame.head(1), frame.slice(1)
        if launches_rows.height == 0:
            ncu_csv.reject_all_left_out(path, table, "kernel row")
            raise InputError(path, "no kernel rows after the units row; did ncu profile any kernel?",
                             line=table.header_line + 1)
        # Every raw row has every column: a null in the last column means the row was cut short.
        ncu_csv.reject_short_rows(path, table, launches_rows, frame.columns[-1], "_row")
        metric_names = [c for c in frame.columns if c != "_row" and ncu_csv.is_metric_column(c)]
        launches = ncu_csv.launch_frame(launches_rows)
        if launches["launch_id"].null_count():
            index = launches["launch_id"].is_null().arg_true()[0]
            raise InputError(path, 'kernel row without a numeric "ID"', line=table.row_lines[index + 1])
        units_of = dict(zip(units_row.columns, units_row.row(0)))
        units = {name: units_of[name] or "" for name in metric_names}
        # The metric columns in name order: a batch of raw pages is then in the order the writer
        # clusters the metrics table in (metric, run, launch) and is written without a sort.
        metrics = long_metrics(launches_rows, sorted(metric_names), units)
        warnings = [str(w) for w in table.warnings]
        is_localized = ncu_csv.localized(metrics["value_text"])
        if is_localized.any():
            metrics = without_localized_launches(path, table, launches_rows, metric_names, metrics,
                                                 is_localized.fill_null(False), warnings)
        ordered, count = sorted(metric_names), launches_rows.height
        launch_lines = [table.row_lines[row] for row in launches_rows["_row"]]
        metrics = cells.checked_metrics(
            path, metrics, lambda at: [(launch_lines[p % count], ordered[p // count], table.row_lines[0],
                                        ordered[p // count]) for p in at], warnings)
        gpu = None
        if "device__attribute_display_name" in frame.columns:
            names = launches_rows["device__attribute_display_name"].drop_nulls()
            gpu = names[0] if names.len() else None
        base_units = all(to_base(u)[1] == 1.0 for u in set(units.values()))
        if base_units:
            metrics = ncu_csv.undo_base_unit_errata(metrics)
        return ReadResult(path=path, format=self.name, page="raw", launches=launches, metrics=metrics,
                          names_mangled=ncu_csv.is_mangled(launches["kernel_name"]), gpu_name=gpu,
                          base_units=base_units,
                          warnings=warnings)


def without_localized_launches(path: Path, table: ncu_csv.NcuTable, rows: pl.DataFrame, metric_names: list[str],
                               metrics: pl.DataFrame, is_localized: pl.Series, warnings: list[str]) -> pl.DataFrame:
    """The metrics with the numbers of each launch row that holds a localized number ("1 234,5")
    left out (NULL), one warning per such row: a row is printed in one locale, and in it "1.234" or
    "2,600" - C numbers too - cannot be trusted. A page where every launch is so is refused (ncu ran
    under another locale: re-export it)."""
    bad_ids = set(metrics.filter(is_localized)["launch_id"].unique().to_list())
    bad_rows = rows.filter(pl.col("ID").cast(pl.Int64).is_in(bad_ids))
    first_cells = []
    for row in bad_rows.select("_row", *metric_names).iter_rows():
        cell = next(c for c in row[1:] if c is not None and ncu_csv.LOCALIZED_NUMBER.match(c))
        first_cells.append((row[0], cell))
    if bad_rows.height == rows.height:
        ncu_csv.reject_localized_file(path, table, first_cells[0][1], first_cells[0][0])
    separated = pl.col("launch_id").is_in(list(bad_ids)) & pl.col("value_text").str.contains(ncu_csv.SEPARATED_NUMBER)
    counts = dict(metrics.filter(separated).group_by("launch_id").len().iter_rows())
    for launch_id, (row, cell) in zip(bad_rows["ID"].cast(pl.Int64), first_cells):
        warnings.append(str(InputError(
            path, f"launch ID {launch_id}: numbers printed in a locale's format ({cell!r}), not ncu's: its "
            f"{counts.get(launch_id, 0)} numbers with separators are left out; {ncu_csv.LOCALIZED_FIX}",
            line=table.row_lines[row])))
    return metrics.with_columns(pl.when(separated).then(None).otherwise(pl.col("value_text")).alias("value_text"))


def long_metrics(rows: pl.DataFrame, metric_names: list[str], units: dict[str, str]) -> pl.DataFrame:
    """The page's metric cells as long rows (launch_id, section, metric, unit, value_text), metric by
    metric in column order and launch by launch within one: what unpivot gives, built from the
    columns directly (a page has ~800 metric columns: naming each in a polars expression, and mapping
    ~90,000 metric names to their units, cost more than the cells)."""
    launches, count = rows.get_column("ID").cast(pl.Int64), rows.height
    column_of_row = np.repeat(np.arange(len(metric_names)), count)
    return pl.DataFrame({
        "launch_id": np.tile(launches.to_numpy(), len(metric_names)) if count else launches.clear(),
        "section": pl.repeat(None, count * len(metric_names), dtype=pl.String, eager=True),
        "metric": pl.Series(metric_names, dtype=pl.String).gather(column_of_row),
        "unit": pl.Series([units[name] for name in metric_names], dtype=pl.String).gather(column_of_row),
        "value_text": pl.concat([rows.get_column(name) for name in metric_names]) if metric_names
        else pl.Series([], dtype=pl.String),
    }, schema={"launch_id": pl.Int64, "section": pl.String, "metric": pl.String, "unit": pl.String,
               "value_text": pl.String})
