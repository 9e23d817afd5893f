"""The launch rows of an ncu run, merged from its exports (and what the warehouse holds of it), into its
kernels table; the rule rows of its exports. Pure steps."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from kwarehouse import normalize
from kwarehouse.normalize import identity


# Which spelling of a kernel's name a run keeps when its exports disagree (lowest first).
NAME_PRINTED, NAME_DEMANGLED_BY_KWH, NAME_MANGLED = 0, 1, 2


# Launch fields stored in the kernels table that normalization reads (everything else it recomputes).
LAUNCH_COLUMNS = ["launch_id", "kernel_name", "kernel_mangled", "process_id", "process_name", "host_name",
                  "context_id", "stream_id", "device_id", "compute_capability", "grid_x", "grid_y", "grid_z",
                  "block_x", "block_y", "block_z", "nvtx_push_pop", "nvtx_start_end"]


def merge_launches(exports: list[pl.DataFrame], existing: pa.Table | None) -> pl.DataFrame:
    """One row per launch from the launch rows of every export of the run (in page order): the first
    non-null value of each field.
    kernel_name prefers the spelling a tool printed, then one kwh demangled, then a mangled one;
    kernel_mangled keeps the mangled one."""
    frames = []
    if existing is not None:
        old = pl.from_arrow(existing)
        derived = pl.col("kernel_mangled").is_not_null() & (pl.col("kernel_name") == pl.col("kernel_mangled")
            .map_elements(identity.demangle, return_dtype=pl.String))
        frames.append(old.select(
            "launch_id", "kernel_name", "process_id", "process_name", "host_name", "context_id",
            "stream_id", "device_id", "compute_capability", "nvtx_push_pop", "nvtx_start_end",
            *[pl.col(c).cast(pl.String) for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")],
            pl.when(derived).then(NAME_DEMANGLED_BY_KWH).otherwise(NAME_PRINTED).alias("_rank")))
        frames.append(old.filter(pl.col("kernel_mangled").is_not_null())
                      .select("launch_id", pl.col("kernel_mangled").alias("kernel_name")))
    for launches in exports:
        frames.extend(launch_frames(launches))
    return merged_launch_rows(with_dims(pl.concat(frames, how="diagonal_relaxed")))


def launch_frames(launches: pl.DataFrame) -> list[pl.DataFrame]:
    """An export's launch rows, and (from a reader that knows both spellings, .ncu-rep) its mangled
    names as rows of their own, first."""
    if "kernel_mangled" not in launches.columns:
        return [launches]
    return [launches.filter(pl.col("kernel_mangled").str.starts_with("_Z"))
            .select("launch_id", pl.col("kernel_mangled").alias("kernel_name")),
            launches.drop("kernel_mangled")]


def with_dims(rows: pl.DataFrame) -> pl.DataFrame:
    """grid_dims and block_dims ("(96, 1, 1)") split into grid_x ... block_z (text, cast later),
    on the rows that have them (stored rows already have the split columns)."""
    dims = [*split_dims("grid", rows["grid_dims"]), *split_dims("block", rows["block_dims"])]
    return rows.with_columns([pl.coalesce(pl.col(d.name), pl.lit(d)).alias(d.name) if d.name in rows.columns else d
                              for d in dims]).drop("grid_dims", "block_dims")


def merged_launch_rows(allrows: pl.DataFrame) -> pl.DataFrame:
    """merge_launches' answer from the rows of every export concatenated (a launch's rows in
    export order)."""
    allrows = allrows.with_columns(pl.col("kernel_name").str.starts_with("_Z").fill_null(False).alias("_mangled"))
    if "_rank" not in allrows.columns:
        allrows = allrows.with_columns(pl.lit(None, dtype=pl.Int32).alias("_rank"))
    allrows = allrows.with_columns(pl.when(pl.col("_mangled")).then(NAME_MANGLED)
                                   .otherwise(pl.col("_rank").fill_null(NAME_PRINTED)).alias("_rank"))
    names = (allrows.filter(pl.col("kernel_name").is_not_null()).sort("_rank", maintain_order=True)
             .group_by("launch_id", maintain_order=True)
             .agg(pl.col("kernel_name").first(),
                  pl.col("kernel_name").filter(pl.col("_mangled")).first().alias("kernel_mangled")))
    others = allrows.drop("kernel_name", "_mangled", "_rank").group_by("launch_id", maintain_order=True).agg(
        pl.all().drop_nulls().first())
    # full join: a launch without any name (an empty Kernel Name cell) keeps its row; normalize
    # names it "(unnamed kernel)"
    return names.join(others, on="launch_id", how="full", coalesce=True).sort("launch_id")


def summary_dims(rows: pl.DataFrame) -> pl.DataFrame:
    """Summary rows (nsys kernel summaries) with grid_dims and block_dims kept as exported and also
    split into grid_x ... block_z as numbers: the one split, which launch rows get from with_dims
    (views then never parse "(2, 1, 1)" themselves)."""
    dims = [*split_dims("grid", rows["grid_dims"]), *split_dims("block", rows["block_dims"])]
    return rows.with_columns([d.cast(pl.Int64, strict=False) for d in dims])


def split_dims(prefix: str, text: pl.Series) -> list[pl.Series]:
    """ "(96, 1, 1)" -> three string columns (cast later); missing dims stay null."""
    parts = text.str.extract_groups(r"^\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)$")
    return [parts.struct.field(str(i + 1)).alias(f"{prefix}_{axis}") for i, axis in enumerate("xyz")]


def kernel_rows(launches: pl.DataFrame, metrics: pl.DataFrame, rules: normalize.KernelRules) -> pl.DataFrame:
    """The kernels table of one run: launch fields, headline metric columns, identity, context,
    classification and derived roofline columns."""
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    read = normalize.kernel_metric_rows(metrics)
    headline = normalize.headline_columns(read, counted=metrics)
    rows = (launches.with_columns([pl.col(c).cast(pl.Int64, strict=False) for c in dims])
            .join(headline, on="launch_id", how="left")
            .join(normalize.compute_capability_from_attributes(read), on="launch_id", how="left")
            .with_columns(pl.coalesce("compute_capability", "_cc").alias("compute_capability")).drop("_cc"))
    rows = rows.with_columns(
        pl.coalesce(pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z"),
                    pl.col("grid_size")).cast(pl.Int64).alias("grid_size"),
        pl.coalesce(pl.col("block_x") * pl.col("block_y") * pl.col("block_z"),
                    pl.col("block_size")).cast(pl.Int64).alias("block_size"),
        pl.col("registers_per_thread").cast(pl.Int64),
        pl.col("shared_mem_bytes").round().cast(pl.Int64),
        pl.col("metric_count").fill_null(0).cast(pl.Int64),
    )
    return normalize.normalize_kernels(rows, read, rules)


def rule_rows(rules: pl.DataFrame) -> pl.DataFrame:
    speedup = pl.col("speedup_text").str.replace_all(",", "").cast(pl.Float64, strict=False)
    return rules.with_columns(speedup.alias("speedup_pct"),
                              pl.when(pl.col("rule_type") != "").then(pl.col("rule_type")).alias("rule_type"),
                              pl.when(pl.col("speedup_type") != "").then(pl.col("speedup_type"))
                              .alias("speedup_type")).drop("speedup_text")
