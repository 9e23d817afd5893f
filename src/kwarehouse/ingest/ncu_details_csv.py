"""ncu details page CSV (`--page details`, also what plain `ncu --csv` prints).

One row per (launch, section, metric), plus rule rows carrying Rule Name/Type/Description and the
estimated speedup. Metric rows are shorter than the header (they end with a trailing comma); exports
made without rules have no Rule columns at all; `--print-metric-name name` puts metric names where
display labels usually are.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import cells, ncu_csv
from kwarehouse.ingest.base import RULE_COLUMNS, ReadResult

RULE_FIELDS = {
    "Rule Name": "rule_name", "Rule Type": "rule_type", "Rule Description": "description",
    "Estimated Speedup Type": "speedup_type", "Estimated Speedup": "speedup_text",
}


class NcuDetailsCsv:
    takes_bytes: ClassVar[bool] = True   # read(path, data): parses bytes ingest already read
    name: ClassVar[str] = "ncu-details-csv"

    def sniff(self, path: Path, head: bytes) -> bool:
        columns = ncu_csv.header_columns(head)
        return bool(columns) and "Metric Name" in columns and "Metric Value" in columns

    def read(self, path: Path, data: bytes | None = None) -> ReadResult:
        table = ncu_csv.read_table(path, data)
        ncu_csv.require_columns(
            path, table, ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"],
            "was it exported with ncu --import REPORT --csv --page details?")
        frame = table.frame.with_row_index("_row")
        if frame.height == 0:
            ncu_csv.reject_all_left_out(path, table, "metric row")
            raise InputError(path, "no metric rows after the header; did ncu profile any kernel?",
                             line=table.header_line)
        ncu_csv.reject_short_rows(path, table, frame, "Metric Value", "_row")
        last_launch_starts = table.row_lines[frame.filter(pl.col("ID") == frame["ID"][-1])["_row"][0]]
        if not table.left_out_lines or max(table.left_out_lines) < last_launch_starts:
            # (a row left out of the last launch with a warning made it shorter: it was not cut)
            reject_cut_last_launch(path, table, frame)
            reject_cut_last_section(path, table, frame)
        launch_rows = frame.unique("ID", keep="first", maintain_order=True)
        launches = ncu_csv.launch_frame(launch_rows)
        if launches["launch_id"].null_count():
            index = launches["launch_id"].is_null().arg_true()[0]
            raise InputError(path, 'row without a numeric "ID"', line=table.row_lines[launch_rows["_row"][index]])
        launch_id = pl.col("ID").str.replace_all(",", "").cast(pl.Int64)
        # lazily: the filters then copy only the columns selected, not the page's long NVTX cells
        metrics = frame.lazy().filter(pl.col("Metric Name") != "").select(
            launch_id.alias("launch_id"),
            pl.col("Section Name").alias("section"),
            pl.col("Metric Name").alias("metric"),
            pl.col("Metric Unit").alias("unit"),
            pl.col("Metric Value").alias("value_text"),
        ).collect()
        rules = pl.DataFrame(schema=RULE_COLUMNS)
        if "Rule Name" in frame.columns:
            present = {source: target for source, target in RULE_FIELDS.items() if source in frame.columns}
            rules = (
                frame.lazy().filter(pl.col("Rule Name").is_not_null() & (pl.col("Rule Name") != ""))
                .select(launch_id.alias("launch_id"), pl.col("Section Name").alias("section"),
                        *[pl.col(s).alias(t) for s, t in present.items()])
                .with_columns([pl.lit(None, dtype=pl.String).alias(t)
                               for t in RULE_FIELDS.values() if t not in present.values()])
                # ncu's rule messages hold stray double spaces ("achieved  close to 0%"), which its
                # console text loses where it wraps a line: one space, so both give the same rule
                .with_columns(pl.col("description").str.replace_all(" {2,}", " "))
                .select(list(RULE_COLUMNS))
                .collect()
            )
        warnings = [str(w) for w in table.warnings]
        is_localized = ncu_csv.localized(metrics["value_text"])
        if is_localized.any():
            metrics = without_localized_cells(path, table, frame, metrics, is_localized.fill_null(False), warnings)
        # the frame rows of the metric rows, in the order `metrics` has them
        metric_rows = frame.lazy().filter(pl.col("Metric Name") != "").select("_row")
        metrics = cells.checked_metrics(
            path, metrics, lambda at: [(table.row_lines[row], "Metric Value", table.row_lines[row], "Metric Unit")
                                       for row in metric_rows.collect()["_row"].gather(at)], warnings)
        return ReadResult(path=path, format=self.name, page="details", launches=launches,
                          metrics=metrics, rules=rules,
                          names_mangled=ncu_csv.is_mangled(launches["kernel_name"]), warnings=warnings)


def without_localized_cells(path: Path, table: ncu_csv.NcuTable, frame: pl.DataFrame, metrics: pl.DataFrame,
                            is_localized: pl.Series, warnings: list[str]) -> pl.DataFrame:
    """The metrics with each value printed in a locale's format ("1.234,5", "2,62") left out (NULL),
    one warning per cell; a page where every launch has such values is refused (ncu ran under
    another locale: re-export it)."""
    # the frame rows of the metric rows, in the order `metrics` has them
    rows = frame.filter(pl.col("Metric Name") != "")["_row"].filter(is_localized)
    cells = metrics["value_text"].filter(is_localized)
    if metrics.filter(is_localized)["launch_id"].n_unique() == metrics["launch_id"].n_unique():
        ncu_csv.reject_localized_file(path, table, cells[0], rows[0])
    for row, cell, metric in zip(rows, cells, metrics["metric"].filter(is_localized)):
        warnings.append(str(InputError(path, f"{metric}: a number printed in a locale's format ({cell!r}), not "
                                       f"ncu's: left out; {ncu_csv.LOCALIZED_FIX}", line=table.row_lines[row])))
    return metrics.with_columns(pl.when(is_localized).then(None).otherwise(pl.col("value_text")).alias("value_text"))


def reject_cut_last_launch(path: Path, table: ncu_csv.NcuTable, frame: pl.DataFrame) -> None:
    """A file cut just after a row can end inside its last launch's block: refuse it when that launch
    has only a leading part of the (section, metric) rows that every other launch has.

    ncu prints the same sections and metrics, in the same order, for every launch of a report on one
    kind of GPU (true of every real details page seen: 11 files, up to 120 launches each), so a
    complete file never has a last launch whose metric rows are a strict prefix of all the others'.
    Launches on a GPU of another compute capability are not compared (sections can differ by
    architecture). Undetectable: a file of one launch, and a cut among the last launch's rule rows.
    """
    metrics = frame.lazy().filter(pl.col("Metric Name").is_not_null() & (pl.col("Metric Name") != "")).select(
        "ID", "Section Name", "Metric Name", *(["CC"] if "CC" in frame.columns else [])).collect()
    if metrics.height == 0:
        return
    # A strict prefix is shorter than what it is a prefix of: where the last launch has as many metric
    # rows as any other it is compared with (every complete file), the rows need not be compared.
    counts = metrics.group_by("ID", maintain_order=True).agg(
        *([pl.col("CC").first()] if "CC" in frame.columns else []), pl.len().alias("_rows"))
    if counts.height < 2:
        return
    last_count = counts.row(-1, named=True)
    compared = counts.slice(0, counts.height - 1)
    if "CC" in frame.columns and last_count["CC"] is not None:
        compared = compared.filter(pl.col("CC") == last_count["CC"])
    if compared.height and last_count["_rows"] >= compared["_rows"].max():
        return
    keys = [pl.col("ID")] + ([pl.col("CC")] if "CC" in frame.columns else [])
    per_launch = (metrics.group_by("ID", maintain_order=True)
                  .agg(*[k.first().alias(f"_{i}") for i, k in enumerate(keys[1:])],
                       pl.concat_str("Section Name", "Metric Name", separator="\x1f").alias("_rows"))
                  )
    if per_launch.height < 2:
        return
    last = per_launch.row(-1, named=True)
    others = per_launch.slice(0, per_launch.height - 1)
    if "CC" in frame.columns:
        others = others.filter(pl.col("_0") == last["_0"]) if last["_0"] is not None else others
    lists = {tuple(rows) for rows in others["_rows"].to_list()}
    if len(lists) != 1:
        return
    full = next(iter(lists))
    mine = tuple(last["_rows"])
    if len(mine) < len(full) and full[:len(mine)] == mine:
        last_row = frame.filter(pl.col("ID") == last["ID"])["_row"][-1]
        raise InputError(path, f"the last launch (ID {last['ID']}) has {len(mine)} of the {len(full)} metric "
                         "rows every other launch has: the file was cut short (still being copied, or "
                         "truncated?); wait for the copy to finish or re-export it with ncu --csv --page details",
                         line=table.row_lines[last_row])


def reject_cut_last_section(path: Path, table: ncu_csv.NcuTable, frame: pl.DataFrame) -> None:
    """A file cut inside its last section: refused when the last launch's last section holds a
    leading part of the metric rows ncu writes in that section (ncu_section_rows.csv: ncu writes
    each section's rows whole) - what finds a cut in a file of one launch, where no other launch
    shows what a whole one holds. A rule row after the section's metric rows shows the rows ended
    (ncu writes a section's rules after its metrics). Undetectable: a cut between two sections, or
    among the last rule rows; a section kwh has no layout of (a newer ncu's, --metrics)."""
    last = frame.filter(pl.col("ID") == frame["ID"][-1])
    metric_rows = last.filter(pl.col("Metric Name").is_not_null() & (pl.col("Metric Name") != ""))
    if metric_rows.height == 0 or metric_rows["_row"][-1] != last["_row"][-1]:
        return                  # rows after the last metric row (its rules): the section ended
    sections = metric_rows["Section Name"]
    section = sections[-1]
    # the last run of rows of that section
    start = metric_rows.height
    while start > 0 and sections[start - 1] == section:
        start -= 1
    metrics = metric_rows["Metric Name"].slice(start).to_list()
    whole = ncu_csv.section_cut_short(section, metrics)
    if whole is not None:
        raise InputError(path, f'the last launch (ID {last["ID"][0]}) ends {len(metrics)} rows into its "{section}" '
                         f"section, where ncu writes {whole}: the file was cut short (still being copied, or "
                         "truncated?); wait for the copy to finish or re-export it with ncu --csv --page details",
                         line=table.row_lines[metric_rows["_row"][-1]])
