"""A folder's sources grouped into runs, and one run's tables built from its sources (and what the
warehouse already holds of it): the runs row, kernels, metrics and rules of an ncu run, the timeline
tables of an nsys or PyTorch run, the samples of a telemetry log."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa

from kwarehouse import normalize, runmeta, schema
from kwarehouse.build.report import IngestReport, RunSummary
from kwarehouse.build.sources import Known, Source, read_one, stored_path
from kwarehouse.errors import InputError, KwhError, display_path, internal_error
from kwarehouse.normalize.launches import kernel_rows, merge_launches, rule_rows, summary_dims
from kwarehouse.runmeta import check_name
from kwarehouse.store.session import IngestedFile

log = logging.getLogger(__name__)


# The launch fields that identify a profiled launch in every page of one report.
LAUNCH_KEY = ["launch_id", "process_id", "process_name", "host_name", "context_id", "stream_id"]


# A .ncu-rep read through ncu_report has no process or host: it joins the run of the CSV pages of
# the same report (same folder and manifest) that match it on these.
LOOSE_LAUNCH_KEY = ["launch_id", "context_id", "stream_id", "grid_dims", "block_dims"]


def read_folder(batch: list[tuple[Path, bool]], format: str | None, known: Known, metadata: dict, seen: set[str],
                report: IngestReport, progress: Callable[[Path], None] | None = None) -> dict[str, list[Source]]:
    """Read one folder's files and group them into runs; failures, skips and captures with nothing to
    store go to `report`; known: what the warehouse holds already.

    known.earlier(path) lists (sha256, size, run id) of files ingested from that path before: a file
    that begins with the exact bytes of one of them is its complete version (the earlier one was
    ingested while still being copied), and replaces that run; the run's other files are then read again."""
    read = []
    for path, explicit in batch:
        if progress:
            progress(path)
        source = _read_reporting(path, explicit, format, known, metadata, seen, report)
        if source is not None:
            read.append(source)
    superseded = {s.supersedes for s in read if s.supersedes}
    if superseded:
        # this folder's files skipped as part of a run a complete file here replaces (another folder's
        # copies of that run's files stay skipped: they are not read again)
        again = {f"already ingested (run {run})" for run in superseded}
        here = {display_path(path) for path, _ in batch}
        redo = {p for p, why in report.skipped if why in again and p in here}
        report.skipped[:] = [(p, why) for p, why in report.skipped if p not in redo or why not in again]
        not_superseded = known.ignoring(superseded)
        for path, explicit in batch:
            if display_path(path) in redo:
                source = _read_reporting(path, explicit, format, not_superseded, metadata, seen, report)
                if source is not None:
                    read.append(source)
    return group_runs(read)


def _read_reporting(path: Path, explicit: bool, format: str | None, known: Known, metadata: dict, seen: set[str],
                    report: IngestReport) -> Source | None:
    """read_one, with a bad file's error (or an unforeseen failure: a reader's bug) in `report` instead
    of raised. Only the warehouse's own failures (its catalog cannot be read) stop the ingest."""
    try:
        source = read_one(path, explicit, format, known, metadata, seen, report)
        if source is not None:
            run_key(source)   # what groups it into a run reads its launches: a failure there is this file's
        return source
    except InputError as exc:
        report.failed.append(str(exc))
    except OSError as exc:
        report.failed.append(f"{display_path(path)}: cannot be read ({exc.strerror or exc}); "
                             "check the file and its folder")
    except KwhError:
        raise
    except MemoryError:
        report.failed.append(f"{display_path(path)}: too large to read in the memory available; nothing of it "
                             "was stored: ingest it on a machine with more memory")
    except Exception as exc:   # noqa: BLE001 - a reader's bug costs its file, never the others
        log.debug("reading %s failed", path, exc_info=True)
        report.failed.append(internal_error(display_path(path), exc, "reading it"))
    return None


