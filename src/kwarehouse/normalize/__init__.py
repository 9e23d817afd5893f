"""Normalize what the readers return into warehouse rows: tuples of named pure steps.

Each step is a small pure function over polars frames:
  SOURCE_STEPS run on the metric rows of one export file: details labels to metric names, values to
    base units, every metric name to its canonical name (metric_catalog.csv);
  KERNEL_STEPS run on one run's kernel rows: name launches exported without one, demangle, identity
    (identity.py), framework-op context from NVTX (nvtx.py), library, op class and math dtype (classify.py);
  headline_columns and derived.derived_columns turn the long metrics into typed kernel columns.
Rules that are data (label map, units, metric catalog, identity and classification rules) live in
files next to this module; `kwh renormalize` re-applies all of it to runs already in a warehouse.
"""

from __future__ import annotations

import csv
import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import polars as pl

from kwarehouse.normalize import classify, derived, identity, nvtx, op_flops, peaks, units

# A numeric ncu cell: optional sign, digits with optional thousands separators ("1,123"),
# optional decimals and exponent. Anything else ("n/a", "no data", "(96, 1, 1)") stays text.
NUMBER = r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$"
# NUMBER with blanks around it: a cell that is a number once stripped.
PADDED_NUMBER = r"^\s*" + NUMBER[1:-1] + r"\s*$"
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
    unit = metrics["unit"].fill_null("")
    names = unit.unique()
    conversions = [units.to_base(u) for u in names.to_list()]
    # each row's unit as its position in `names`: one lookup per row serves both the factor and the base unit
    at = (unit.replace_strict(names, pl.int_range(names.len(), dtype=pl.UInt32, eager=True), return_dtype=pl.UInt32)
          if names.len() else pl.Series([], dtype=pl.UInt32))
    cells = metrics["value_text"]
    is_number = cells.str.contains(PADDED_NUMBER)
    # ncu pads no cell: only a padded number (rare) is stripped, alone (stripping every cell copied them all)
    number = cells.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)
    padded = is_number & number.is_null()
    if padded.any():
        number = number.scatter(padded.arg_true(), cells.filter(padded).str.strip_chars()
                                .str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False))
    return metrics.with_columns(
        pl.when(is_number).then(number * pl.Series([f for _, f in conversions], dtype=pl.Float64).gather(at))
        .alias("value"),
        pl.Series([b for b, _ in conversions], dtype=pl.String).gather(at).alias("unit"),
        pl.when(is_number).then(None).otherwise(cells).alias("value_text"),
    )


