"""The `kwh profile` command. Imports only click and the standard library (the warehouse is loaded for
--ingest alone), so `python3 -m kwarehouse.collect` runs it on a GPU machine without polars or DuckDB."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from kwarehouse.collect import discovery, presets, profiling as profile_lib
from kwarehouse.collect.tags import parse_tags
from kwarehouse.errors import KwhError


class LaunchCount(click.ParamType):
    """--launch-count: a positive number, or `all` (0: no cap)."""
    name = "launch_count"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or str(value).strip().lower() == "all":
            return 0 if not isinstance(value, int) else value
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count < 1:
            self.fail(f"{value!r} is not a number of launches (1 or more) or all", param, ctx)
        return count


def _help() -> str:
    """The command's help: what it does, each preset's cost (presets.toml), examples."""
    rows = "".join(f"  {p.name:<10} {p.passes_h100 or '?':>3} passes  {p.cost}\n"
                   for p in presets.presets().values() if p.name in presets.PRESET_NAMES)
    return ("Profile a command's hot kernels with ncu: a discovery pass, the selection, a targeted ncu pass, "
            "raw and details CSV exports and manifest.json in one folder (with --ingest, into the warehouse too).\n\n"
            "\b\nPresets (replay passes per kernel, ncu 2025.3.1 on an H100):\n" + rows + "\n"
            "\b\nExample:\n"
            "  kwh profile --dry-run --top 5 -- python3 examples/workloads/transformer_block.py\n"
            "  kwh profile --preset roofline --cover 80 --ingest -- python3 train.py --steps 3\n")


@click.command("profile", help=_help(), context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--out", "-o", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: profile-MODEL).")
@click.option("--model", help="Model name (default: the script's name).")
@click.option("--task", help="Recorded in the manifest: inference, training, ...")
@click.option("--dtype", help="Recorded in the manifest: bf16, fp16, fp32, ...")
@click.option("--batch", type=int, help="Recorded in the manifest.")
@click.option("--seq-len", type=int, help="Recorded in the manifest.")
@click.option("--image-size", help="Recorded in the manifest (e.g. 224 or 224x224).")
@click.option("--seed", type=int, help="The workload's seed, recorded in the manifest.")
@click.option("--warmup", type=int, help="The workload's warm-up iterations, recorded in the manifest.")
@click.option("--iterations", type=int, help="The workload's profiled iterations, recorded in the manifest.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Manifest entry; repeatable.")
@click.option("--preset", type=click.Choice(presets.PRESET_NAMES), default="quick", show_default=True,
              help="What the targeted ncu pass collects (kwh profile --help lists each preset's cost).")
@click.option("--top", type=click.IntRange(min=1), help="Profile the N kernel functions with the most GPU time (default 10).")
@click.option("--cover", "cover_pct", type=click.FloatRange(0, 100, min_open=True),
              help="Profile the kernel functions that cover PCT % of the GPU time.")
@click.option("--discovery", type=click.Choice(discovery.METHODS), default="auto", show_default=True,
              help="auto: nsys when installed, else the PyTorch profiler for a Python command, else ncu durations.")
@click.option("--discovery-from", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Select from an earlier discovery output (trace.json, ncu raw page, nsys kernel summary CSV).")
@click.option("--kernel-regex", metavar="REGEX", help="Skip discovery: profile the kernels this demangled-name "
                                                     "regex matches (kwh hot-kernels prints one).")
@click.option("--launch-skip", type=click.IntRange(min=0), help="ncu --launch-skip: matching launches to skip first.")
@click.option("--launch-count", type=LaunchCount(), metavar="N|all",
              help=f"ncu --launch-count: matching launches to profile (default {profile_lib.DEFAULT_LAUNCH_COUNT}, "
                   "chosen where they hold the most of the selection's GPU time; all: every one). An estimate of "
                   "the pass's time is printed before it runs.")
@click.option("--invocation", type=click.IntRange(min=1),
              help="Profile only the N-th launch of each selected kernel (ncu --kernel-id ::regex:...:N).")
@click.option("--replay-mode", type=click.Choice(profile_lib.REPLAY_MODES), default="kernel", show_default=True)
@click.option("--clock-control", type=click.Choice(profile_lib.CLOCK_CONTROLS), default="base", show_default=True,
              help="base: ncu locks clocks to base (comparable runs); none: the GPU's own clocks.")
@click.option("--profile-from-start/--no-profile-from-start", default=True, show_default=True,
              help="--no-profile-from-start: only between the command's cudaProfilerStart/Stop "
                   "(torch.cuda.profiler.start()/stop()).")
@click.option("--discovery-from-start", is_flag=True,
              help="With --no-profile-from-start: discovery records the whole run anyway (a JAX step bracketed "
                   "with cudaProfilerStart/Stop through ctypes, which the PyTorch profiler cannot wait for).")
@click.option("--nvtx/--no-nvtx", default=True, show_default=True, help="ncu --nvtx (NVTX ranges per launch).")
@click.option("--telemetry/--no-telemetry", default=True, show_default=True,
              help="NVML samples (nvml-samples.csv, needs pynvml) beside discovery and the ncu pass while they run.")
@click.option("--unprofiled-timing/--no-unprofiled-timing", default=True, show_default=True,
              help="With --no-profile-from-start: one plain run of the command without a profiler, timed between "
                   "its cudaProfilerStart/Stop (torch.cuda.profiler.start()/stop()), in the manifests as "
                   "unprofiled_seconds: the idle-time estimate (launch_bound) then uses it instead of the profiled "
                   "upper bound.")
@click.option("--ncu", "ncu", default="ncu", show_default=True, help="The ncu executable.")
@click.option("--nsys", "nsys", default="nsys", show_default=True, help="The nsys executable.")
@click.option("--dry-run", is_flag=True, help="Print every command; run nothing (no GPU needed).")
@click.option("--ingest", is_flag=True, help="Ingest the result into the warehouse (--warehouse) at once.")
@click.option("--warehouse", "-w", "sub_warehouse", type=click.Path(file_okay=False, path_type=Path),
              help="Warehouse for --ingest (as before the subcommand).")
@click.pass_context
def profile(ctx, command, out, model, task, dtype, batch, seq_len, image_size, seed, warmup, iterations, tags, preset,
            top, cover_pct, discovery, discovery_from, kernel_regex, launch_skip, launch_count, invocation, replay_mode,
            clock_control, profile_from_start, discovery_from_start, nvtx, telemetry, unprofiled_timing, ncu, nsys, dry_run,
            ingest, sub_warehouse):
    command = list(command)
    if command[:1] == ["--"]:
        command = command[1:]
    metadata = {"task": task, "dtype": dtype, "batch": batch, "seq_len": seq_len, "image_size": image_size,
                "seed": seed, "warmup": warmup, "iterations": iterations} | parse_tags(tags)
    options = profile_lib.Options(
        command=command, out=out or Path(f"profile-{profile_lib.file_stem(profile_lib.model_name(profile_lib.Options(command, Path('.'), model)))}"),
        model=model, preset=preset, top=top, cover_pct=cover_pct, discovery=discovery, discovery_from=discovery_from,
        kernel_regex=kernel_regex, launch_skip=launch_skip, launch_count=launch_count, invocation=invocation,
        replay_mode=replay_mode, clock_control=clock_control, profile_from_start=profile_from_start,
        discovery_from_start=discovery_from_start, nvtx=nvtx,
        metadata=metadata, ncu=ncu, nsys=nsys, telemetry=telemetry, unprofiled_timing=unprofiled_timing,
        dry_run=dry_run)
    result = profile_lib.profile(options, progress=lambda line: click.echo(line, err=True))
    if result.dry_run:
        if result.selection is not None:
            _echo_selection(result)
        if result.estimate is not None and result.selection is not None:
            click.echo(f"# {profile_lib.estimate_line(result.estimate)}")
        for step in result.steps:
            click.echo(step.shell())
            if step.sampler():
                click.echo(f"#   while it runs: {shlex.join(step.sampler())}")
        click.echo(f"# manifest: {options.out / 'ncu' / 'manifest.json'} (model {result.manifest['model']}, "
                   f"preset {preset}, clock control {clock_control})")
    else:
        if result.selection is not None:
            _echo_selection(result)
        profiled = result.manifest.get("profiled_kernels", [])
        click.echo(f"profiled {len(profiled)} launch(es) of {len({p['function'] for p in profiled})} kernel function(s) "
                   f"with preset {preset}: {options.out / 'ncu'}")
    for note in result.notes:
        click.echo(f"Note: {note}", err=True)
    if ingest and not dry_run:
        _ingest(ctx, result.ingest_sources, sub_warehouse)


def _echo_selection(result) -> None:
    chosen, window = result.selection, result.window
    click.echo(f"# selected {len(chosen.kernels)} of {chosen.seen} kernel functions, "
               f"{chosen.covered_pct:.1f} % of the GPU time:")
    for kernel in chosen.kernels:
        inside = f" ({window.in_window.get(kernel.function, 0):>5} profiled)" if window is not None else ""
        click.echo(f"#   {100 * kernel.gpu_time_ns / chosen.total_ns:5.1f} %  {kernel.launches:>5} launches{inside}  "
                   f"{len(kernel.names)} instance(s)  {kernel.function}")
    if window is not None and window.count is not None and window.matching > window.count:
        click.echo(f"# launch window: --launch-skip {window.skip} --launch-count {window.count} of {window.matching:,} "
                   f"matching launches: {window.instances_in_window} of {window.instances} instances, "
                   f"{window.covered_pct:.1f} % of the selection's time by instance")
    click.echo(f"# regex: {result.regex}")


def _ingest(ctx, sources: list[Path], sub_warehouse: Path | None) -> None:
    from kwarehouse.jobs.ingest import ingest
    from kwarehouse.store.warehouse import Warehouse
    # kwh's --warehouse/--catalog/--wait (cli.WarehouseArgs) when run as kwh profile
    base = ctx.obj if hasattr(ctx.obj, "catalog_url") else None
    root = sub_warehouse or (base.root if base else Path(os.environ.get("KWH_WAREHOUSE", "warehouse")))
    warehouse = Warehouse(root, base.catalog_url if base else os.environ.get("KWH_CATALOG"),
                          wait=base.wait if base else None, warn=lambda line: click.echo(f"kwh: {line}", err=True))
    report = ingest(sources, warehouse)
    for run in report.runs:
        click.echo(f"{'new run' if run.new else 'updated run'} {run.run_id}: {run.model} on {run.gpu}, "
                   f"{run.kernels} kernels from {len(run.files)} file(s)")
    for line in report.failed:
        click.echo(f"Error: {line}", err=True)
    if not report.ok:
        sys.exit(1)


def standalone(argv: list[str] | None = None) -> None:
    """`python3 -m kwarehouse.collect [OPTIONS] -- COMMAND`: the same command without the rest of kwh."""
    try:
        profile.main(args=argv, prog_name="python3 -m kwarehouse.collect", standalone_mode=False)
    except KwhError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)


__all__ = ["profile", "standalone"]