def run_key(source: Source, loose: bool = False) -> str:
    """Exports of one ncu report get one run id: the same launches, from the same folder and
    manifest. A timeline or summary export (nsys, torch trace) is a run of its own."""
    if source.result.tool != "ncu":
        blob = json.dumps([source.result.tool, str(source.folder), source.meta.manifest_text or "", source.sha256])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
    key = LOOSE_LAUNCH_KEY if loose else LAUNCH_KEY
    launches = (source.result.launches.select(key).sort("launch_id").rows())
    blob = json.dumps([str(source.folder), source.meta.manifest_text or "", launches], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _lacks_process(source: Source) -> bool:
    launches = source.result.launches
    return source.result.tool == "ncu" and launches["process_id"].null_count() == launches.height


def group_runs(sources: list[Source]) -> dict[str, list[Source]]:
    """Sources by run id; a source without process ids joins the one run that matches it loosely."""
    groups: dict[str, list[Source]] = {}
    for source in sources:
        groups.setdefault(run_key(source), []).append(source)
    loose: dict[str, set[str]] = {}
    for key, members in groups.items():
        if not _lacks_process(members[0]):
            loose.setdefault(run_key(members[0], loose=True), set()).add(key)
    for key in [k for k, members in groups.items() if _lacks_process(members[0])]:
        targets = loose.get(run_key(groups[key][0], loose=True), set())
        if len(targets) == 1:
            groups[next(iter(targets))].extend(groups.pop(key))
    return groups


@dataclass
class BuiltRun:
    """One run's tables, ready to stage, with the files they came from."""
    model: str
    gpu: str
    tables: dict[str, pa.Table]
    files: list[IngestedFile]
    summary: RunSummary


def build_run(run_id: str, members: list[Source], existing: dict[str, pa.Table],
              rules: normalize.KernelRules, model_option: str | None, tags: dict[str, str]) -> BuiltRun:
    """The tables of run `run_id` from its exports, merged with `existing` (what the warehouse
    already holds of it, by table; empty for a new run)."""
    members = in_page_order(members)
    meta, existing_run, gpu, model = _run_names(members, existing, model_option, tags)
    tool = members[0].result.tool
    if tool == "ncu":
        tables, count, compute_capability = _profile_tables(members, existing, rules)
    elif tool == "telemetry":
        tables, count, compute_capability = _telemetry_tables(members, gpu or UNKNOWN_GPU)
    else:
        tables, count, compute_capability = _timeline_tables(members, rules)
    return _finish_run(run_id, members, existing, tables, count, compute_capability, model_option, tags)


def in_page_order(members: list[Source]) -> list[Source]:
    # Where exports of one report overlap, the first kept wins: raw page in export units (most
    # digits), then raw in base units (--print-units base rounds), then details (two decimals).
    return sorted(members, key=lambda m: (normalize.PAGE_PRIORITY.get(m.result.page, 9),
                                          m.result.base_units, str(m.result.path)))


def _run_names(members: list[Source], existing: dict[str, pa.Table], model_option: str | None,
               tags: dict[str, str]):
    """(manifest metadata, the stored runs row or None, GPU or None, model) of a run."""
    meta = members[0].meta
    existing_run = existing["runs"].to_pylist()[0] if "runs" in existing else None
    gpu = next((m.result.gpu_name for m in members if m.result.gpu_name), None)
    if gpu is None and existing_run and not existing_run["gpu"].startswith(UNKNOWN_GPU):
        gpu = existing_run["gpu"]
    gpu = gpu or meta.fields.get("gpu") or tags.get("gpu")
    model = meta.fields.get("model") or model_option or (existing_run or {}).get("model")
    if not model:
        try:
            model = check_name("model", members[0].folder.name or "unknown", members[0].folder)
        except InputError as exc:
            raise InputError(members[0].folder, f"{exc.message}; or name the model in manifest.json or with "
                                                "--model") from None
    return meta, existing_run, gpu, model


def _finish_run(run_id: str, members: list[Source], existing: dict[str, pa.Table], tables: dict[str, pl.DataFrame],
                count: int, compute_capability: str | None, model_option: str | None,
                tags: dict[str, str]) -> BuiltRun:
    """The runs row of a run whose other tables are built, and every table tagged with the run."""
    built = run_record(run_id, members, existing, tables.get("kernels"), count, compute_capability,
                        model_option, tags)
    built.tables.update({name: tag(frame, run_id, built.model, built.gpu) for name, frame in tables.items()})
    return built


def run_record(run_id: str, members: list[Source], existing: dict[str, pa.Table], kernels: pl.DataFrame | None,
                count: int, compute_capability: str | None, model_option: str | None,
                tags: dict[str, str]) -> BuiltRun:
    """A run with its runs row (its only table yet), model, GPU, files and summary."""
    meta, existing_run, gpu, model = _run_names(members, existing, model_option, tags)
    tool = members[0].result.tool
    files = sorted({stored_path(m.result.path): m.sha256 for m in members}.items())
    if existing_run:
        files = sorted(dict(zip(existing_run["source_files"], existing_run["source_sha256"]))
                       .items() | set(files))
    fields = meta.fields
    found = {k: v for m in reversed(members) for k, v in m.result.run_info.items() if v is not None}
    compute_capability = compute_capability or found.get("compute_capability") or fields.get("compute_capability")
    sm_count = fields.get("sm_count") or found.get("sm_count") or _sm_count(kernels)
    if gpu is None:
        gpu = unknown_gpu(compute_capability, sm_count)
    run_tags = {**meta.tags, **({k: v for k, v in existing_run["tags"]} if existing_run else {}), **tags}
    runs = {
        "run_id": run_id, "model": model, "gpu": gpu, "family": fields.get("family"),
        "task": fields.get("task"), "dtype": fields.get("dtype"), "batch": fields.get("batch"),
        "seq_len": fields.get("seq_len"), "compute_capability": compute_capability,
        "sm_count": sm_count, "tool": tool, **{k: fields.get(k) for k in runmeta.NCU_SETTINGS},
        "tool_version": next((m.result.tool_version for m in members if m.result.tool_version), None)
                        or meta.tool_version,
        "framework_versions": json.dumps(meta.versions, sort_keys=True) if meta.versions else None,
        "run_date": date.fromisoformat(fields["date"]) if "date" in fields else found.get("run_date"),
        "tags": sorted(run_tags.items()), "manifest_json": meta.manifest_text,
        "source_dir": display_path(members[0].folder), "source_files": [f for f, _ in files],
        "source_sha256": [s for _, s in files], "kernel_count": count,
        "ingested_at": (existing_run or {}).get("ingested_at") or datetime.now(UTC).replace(tzinfo=None),
    }
    tables = {"runs": one_row(runs, schema.tables()["runs"].arrow)}
    new_files = [IngestedFile(m.sha256, stored_path(m.result.path), m.result.format, m.size) for m in members]
    notes = []
    if model_option and meta.fields.get("model") and model_option != meta.fields["model"]:
        notes.append(f"--model {model_option} ignored for run {run_id}: its manifest {display_path(meta.manifest_path)} "
                     f"names the model {meta.fields['model']!r} (edit the manifest to change it)")
    if runmeta.partial_profile(meta):
        notes.append(f"run {run_id} is a partial kwh profile: its manifest {display_path(meta.manifest_path)} says "
                     f"{runmeta.partial_profile(meta)!r}; what was exported before it stopped is stored")
    return BuiltRun(model, gpu, tables, new_files,
                    RunSummary(run_id, model, gpu, count, [display_path(m.result.path) for m in members],
                               new=not existing, notes=notes,
                               warnings=[w for m in members for w in m.result.warnings]))


def one_row(record: dict, table_schema: pa.Schema) -> pa.Table:
    """A one-row Arrow table of `record`, built through polars: pyarrow, given Python lists
    (pa.Table.from_pylist, pa.array), imports pandas where it is installed to ask whether they are
    pandas objects, ~0.2 CPU-s of every ingest process for a package kwh never uses. A map column
    (runs.tags: a list of (key, value) pairs) is made from its pairs' arrays."""
    plain = pa.schema([f for f in table_schema if not pa.types.is_map(f.type)])
    dtypes = pl.from_arrow(pa.Table.from_arrays([pa.nulls(0, f.type) for f in plain], schema=plain)).schema
    frame = pl.DataFrame({name: [record[name]] for name in plain.names}, schema=dtypes).to_arrow()
    columns = []
    for field in table_schema:
        if pa.types.is_map(field.type) and record[field.name] is None:
            columns.append(pa.nulls(1, field.type))
        elif pa.types.is_map(field.type):
            pair = pa.struct([("key", field.type.key_type), ("value", field.type.item_type)])
            pairs = pl.Series([[{"key": k, "value": v} for k, v in record[field.name]]],
                              dtype=pl.List(pl.Struct({"key": pl.String, "value": pl.String}))).to_arrow()
            pairs = pairs.cast(pa.list_(pair))
            columns.append(pa.MapArray.from_arrays(pairs.offsets, pairs.values.field("key"),
                                                   pairs.values.field("value")).cast(field.type))
        else:
            columns.append(frame[field.name].cast(field.type))
    return pa.Table.from_arrays(columns, schema=table_schema)


UNKNOWN_GPU = "unknown"


def unknown_gpu(compute_capability: str | None, sm_count: int | None) -> str:
    """The partition of a run whose export, manifest and command line name no GPU: what is known of it,
    so that two different GPUs are not averaged together: 'unknown (CC 9.0, 132 SMs)'."""
    known = [f"CC {compute_capability}" if compute_capability else None,
             f"{sm_count} SMs" if sm_count else None]
    known = [k for k in known if k]
    return f"{UNKNOWN_GPU} ({', '.join(known)})" if known else UNKNOWN_GPU


def _sm_count(kernels: pl.DataFrame | None) -> int | None:
    """The SM count ncu measured (device__attribute_multiprocessor_count, kernels.sm_count)."""
    if kernels is None or "sm_count" not in kernels.columns:
        return None
    counts = kernels["sm_count"].drop_nulls()
    return int(counts.mode().sort()[0]) if counts.len() else None


def _profile_tables(members: list[Source], existing: dict[str, pa.Table], rules: normalize.KernelRules):
    """kernels, metrics and rules of an ncu run, merged with what the warehouse holds of it."""
    metric_frames = [normalize.normalize_source_metrics(m.result.metrics, m.result.page) for m in members]
    if "metrics" in existing:
        metric_frames.insert(0, pl.from_arrow(existing["metrics"]).drop("run_id", "model", "gpu"))
    metrics = normalize.merge_metrics(metric_frames)
    launches = merge_launches([m.result.launches for m in members], existing.get("kernels"))
    kernels = kernel_rows(launches, metrics, rules)
    rule_table = pl.concat([rule_rows(m.result.rules) for m in members]
                          + ([pl.from_arrow(existing["rules"]).drop("run_id", "model", "gpu")]
                             if "rules" in existing else []), how="vertical_relaxed").unique(maintain_order=True)
    tables = {"kernels": kernels, "metrics": metrics, "rules": rule_table}
    return tables, kernels.height, kernels["compute_capability"].drop_nulls().first()


def _telemetry_tables(members: list[Source], gpu: str):
    """gpu_samples of a telemetry log: each GPU's sampling interval (the median gap between its samples in
    the log), the run's GPU name where the log prints none (dmon, dcgmi), and its gpu_peaks model."""
    from kwarehouse.normalize import peaks
    samples = pl.concat([m.result.samples for m in members], how="vertical_relaxed")
    samples = samples.with_columns(pl.col("gpu_name").fill_null(pl.lit(None if gpu == "unknown" else gpu, pl.String)))
    intervals = (samples.filter(pl.col("timestamp_ns").is_not_null())
                 .select("source", "gpu_index", "timestamp_ns").unique().sort("timestamp_ns")
                 .with_columns(pl.col("timestamp_ns").diff().over("source", "gpu_index").alias("gap"))
                 .group_by("source", "gpu_index").agg(pl.col("gap").median().round().cast(pl.Int64).alias("interval_ns")))
    samples = samples.join(intervals, on=["source", "gpu_index"], how="left", nulls_equal=True)
    models = {name: peaks.gpu_model(name) for name in samples["gpu_name"].drop_nulls().unique()}
    samples = samples.with_columns(pl.col("gpu_name").replace_strict(models, default=None, return_dtype=pl.String)
                                   .alias("gpu_model"))
    return {"gpu_samples": samples}, 0, None


def _timeline_tables(members: list[Source], rules: normalize.KernelRules):
    """kernel_launches, kernel_summaries and nvtx_summaries of a timeline or summary export."""
    tables: dict[str, pl.DataFrame] = {}
    timelines = [m.result.timeline for m in members if m.result.timeline is not None]
    if timelines:
        frame = pl.concat(timelines, how="vertical_relaxed").with_row_index("launch_index").with_columns(
            pl.col("launch_index").cast(pl.Int64),
            (pl.col("grid_x") * pl.col("grid_y") * pl.col("grid_z")).alias("grid_size"),
            (pl.col("block_x") * pl.col("block_y") * pl.col("block_z")).alias("block_size"))
        tables["kernel_launches"] = normalize.normalize_timeline(frame, rules)
    summaries = [m.result.summaries for m in members if m.result.summaries is not None]
    if summaries:
        normalized = summary_dims(normalize.normalize_timeline(pl.concat(summaries, how="vertical_relaxed"), rules))
        tables["kernel_summaries"] = normalized.select(
            [c for c in schema.tables()["kernel_summaries"].arrow.names if c not in ("run_id", "model", "gpu")])
    nvtx = [m.result.nvtx_summaries for m in members if m.result.nvtx_summaries is not None]
    if nvtx:
        tables["nvtx_summaries"] = pl.concat(nvtx, how="vertical_relaxed")
    for name in sorted({name for m in members for name in m.result.tables}):   # memory ops, API, NVTX ranges
        tables[name] = pl.concat([m.result.tables[name] for m in members if name in m.result.tables],
                                 how="vertical_relaxed")
    if "kernel_launches" in tables:
        count = tables["kernel_launches"].filter(pl.col("activity") == "kernel").height
    else:
        count = tables["kernel_summaries"]["instances"].sum() if "kernel_summaries" in tables else 0
    return tables, int(count or 0), None


def tag(frame: pl.DataFrame, run_id: str, model: str, gpu: str) -> pa.Table:
    return frame.with_columns(pl.lit(run_id).alias("run_id"), pl.lit(model).alias("model"),
                              pl.lit(gpu).alias("gpu")).to_arrow()