@functools.cache
def metric_catalog() -> pl.DataFrame:
    """metric_catalog.csv: canonical metric, unit, aliases, description; one row per metric."""
    lines = [line for line in _data("metric_catalog.csv").splitlines() if not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    return pl.DataFrame(rows, schema={"metric": pl.String, "unit": pl.String, "aliases": pl.String,
                                      "description": pl.String})


@functools.cache
def metric_aliases() -> dict[str, str]:
    """Every known name of a metric (canonical ones included) -> its canonical name."""
    mapping = {}
    for row in metric_catalog().iter_rows(named=True):
        mapping[row["metric"]] = row["metric"]
        for alias in filter(None, (a.strip() for a in (row["aliases"] or "").split(";"))):
            mapping[alias] = row["metric"]
    return mapping


def canonical_metric_names(metrics: pl.DataFrame) -> pl.DataFrame:
    """Rename metrics to their canonical names; the name as exported stays in source_metric.
    Metrics the catalog does not know keep their own name."""
    source = pl.col("source_metric") if "source_metric" in metrics.columns else pl.col("metric")
    metrics = metrics.with_columns(source.alias("source_metric"))
    # only the names present that the catalog renames (few: a page has ~900 distinct names)
    aliases = metric_aliases()
    renames = {name: aliases[name] for name in metrics["source_metric"].unique().drop_nulls().to_list()
               if aliases.get(name, name) != name}
    if not renames:
        return metrics.with_columns(pl.col("source_metric").alias("metric"))
    renamed = metrics.with_columns(pl.col("source_metric").replace(renames).alias("metric"))
    # An export that has both names of a metric keeps both: the alias stays under its own name.
    # (per launch of one export: a batch of several exports numbers them in BATCH_MEMBER)
    scope = ["launch_id", BATCH_MEMBER] if BATCH_MEMBER in metrics.columns else "launch_id"
    clash = (pl.col("metric") != pl.col("source_metric")) & (
        pl.col("metric").is_in(pl.col("source_metric").implode()).over(scope))
    return renamed.with_columns(pl.when(clash).then(pl.col("source_metric")).otherwise(pl.col("metric"))
                                .alias("metric"))


# Several runs normalized in one pass (build/batch.py's batches) carry which run and which export a row
# came from in these columns; steps whose answer is per run or per export group by them.
BATCH_RUN, BATCH_MEMBER = "_batch_run", "_batch_member"

SOURCE_STEPS = (map_metric_labels, to_base_units, canonical_metric_names)
METRIC_COLUMNS = ("launch_id", "section", "metric", "source_metric", "label", "unit", "value",
                  "value_text", "source_page")


def normalize_source_metrics(metrics: pl.DataFrame, page: str) -> pl.DataFrame:
    """Apply SOURCE_STEPS to one export's metric rows and tag them with their page."""
    for step in SOURCE_STEPS:
        metrics = step(metrics)
    return metrics.with_columns(pl.lit(page).alias("source_page")).select(*METRIC_COLUMNS)


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
            .select(*METRIC_COLUMNS)
            .sort("launch_id", "metric"))


def normalize_batch_metrics(metrics: pl.DataFrame, pages: list[str], frames: list[pl.DataFrame]) -> pl.DataFrame:
    """normalize_source_metrics for the metric rows of several exports concatenated (`frames`, of pages
    `pages`; their rows numbered by export in BATCH_MEMBER). Rows without a section (raw pages) have
    no display label to map."""
    if metrics["section"].null_count() == metrics.height:
        metrics = metrics.with_columns(pl.lit(None, dtype=pl.String).alias("label"))
    else:
        metrics = map_metric_labels(metrics)
    for step in SOURCE_STEPS[1:]:
        metrics = step(metrics)
    if len(set(pages)) == 1:
        page = pl.lit(pages[0], dtype=pl.String)
    else:
        page = pl.Series([p for p, f in zip(pages, frames) for _ in range(f.height)], dtype=pl.String)
    return metrics.with_columns(page.alias("source_page")).select(*METRIC_COLUMNS)


