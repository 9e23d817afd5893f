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
from kwarehouse.ingest import ncu_csv
from kwarehouse.ingest.base import RULE_COLUMNS, ReadResult

RULE_FIELDS = {
    "Rule Name": "rule_name", "Rule Type": "rule_type", "Rule Description": "description",
    "Estimated Speedup Type": "speedup_type", "Estimated Speedup": "speedup_text",
}


class NcuDetailsCsv:
    name: ClassVar[str] = "ncu-details-csv"

    def sniff(self, path: Path, head: bytes) -> bool:
        columns = ncu_csv.header_columns(head)
        return bool(columns) and "Metric Name" in columns and "Metric Value" in columns

    def read(self, path: Path) -> ReadResult:
        table = ncu_csv.read_table(path)
        ncu_csv.require_columns(
            path, table, ["ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"],
            "was it exported with ncu --import REPORT --csv --page details?")
        frame = table.frame.with_row_index("_row")
        if frame.height == 0:
            raise InputError(path, "no metric rows after the header; did ncu profile any kernel?",
                             line=table.header_line)
        ncu_csv.reject_short_rows(path, table, frame, "Metric Value", "_row")
        launch_rows = frame.unique("ID", keep="first", maintain_order=True)
        launches = ncu_csv.launch_frame(launch_rows)
        if launches["launch_id"].null_count():
            index = launches["launch_id"].is_null().arg_true()[0]
            raise InputError(path, 'row without a numeric "ID"', line=table.row_lines[launch_rows["_row"][index]])
        launch_id = pl.col("ID").str.replace_all(",", "").cast(pl.Int64)
        metrics = frame.filter(pl.col("Metric Name") != "").select(
            launch_id.alias("launch_id"),
            pl.col("Section Name").alias("section"),
            pl.col("Metric Name").alias("metric"),
            pl.col("Metric Unit").alias("unit"),
            pl.col("Metric Value").alias("value_text"),
        )
        rules = pl.DataFrame(schema=RULE_COLUMNS)
        if "Rule Name" in frame.columns:
            present = {source: target for source, target in RULE_FIELDS.items() if source in frame.columns}
            rules = (
                frame.filter(pl.col("Rule Name").is_not_null() & (pl.col("Rule Name") != ""))
                .select(launch_id.alias("launch_id"), pl.col("Section Name").alias("section"),
                        *[pl.col(s).alias(t) for s, t in present.items()])
                .with_columns([pl.lit(None, dtype=pl.String).alias(t)
                               for t in RULE_FIELDS.values() if t not in present.values()])
                .select(list(RULE_COLUMNS))
            )
        ncu_csv.reject_locale_numbers(path, metrics["value_text"])
        return ReadResult(path=path, format=self.name, page="details", launches=launches,
                          metrics=metrics, rules=rules,
                          names_mangled=ncu_csv.is_mangled(launches["kernel_name"]))
