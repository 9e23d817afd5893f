"""Normalize what the readers return into warehouse rows: a tuple of named pure steps.

Two kinds of steps, each a small pure function over polars frames:
  SOURCE_STEPS run on the metric rows of one export file (labels to metric names, base units);
  RUN_STEPS run on one run's merged frames (headline kernel columns from the long metrics).
Rules that are data (label map, units, headline candidates) live in files next to this module.
"""

from __future__ import annotations

import csv
import functools
import tomllib
from importlib import resources

import polars as pl

from kwarehouse.normalize import units

# A numeric ncu cell: optional sign, digits with optional thousands separators ("1,123"),
# optional decimals and exponent. Anything else ("n/a", "no data", "(96, 1, 1)") stays text.
NUMBER = r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$"
# When two exports of one report give the same metric, keep the raw page's (it has more digits).
PAGE_PRIORITY = {"raw": 0, "details": 1}
# A generic section name that ncu uses for --metrics the user added; a named section is preferred.
COMMAND_LINE_SECTION = "Command line profiler metrics"


def _data(name: str) -> str:
    return resources.files("kwarehouse.normalize").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def metric_labels() -> dict[tuple[str, str], str]:
    """(details section, display label) -> ncu metric name, from metric_labels.csv."""
    return {(r["section"], r["label"]): r["metric"] for r in csv.DictReader(_data("metric_labels.csv").splitlines())}


@functools.cache
def headline_metrics() -> dict[str, list[list[str]]]:
    """kernels column -> ordered candidates, each a list of metric names to add up."""
    spec = tomllib.loads(_data("headline_metrics.toml"))
    return {column: [[m.strip() for m in candidate.split("+")] for candidate in entry["metrics"]]
            for column, entry in spec.items()}


def map_metric_labels(metrics: pl.DataFrame) -> pl.DataFrame:
    """Details pages name metrics by display label ("DRAM Throughput"): map them to ncu metric names."""
    table = metric_labels()
    mapping = pl.DataFrame(
        {"section": [s for s, _ in table], "metric": [l for _, l in table], "_name": list(table.values())},
        schema={"section": pl.String, "metric": pl.String, "_name": pl.String})
    joined = metrics.join(mapping, on=["section", "metric"], how="left", nulls_equal=False)
    return joined.with_columns(
        pl.when(pl.col("_name").is_not_null()).then(pl.col("metric")).alias("label"),
        pl.coalesce("_name", "metric").alias("metric"),
    ).drop("_name")


def to_base_units(metrics: pl.DataFrame) -> pl.DataFrame:
    """Parse numeric cells (thousands separators allowed) and convert them to base units."""
    unit_values = metrics["unit"].fill_null("").unique().to_list()
    conversions = {u: units.to_base(u) for u in unit_values}
    text = pl.col("value_text").str.strip_chars()
    is_number = text.str.contains(NUMBER)
    number = text.str.replace_all(",", "").cast(pl.Float64, strict=False)
    unit = pl.col("unit").fill_null("")
    return metrics.with_columns(
        pl.when(is_number).then(number * unit.replace_strict(
            {u: f for u, (_, f) in conversions.items()}, return_dtype=pl.Float64)).alias("value"),
        unit.replace_strict({u: b for u, (b, _) in conversions.items()}, return_dtype=pl.String).alias("unit"),
        pl.when(is_number).then(None).otherwise(pl.col("value_text")).alias("value_text"),
    )


SOURCE_STEPS = (map_metric_labels, to_base_units)


def normalize_source_metrics(metrics: pl.DataFrame, page: str) -> pl.DataFrame:
    """Apply SOURCE_STEPS to one export's metric rows and tag them with their page."""
    for step in SOURCE_STEPS:
        metrics = step(metrics)
    return metrics.with_columns(pl.lit(page).alias("source_page")).select(
        "launch_id", "section", "metric", "label", "unit", "value", "value_text", "source_page")


def merge_metrics(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per (launch, metric) from several exports of one report: the raw page's value wins,
    the details page's section and label are kept."""
    allrows = pl.concat(frames, how="vertical_relaxed")
    ranked = allrows.with_columns(
        pl.col("source_page").replace_strict(PAGE_PRIORITY, default=9, return_dtype=pl.Int32).alias("_page"),
        (pl.col("section").is_null() | (pl.col("section") == COMMAND_LINE_SECTION)).alias("_generic"),
    )
    described = (ranked.filter(pl.col("section").is_not_null())
                 .sort("_generic", maintain_order=True)
                 .unique(["launch_id", "metric"], keep="first", maintain_order=True)
                 .select("launch_id", "metric", pl.col("section").alias("_section"),
                         pl.col("label").alias("_label")))
    best = ranked.sort("_page", maintain_order=True).unique(["launch_id", "metric"], keep="first",
                                                             maintain_order=True)
    return (best.join(described, on=["launch_id", "metric"], how="left")
            .with_columns(pl.coalesce("_section", "section").alias("section"),
                          pl.coalesce("label", "_label").alias("label"))
            .select("launch_id", "section", "metric", "label", "unit", "value", "value_text", "source_page")
            .sort("launch_id", "metric"))


def headline_columns(metrics: pl.DataFrame) -> pl.DataFrame:
    """The kernels table's typed metric columns, one row per launch, from the long metric rows."""
    spec = headline_metrics()
    wanted = sorted({m for candidates in spec.values() for c in candidates for m in c})
    wide = (metrics.filter(pl.col("metric").is_in(wanted) & pl.col("value").is_not_null())
            .pivot(on="metric", index="launch_id", values="value", aggregate_function="first"))
    launches = metrics.select("launch_id").unique().join(wide, on="launch_id", how="left")
    exprs = []
    for column, candidates in spec.items():
        options = []
        for parts in candidates:
            if all(p in launches.columns for p in parts):
                total = pl.sum_horizontal([pl.col(p) for p in parts])
                options.append(pl.when(pl.all_horizontal([pl.col(p).is_not_null() for p in parts]))
                               .then(total))
        exprs.append((pl.coalesce(options) if options else pl.lit(None, dtype=pl.Float64)).alias(column))
    counts = metrics.group_by("launch_id").len("metric_count")
    return launches.select("launch_id", *exprs).join(counts, on="launch_id", how="left")