def merge_ordered_metrics(pages: list[pl.DataFrame]) -> pl.DataFrame:
    """merge_metrics for the rows of exports grouped by page, `pages` in PAGE_PRIORITY order (each
    launch's and metric's rows in build_run's order), without sorting anything; the answer's row order
    is not defined (the Parquet writer orders the rows). (launch, metric) is packed into one integer
    key, and the first page's rows, usually unique already, are not copied."""
    allrows = pl.concat(pages, how="vertical_relaxed") if len(pages) > 1 else pages[0]
    if allrows.height == 0 or allrows["metric"].null_count() or allrows["launch_id"].null_count():
        return merge_metrics([allrows])
    codes = allrows["metric"].cast(pl.Categorical).to_physical().cast(pl.Int64)
    width = max(1, int(codes.max()).bit_length())
    if int(allrows["launch_id"].max()).bit_length() + width > 62 or allrows["launch_id"].min() < 0:
        return merge_metrics([allrows])
    keys = allrows["launch_id"] * (1 << width) + codes
    first, rest = pages[0], pages[1:]
    first_keys = keys.slice(0, first.height)
    unique = first_keys.is_first_distinct()
    best = [first if unique.all() else first.filter(unique)]
    kept_keys = [first_keys if unique.all() else first_keys.filter(unique)]
    if rest:
        others = pl.concat(rest, how="vertical_relaxed")
        other_keys = keys.slice(first.height)
        keep = other_keys.is_first_distinct() & ~other_keys.is_in(first_keys.implode())
        best.append(others.filter(keep))
        kept_keys.append(other_keys.filter(keep))
    best = pl.concat(best, how="vertical_relaxed")
    best_keys = pl.concat(kept_keys)
    sectioned = allrows["section"].is_not_null()
    if not sectioned.any():
        return best.select(*METRIC_COLUMNS)
    generic = sectioned & (allrows["section"] == COMMAND_LINE_SECTION)
    described = pl.DataFrame({"_key": keys, "_section": allrows["section"], "_label": allrows["label"]})
    described = pl.concat([described.filter(sectioned & ~generic), described.filter(generic)])
    described = described.filter(described["_key"].is_first_distinct())
    # each kept row's described row (one lookup serves both columns; null where none)
    at = best_keys.replace_strict(described["_key"], pl.int_range(described.height, dtype=pl.UInt32, eager=True),
                                  default=None, return_dtype=pl.UInt32)
    section, label = described["_section"].gather(at), described["_label"].gather(at)
    return best.with_columns(pl.coalesce(pl.lit(section), "section").alias("section"),
                             pl.coalesce("label", pl.lit(label)).alias("label")).select(*METRIC_COLUMNS)


def wide_metrics(metrics: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """One row per launch, one column per metric of `names` present (numeric values only)."""
    wide = (metrics.filter(pl.col("metric").is_in(names) & pl.col("value").is_not_null())
            .pivot(on="metric", index="launch_id", values="value", aggregate_function="first"))
    return metrics.select("launch_id").unique().join(wide, on="launch_id", how="left")


def headline_columns(metrics: pl.DataFrame, counted: pl.DataFrame | None = None) -> pl.DataFrame:
    """The kernels table's typed metric columns, one row per launch, from the long metric rows.
    counted: the rows whose number per launch is metric_count (default: `metrics`; kernel_rows
    reads the headline from kernel_metric_rows' few rows and counts all of them)."""
    spec = headline_metrics()
    launches = wide_metrics(metrics, sorted({m for candidates in spec.values() for c in candidates for m in c}))
    exprs = []
    for column, candidates in spec.items():
        options = []
        for parts in candidates:
            if all(p in launches.columns for p in parts):
                total = pl.sum_horizontal([pl.col(p) for p in parts])
                options.append(pl.when(pl.all_horizontal([pl.col(p).is_not_null() for p in parts]))
                               .then(total))
        exprs.append((pl.coalesce(options) if options else pl.lit(None, dtype=pl.Float64)).alias(column))
    counts = (metrics if counted is None else counted).group_by("launch_id").len("metric_count")
    return launches.select("launch_id", *exprs).join(counts, on="launch_id", how="left")


CC_ATTRIBUTES = ("device__attribute_compute_capability_major", "device__attribute_compute_capability_minor")


def compute_capability_from_attributes(metrics: pl.DataFrame) -> pl.DataFrame:
    """launch_id, "6.1" from the device attributes, for exports without a CC column (older ncu)."""
    wide = wide_metrics(metrics, list(CC_ATTRIBUTES))
    if not all(c in wide.columns for c in CC_ATTRIBUTES):
        return wide.select("launch_id", pl.lit(None, dtype=pl.String).alias("_cc"))
    major, minor = (pl.col(c).cast(pl.Int64, strict=False).cast(pl.String) for c in CC_ATTRIBUTES)
    return wide.select("launch_id", pl.concat_str(major, pl.lit("."), minor).alias("_cc"))


def kernel_metric_rows(metrics: pl.DataFrame) -> pl.DataFrame:
    """The metric rows that headline_columns, compute_capability_from_attributes and normalize_kernels
    read (a few dozen of a launch's ~800 metrics), and one row of nulls per launch, so that each
    answers from these what it answers from all the rows, but for headline_columns' metric_count
    (rows per launch: give it all the rows as `counted`). Their filters then run over a few percent of
    the rows, not three times over all of them."""
    spec = headline_metrics()
    read = {m for candidates in spec.values() for c in candidates for m in c}
    read |= {*CC_ATTRIBUTES, *derived.wanted_metrics(), *derived.bytes_metrics(), DEVICE_NAME}
    return pl.concat([metrics.filter(pl.col("metric").is_in(sorted(read))),
                      metrics.select("launch_id").unique(maintain_order=True)], how="diagonal")


@dataclass(frozen=True)
class KernelRules:
    """The classification rules in force: a warehouse's own (its normalize/ folder) before the built-in ones."""
    library: tuple[classify.Rule, ...]
    op_class: tuple[classify.Rule, ...]
    math_dtype: tuple[classify.Rule, ...] = ()
    implementation: tuple[classify.Rule, ...] = ()

    @classmethod
    def load(cls, extra_dir: Path | None = None) -> KernelRules:
        return cls(classify.load_rules("library", extra_dir), classify.load_rules("op_class", extra_dir),
                   classify.load_rules("math_dtype", extra_dir), classify.load_rules("implementation", extra_dir))


def name_unnamed_kernels(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """A launch exported without a kernel name (an empty cell) is named identity.UNNAMED_KERNEL:
    it keeps its row, so its metrics are never orphaned."""
    blank = pl.col("kernel_name").str.strip_chars().fill_null("") == ""
    return kernels.with_columns(pl.when(blank).then(pl.lit(identity.UNNAMED_KERNEL))
                                .otherwise(pl.col("kernel_name")).alias("kernel_name"))


def demangle_names(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """Mangled names (--print-kernel-base mangled) become demangled ones; the mangled name is kept."""
    mangled = pl.col("kernel_name").str.starts_with("_Z")
    return kernels.with_columns(
        pl.when(mangled).then(pl.col("kernel_name")).otherwise(pl.col("kernel_mangled")).alias("kernel_mangled"),
        pl.col("kernel_name").replace_strict(
            {n: identity.demangle(n) for n in kernels["kernel_name"].drop_nulls().unique().to_list()},
            return_dtype=pl.String).alias("kernel_name"))


def kernel_identity(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """kernel_base, kernel_signature, kernel_id and kernel_display from the name (identity.py documents
    the rules). The mangled name, where there is one, is the most complete spelling, so it decides."""
    source = pl.coalesce("kernel_mangled", "kernel_name")
    names = kernels.select(source.alias("_source")).unique()["_source"].drop_nulls().to_list()
    ids = {n: identity.identify(n) for n in names}
    return kernels.with_columns(
        source.replace_strict({n: i.kernel_base for n, i in ids.items()}, return_dtype=pl.String).alias("kernel_base"),
        source.replace_strict({n: i.kernel_signature for n, i in ids.items()},
                              return_dtype=pl.String).alias("kernel_signature"),
        source.replace_strict({n: i.kernel_id for n, i in ids.items()}, return_dtype=pl.String).alias("kernel_id"),
        source.replace_strict({n: i.kernel_display for n, i in ids.items()},
                              return_dtype=pl.String).alias("kernel_display"))


OP_CONTEXT_COLUMNS = {"framework_op": pl.String, "framework_op_id": pl.Int64, "framework_seq": pl.Int64,
                      "op_shapes": pl.String, "nvtx_path": pl.String, "nvtx_range": pl.String}


def framework_context(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """framework_op, its op id, autograd seq and input shapes, the NVTX path and innermost user range
    from the NVTX push/pop stack (nvtx.py); kernels without NVTX get nulls."""
    cells = kernels["nvtx_push_pop"].unique().to_list()
    contexts = pl.DataFrame(
        [{"nvtx_push_pop": c, **nvtx.op_context(c).__dict__} for c in cells],
        schema={"nvtx_push_pop": pl.String, **OP_CONTEXT_COLUMNS})
    return kernels.drop([c for c in OP_CONTEXT_COLUMNS if c in kernels.columns]).join(
        contexts, on="nvtx_push_pop", how="left", nulls_equal=True)


def _classify(kernels: pl.DataFrame, rules: tuple[classify.Rule, ...], column: str) -> pl.DataFrame:
    fields = list(classify.FIELD_COLUMNS.values())
    keys = kernels.select(fields).unique()
    labels = keys.with_columns(pl.Series(column, [classify.classify(rules, row) for row in keys.iter_rows(named=True)],
                                         dtype=pl.String))
    return kernels.drop(column, strict=False).join(labels, on=fields, how="left", nulls_equal=True)


def classify_library(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """library from library_rules.csv (first matching rule; `unknown` when none matches)."""
    return _classify(kernels, rules.library, "library")


def classify_implementation(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """implementation (whose kernel it is: CUTLASS, xmma, nvjet, CUB, ...) from implementation_rules.csv;
    a kernel no rule names was written by the library that dispatched it."""
    found = _classify(kernels, rules.implementation, "implementation")
    return found.with_columns(pl.when(pl.col("implementation") == classify.UNKNOWN).then(pl.col("library"))
                              .otherwise(pl.col("implementation")).alias("implementation"))


def _most_common(rows: pl.DataFrame, key: list[str], column: str) -> pl.DataFrame:
    """key + column: the most frequent non-null value of `column` per key (ties: the first in sort
    order, so the answer never depends on row order); null where every value is null."""
    counts = rows.group_by([*key, column]).len("_n")
    return (counts.sort([pl.col(column).is_null(), pl.col("_n"), pl.col(column)],
                        descending=[False, True, False], nulls_last=True)
            .unique(key, keep="first", maintain_order=True).drop("_n"))


def classify_op_class(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """op_class from op_class_rules.csv, ONE per kernel identity in the run: the rules see the identity's
    name and its most common framework op (with that op's most common NVTX path) over the run's launches,
    so a generic kernel launched under two ops gets one class (framework_op stays per launch)."""
    key = ["kernel_id", *([BATCH_RUN] if BATCH_RUN in kernels.columns else [])]
    op = _most_common(kernels, key, "framework_op")
    path = _most_common(kernels.join(op, on=[*key, "framework_op"], how="semi", nulls_equal=True),
                        key, "nvtx_path")
    names = kernels.group_by(key).agg(pl.col("kernel_base").min(), pl.col("kernel_signature").min(),
                                      pl.col("kernel_name").min())
    identities = names.join(op, on=key, how="left").join(path, on=key, how="left")
    fields = [c for c in identities.columns if c not in key]
    distinct = identities.select(fields).unique()    # runs of one batch share most identities
    distinct = distinct.with_columns(pl.Series("op_class", [classify.classify(rules.op_class, row)
                                                            for row in distinct.iter_rows(named=True)],
                                               dtype=pl.String))
    labels = identities.join(distinct, on=fields, how="left", nulls_equal=True).select(*key, "op_class")
    return kernels.drop("op_class", strict=False).join(labels, on=key, how="left")


def classify_math_dtype(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """math_dtype from math_dtype_rules.csv (the kernel's name); derived.py lets ncu's tensor counters,
    where exported, decide over it."""
    return _classify(kernels, rules.math_dtype, "math_dtype")


# Per launch: the FLOPs of its framework op from the op's input shapes (on the op's main kernel only),
# and the GEMM's M, N, K and batch (NULL for non-GEMMs).
SHAPE_COLUMNS = {"shape_flops": pl.Float64, "shape_flops_source": pl.String, "gemm_m": pl.Int64, "gemm_n": pl.Int64, "gemm_k": pl.Int64,
                 "gemm_batch": pl.Int64}


def op_shape_flops(kernels: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """shape_flops and gemm_m/n/k/batch from the framework op's input shapes (op_flops.py), given to the
    op's main kernel only: of the op instance's launches (same framework_op_id) whose op_class is the one
    its formula names (gemm, conv, attention), the longest; memset, copy, split-K reduction or shorter
    kernels of the op get none. Where the trace records the op's input dtypes (op_dtypes), a kernel of
    that class whose name says nothing (math_dtype unknown) takes the op's dtype."""
    for column, dtype in {"framework_op": pl.String, "framework_op_id": pl.Int64, "op_shapes": pl.String,
                          "op_args": pl.String, "op_dtypes": pl.String}.items():
        if column not in kernels.columns:
            kernels = kernels.with_columns(pl.lit(None, dtype=dtype).alias(column))
    keys = kernels.select("framework_op", "op_shapes", "op_args", "op_dtypes").unique()
    found = []
    for row in keys.iter_rows(named=True):
        result = op_flops.op_flops(row["framework_op"], row["op_shapes"], row["op_args"])
        rule = op_flops.rule_for(row["framework_op"])
        found.append({**row, "_flops": result.flops if result else None,
                      "_target": rule.op_class if rule else None,
                      "_m": result.m if result else None, "_n": result.n if result else None,
                      "_k": result.k if result else None, "_batch": result.batch if result else None,
                      "_source": op_flops.SOURCES.get(result.note if result else None, op_flops.SOURCE),
                      "_op_dtype": op_flops.op_dtype(row["op_dtypes"], row["framework_op"])})
    table = pl.DataFrame(found, schema={**keys.schema, "_flops": pl.Float64, "_target": pl.String,
                                        "_m": pl.Int64, "_n": pl.Int64, "_k": pl.Int64, "_batch": pl.Int64,
                                        "_source": pl.String, "_op_dtype": pl.String})
    frame = kernels.drop([c for c in SHAPE_COLUMNS if c in kernels.columns]).with_row_index("_order").join(
        table, on=["framework_op", "op_shapes", "op_args", "op_dtypes"], how="left", nulls_equal=True)
    duration = pl.col("duration_ns") if "duration_ns" in frame.columns else pl.lit(None, dtype=pl.Float64)
    of_class = pl.col("op_class") == pl.col("_target")
    candidate = of_class & pl.col("_flops").is_not_null()
    instance = pl.coalesce(pl.col("framework_op_id"), -1 - pl.col("_order").cast(pl.Int64))
    main = candidate & (pl.col("_order") == pl.col("_order").sort_by(
        pl.when(candidate).then(duration.cast(pl.Float64).fill_null(0)), descending=True, nulls_last=True)
        .first().over([instance, *([BATCH_RUN] if BATCH_RUN in frame.columns else [])]))
    math_dtype = pl.col("math_dtype") if "math_dtype" in frame.columns else pl.lit(classify.UNKNOWN)
    return frame.with_columns(
        pl.when(main).then(pl.col("_flops")).alias("shape_flops"),
        pl.when(main).then(pl.col("_source")).alias("shape_flops_source"),
        *[pl.when(main).then(pl.col(f"_{d}")).alias(f"gemm_{d}") for d in ("m", "n", "k", "batch")],
        pl.when((math_dtype.fill_null(classify.UNKNOWN) == classify.UNKNOWN) & of_class
                & pl.col("_op_dtype").is_not_null()).then(pl.col("_op_dtype")).otherwise(math_dtype)
        .alias("math_dtype"),
    ).drop("_order", "_flops", "_target", "_m", "_n", "_k", "_batch", "_source", "_op_dtype")


KERNEL_STEPS = (name_unnamed_kernels, demangle_names, kernel_identity, framework_context, classify_library,
                classify_implementation, classify_op_class, classify_math_dtype, op_shape_flops)


DEVICE_NAME = "device__attribute_display_name"


def normalize_kernels(kernels: pl.DataFrame, metrics: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """KERNEL_STEPS, then the derived roofline columns (derived.py), on one run's kernel rows."""
    if "kernel_mangled" not in kernels.columns:
        kernels = kernels.with_columns(pl.lit(None, dtype=pl.String).alias("kernel_mangled"))
    for step in KERNEL_STEPS:
        kernels = step(kernels, rules)
    device_names = (metrics.filter((pl.col("metric") == DEVICE_NAME) & pl.col("value_text").is_not_null())
                    .select("launch_id", pl.col("value_text").alias("device_name")))
    wide = wide_metrics(metrics, sorted({*derived.wanted_metrics(), *derived.bytes_metrics()}))
    kernels = derived.bytes_columns(kernels, wide)     # first: it fills dram_bytes from ncu's DRAM rate
    extra = derived.derived_columns(kernels, wide, device_names)
    return kernels.drop([c for c in derived.DERIVED_COLUMNS if c in kernels.columns]).join(
        extra, on="launch_id", how="left").drop("shape_flops", "shape_flops_source", "op_args",
                                                "op_dtypes")   # NVTX records neither dtypes nor scalars


TIMELINE_STEPS = (name_unnamed_kernels, demangle_names, kernel_identity, classify_library, classify_implementation,
                  classify_op_class, classify_math_dtype)


def normalize_timeline(rows: pl.DataFrame, rules: KernelRules) -> pl.DataFrame:
    """TIMELINE_STEPS on kernel rows of a timeline or summary (nsys, torch trace): the same identity
    and classification as ncu kernels; framework-op context comes from the reader. Launches (rows with
    a duration) also get their op's FLOPs from its shapes (op_shape_flops) and the roof of their math
    dtype (timeline_flops)."""
    for column in ("kernel_mangled", "framework_op", "nvtx_path"):
        if column not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=pl.String).alias(column))
    for step in TIMELINE_STEPS:
        rows = step(rows, rules)
    if "duration_ns" in rows.columns:
        rows = timeline_flops(op_shape_flops(rows, rules))
    return rows


def timeline_flops(rows: pl.DataFrame) -> pl.DataFrame:
    """flops (shape FLOPs of the op's main kernel; 'op shapes'), achieved FLOP/s over the launch's real
    duration, and the published roof of its math dtype on its GPU (gpu_peaks.csv: the dense tensor peak;
    FP32 and FP64 without a tensor row: the CUDA-core peak). A timeline has no measured clock, so the
    datasheet peak (at its boost clock) is the reference."""
    names = rows["device_name"].drop_nulls().unique().to_list() if "device_name" in rows.columns else []
    table = {}
    for name in names:
        for dtype in peaks.DTYPES:
            p = peaks.peak(name, dtype)
            if p is not None and (value := p.tensor_dense_flops_per_s or p.cuda_core_flops_per_s):
                table[f"{name}|{dtype}"] = value
    key = pl.concat_str(pl.col("device_name"), pl.lit("|"), pl.col("math_dtype")) if names else pl.lit(None)
    peak = key.replace_strict(table, default=None, return_dtype=pl.Float64) if table else pl.lit(None, pl.Float64)
    has = pl.col("shape_flops").is_not_null()
    rows = rows.with_columns(
        pl.col("shape_flops").alias("flops"), pl.col("shape_flops_source").alias("flops_source"),
        (pl.col("shape_flops") / pl.when(pl.col("duration_ns") > 0).then(pl.col("duration_ns") * derived.NS))
        .alias("achieved_flops_per_s"),
        pl.when(has).then(peak).alias("peak_flops_per_s")).drop("shape_flops", "shape_flops_source")
    return rows.with_columns((100 * pl.col("achieved_flops_per_s") / pl.when(pl.col("peak_flops_per_s") > 0)
                              .then(pl.col("peak_flops_per_s"))).alias("pct_of_peak"))
