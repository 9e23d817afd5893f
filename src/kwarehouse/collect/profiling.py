"""`kwh profile`: discovery -> selection -> targeted ncu -> exports + manifest, in one output folder.

    OUT/discovery/   the discovery pass's output: trace.json + manifest.torchprof.json (torch), report.sqlite +
                     report_cuda_gpu_kern_sum.csv + manifest.nsys.json (nsys), or durations.ncu-rep +
                     durations.raw.csv (ncu; not ingested: replayed single-metric durations add nothing)
    OUT/ncu/         MODEL.ncu-rep, MODEL.raw.csv, MODEL.details.csv, manifest.json, ncu_version.txt
    OUT/selection.json   the selected kernel functions, their GPU time and share, the regex
    OUT/commands.sh      every command, as run (or, with --dry-run, as it would run)
    OUT/logs/        what each step printed (the workload's output among it)

Every failure is one line (ProfileError) naming the step and the files kept so far; nothing already
written is deleted. ncu/manifest.json is written first (profile_status "running: STEP") and completed at
the end ("complete"); a profile that fails or is interrupted leaves it saying where ("failed: ...",
"interrupted: STEP"), so the folder ingests under its model with its partial state in the run's tags. An
export is written as NAME.part and renamed when ncu finished it: a cut page never takes an export's name
(kwh ingest leaves .part files alone).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kwarehouse import runmeta
from kwarehouse.collect import discovery, environment, presets, selection
from kwarehouse.errors import KwhError

CLOCK_CONTROLS = ("base", "none")
REPLAY_MODES = ("kernel", "application", "range", "app-range")
PERMISSION_HELP = ("ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run kwh profile as root "
                   "(sudo), or let every user profile: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
                   "in /etc/modprobe.d/nvidia-profiling.conf and reboot (or reload the nvidia module); in a "
                   "container, start it with --cap-add=SYS_ADMIN; see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
_NO_DEVICE = ("No CUDA-capable device", "no CUDA-capable device", "cudaErrorNoDevice", "CUDA_ERROR_NO_DEVICE",
              "No supported GPUs")
_NOTHING_PROFILED = "No kernels were profiled"
SAMPLER = Path(__file__).with_name("nvml_sampler.py")
SAMPLE_INTERVAL_MS = 100          # kwarehouse.ingest.nvml_samples.DEFAULT_INTERVAL_MS
SAMPLE_LIMIT_S = 24 * 3600        # the sampler's own stop, should kwh die without stopping it
# The targeted pass profiles at most this many launches unless --launch-count says otherwise (all: every
# one): at ~1.5 s per launch (roofline, H100) a decode's top 10 matched 21,056 launches, ~9 hours (issue 31).
DEFAULT_LAUNCH_COUNT = 100
# The estimate is measured again once the pass has profiled this many launches (the first one's time
# includes the command's start-up, so the rate is taken between the first and the last of them).
MEASURED_LAUNCHES = 3
PARTIAL_SUFFIX = ".part"          # build/sources.py TEMPORARY_SUFFIXES: kwh ingest skips it
NARROW_NCU = ("fewer sections (--preset quick), fewer launches (--launch-count 10), fewer kernels (--top 3 or a "
              "--kernel-regex of one kernel), or a newer ncu")


class ProfileError(KwhError):
    """A profile that stopped: one line saying what failed, why, what to do and what was kept."""


class NothingProfiled(ProfileError):
    """The targeted pass's filter matched no launch."""


@dataclass
class Options:
    command: list[str]
    out: Path
    model: str | None = None
    preset: str = "quick"
    top: int | None = None
    cover_pct: float | None = None
    discovery: str = "auto"                 # discovery.METHODS
    discovery_from: Path | None = None      # an existing trace / ncu raw page / nsys summary
    kernel_regex: str | None = None         # no discovery: profile what this regex matches (kwh hot-kernels)
    launch_skip: int | None = None
    launch_count: int | None = None         # None: DEFAULT_LAUNCH_COUNT; 0: every launch (--launch-count all)
    invocation: int | None = None           # --kernel-id ::regex:...:N instead of --kernel-name
    replay_mode: str = "kernel"
    clock_control: str = "base"
    profile_from_start: bool = True
    discovery_from_start: bool = False      # discovery records the whole run even with profile_from_start off (JAX)
    nvtx: bool = True
    metadata: dict = field(default_factory=dict)   # task, dtype, batch, seq_len, image_size, seed, ... and --tag
    ncu: str = "ncu"
    nsys: str = "nsys"
    python: str | None = None               # interpreter for a `script.py` command (default: this one)
    telemetry: bool = True                  # NVML samples while discovery and the ncu pass run (pynvml)
    unprofiled_timing: bool = True          # one plain run of the command, timed (timed_run.py), into the manifests
    dry_run: bool = False


@dataclass
class Step:
    name: str                      # discovery, ncu, export-raw, ...
    argv: list[str]
    stdout: Path | None = None     # where stdout goes (exports); else the step's log
    samples: Path | None = None    # NVML samples written beside the step while it runs (nvml_sampler.py)

    def sampler(self) -> list[str] | None:
        """The sampler's command line, run alongside this step (stopped by SIGTERM when it ends)."""
        if self.samples is None:
            return None
        # -P: the sampler runs as a file, and its folder must not come first on sys.path (torch_discovery.py says why)
        return [sys.executable, "-P", str(SAMPLER), str(self.samples), "--interval-ms", str(SAMPLE_INTERVAL_MS),
                "--seconds", str(SAMPLE_LIMIT_S)]

    def shell(self) -> str:
        return shlex.join(self.argv) + (f" > {shlex.quote(str(self.stdout))}" if self.stdout else "")

    def runs_ncu(self) -> bool:
        return Path(self.argv[0]).name.startswith("ncu")


@dataclass
class Result:
    out: Path
    steps: list[Step]
    selection: selection.Selection | None
    regex: str
    manifest: dict
    notes: list[str]
    ingest_sources: list[Path]      # the folders --ingest reads
    dry_run: bool
    window: selection.LaunchWindow | None = None
    estimate: dict | None = None    # what the targeted pass was expected to cost (launches, seconds)


def model_name(options: Options) -> str:
    """--model, else the script's or module's name (`examples/workloads/conv_net.py` -> conv_net)."""
    if options.model is not None:
        return options.model
    argv = options.command
    rest = argv[1:] if discovery.is_python(argv) and not argv[0].endswith(".py") else argv
    for i, arg in enumerate(rest):
        if arg == "-m" and i + 1 < len(rest):
            return rest[i + 1].rsplit(".", 1)[-1]
        if not arg.startswith("-"):
            return Path(arg).stem
    return Path(argv[0]).stem


# A model name names the run in the warehouse as given (a HuggingFace id keeps its `/`) and the export files
# by file_stem, at most this long.
MODEL_NAME_LIMIT = runmeta.MAX_NAME_CHARS
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9._+-]+")
# Python regex syntax that ncu's (Boost, Perl syntax) refuses: on the H100, ncu 2025.3.1 exited 1 with
# "Invalid regex provided to --kernel option. Invalid or unterminated Perl (?...) sequence" for `(?P<n>...)`,
# and took lookbehind, (?i), \A, \Z, \w, \d, possessive `a++` and [[:alpha:]] (tests/data/profile-h100/
# ncu_regex_dialect.tsv). Python-only flags (?a) (?L) (?u) and \N{NAME} are not Perl either.
_NOT_IN_NCUS_DIALECT = (("(?P<", "a named group (?P<name>...): write (?<name>...) or a plain group"),
                        ("(?P=", "a named backreference (?P=name)"), ("(?P>", "a named subroutine (?P>name)"),
                        ("\\N{", "a named character \\N{...}"))
_PYTHON_ONLY_FLAGS = re.compile(r"\(\?[imsx]*[aLu]")


def check_kernel_regex(regex: str, flag: str = "--kernel-regex") -> None:
    """A kernel-name regex kwh and ncu both read alike, else one line naming the flag: Python's re must
    compile it (kwh reads it: selection.functions_in, kwh hot-kernels) without a warning (`[[:alpha:]]` is a
    POSIX class to ncu and a set of characters to Python), and it must hold nothing ncu's Perl-syntax
    (Boost) regex refuses, which ncu reports only after the command has started (exit status 1).

    >>> check_kernel_regex("^(saxpy|sgemm_tiled)$")
    >>> check_kernel_regex("(saxpy")
    Traceback (most recent call last):
    ...
    kwarehouse.collect.profiling.ProfileError: --kernel-regex '(saxpy' is not a valid regular expression (missing ), unterminated subpattern at position 0); fix it (kwh hot-kernels prints one)
    """
    import warnings
    if not regex or "\n" in regex or _CONTROL.search(regex):
        raise ProfileError(f"{flag} {regex!r} is empty or holds a control character (a line break); give one line "
                           "of regex (kwh hot-kernels prints one)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            re.compile(regex)
    except re.error as exc:
        raise ProfileError(f"{flag} {regex!r} is not a valid regular expression ({exc}); fix it (kwh hot-kernels "
                           "prints one)") from None
    except (FutureWarning, DeprecationWarning) as exc:
        raise ProfileError(f"{flag} {regex!r} reads differently in Python and in ncu ({exc}); write it without "
                           "the ambiguity (e.g. [A-Za-z] for [[:alpha:]], or escape the bracket)") from None
    found = next((what for text, what in _NOT_IN_NCUS_DIALECT if text in regex), None)
    if found is None and _PYTHON_ONLY_FLAGS.search(regex):
        found = "a Python-only flag ((?a), (?L) or (?u))"
    if found is not None:
        raise ProfileError(f"{flag} {regex!r} holds {found}, which Python reads but ncu's regex (Perl syntax, Boost) "
                           "refuses; write it without")


def check_model_name(model: str) -> str:
    """The model name as given, without surrounding blanks (it names the run: `meta-llama/Llama-3-8B` stays so in
    the manifest), or one line saying why it cannot name one: the rule kwh ingest applies to a manifest's model
    (runmeta.check_name), checked before anything runs rather than after the profile."""
    return runmeta.check_name("model", model, "--model")


def file_stem(model: str) -> str:
    """The model name as one path-safe file or folder name: a HuggingFace id's `/` becomes `--` (as the
    HuggingFace cache spells it), anything else but letters, digits and `._+-` becomes `_`, and no leading dot,
    so the exports sit beside their manifest whatever the name.

    >>> file_stem("meta-llama/Llama-3-8B"), file_stem("../x y"), file_stem("conv_net")
    ('meta-llama--Llama-3-8B', '_--x_y', 'conv_net')
    """
    stem = "--".join(_UNSAFE_IN_FILE_NAME.sub("_", part) for part in model.split("/"))
    stem = re.sub(r"^\.+", "_", stem)
    return stem[:MODEL_NAME_LIMIT] or "model"


def check_options(options: Options) -> str:
    """Everything kwh profile can refuse before it runs anything; returns the model name."""
    if not options.command:
        raise ProfileError("no command to profile: kwh profile [OPTIONS] -- COMMAND ARGS...")
    if options.preset not in presets.PRESET_NAMES:
        raise ProfileError(f"unknown preset {options.preset!r}; presets: {', '.join(presets.PRESET_NAMES)}")
    if options.kernel_regex is not None:
        check_kernel_regex(options.kernel_regex)
    if options.discovery_from is not None:
        discovery.check_readable(options.discovery_from)
    return check_model_name(model_name(options))


def profile(options: Options, progress: Callable[[str], None] = lambda line: None) -> Result:
    """Run (or with dry_run, plan and list) the whole collection; see the module docstring."""
    model = check_options(options)
    out = options.out
    ncu = shutil.which(options.ncu)
    notes: list[str] = []
    # an earlier discovery output is read before anything is written: a bad one costs no folder
    given = discovery.read_any(options.discovery_from) if options.discovery_from else None
    if not options.dry_run:
        _check_machine(options, ncu)
    ncu = ncu or options.ncu
    method = given[0] if given else _discovery_method(options)
    common = _common_ncu_args(options)
    dirs = {"discovery": out / "discovery", "ncu": out / "ncu", "logs": out / "logs"}
    if not options.dry_run:
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
    facts = {} if options.dry_run else _facts(options, ncu)
    sampling = options.telemetry and _can_sample(notes)
    state = _State(options, model, facts, dirs["ncu"] / "manifest.json", {
        "pass": "targeted ncu", "preset": options.preset, "preset_cost": presets.preset(options.preset).cost,
        "clock_control": options.clock_control, "replay_mode": options.replay_mode})
    try:
        return _profile(options, model, ncu, method, common, dirs, facts, sampling, notes, state, progress, given)
    except KwhError as exc:
        state.finish(f"failed: {exc}")
        raise
    except KeyboardInterrupt:
        state.finish(f"interrupted: {state.step}")
        raise ProfileError(f"{state.step}: interrupted (Ctrl-C); {out / 'ncu' / 'manifest.json'} says "
                           f"profile_status \"interrupted: {state.step}\" and kwh ingest takes what was exported "
                           f"before; kept: {_kept(out)}") from None


class _State:
    """ncu/manifest.json while the profile runs: written first, and again at each step with what is known."""

    def __init__(self, options: Options, model: str, facts: dict, path: Path, run_facts: dict):
        self.options, self.model, self.facts, self.path, self.run_facts = options, model, facts, path, run_facts
        self.step = "start"
        # the discovery run's own manifest (torch, nsys: its output is ingested as a run of its own): path, facts
        self.discovery_manifest: tuple[Path, dict] | None = None

    def write_discovery(self, **run_facts) -> None:
        if self.discovery_manifest is None:
            return
        path, known = self.discovery_manifest
        known |= run_facts
        _write_json(path, _manifest(self.options, self.model, self.facts, known))

    def update(self, step: str | None = None, **run_facts) -> None:
        self.step = step or self.step
        self.run_facts |= run_facts
        self.finish(f"running: {self.step}")

    def finish(self, status: str) -> None:
        if self.options.dry_run or not self.path.parent.is_dir():
            return
        _write_json(self.path, _manifest(self.options, self.model, self.facts,
                                         self.run_facts | {"profile_status": status}))


def _profile(options: Options, model: str, ncu: str, method: str, common: list[str], dirs: dict, facts: dict,
             sampling: bool, notes: list[str], state: _State, progress: Callable[[str], None],
             given: tuple[str, list[tuple]] | None) -> Result:
    out = options.out
    steps: list[Step] = []
    # 1. discovery and the selection
    state.update("discovery")
    chosen, discovery_steps, ordered = _discover(options, method, model, facts, ncu, common, dirs, sampling,
                                                 progress, state, given)
    steps += discovery_steps
    # 1b. the same command without a profiler, timed (what the idle estimate compares the trace with)
    if method in TIMELINE_DISCOVERY and options.discovery_from is None and options.kernel_regex is None:
        steps += _unprofiled_timing(options, dirs, progress, notes, state)
    if chosen is not None:
        notes += chosen.notes
    regex = chosen.regex if chosen is not None else options.kernel_regex
    shown_regex = regex or "<regex of the kernels discovery selects>"

    # 2. the targeted pass: which launches, and what they will cost
    cap = DEFAULT_LAUNCH_COUNT if options.launch_count is None else (options.launch_count or None)
    window = None
    if chosen is not None and ordered is not None and options.invocation is None and _same_range(options):
        window = selection.launch_window(ordered, chosen, cap, options.launch_skip)
    skip = options.launch_skip if options.launch_skip is not None else (window.skip if window and window.skip else None)
    unasked = None if shutil.which(ncu) else f"{options.ncu} is not on the PATH here"
    checked = presets.check(presets.preset(options.preset), *_installed(ncu), unasked)
    notes += checked.notes
    stem = file_stem(model)           # the exports' name: beside manifest.json whatever the model's name holds
    report = dirs["ncu"] / stem
    # with --invocation each function's N-th launch is profiled: no default cap, the user's only
    count = (options.launch_count or None) if options.invocation is not None else cap
    kernel_filter = _kernel_filter(options, shown_regex, skip, count)
    target = [ncu, "--force-overwrite", "--export", str(report), *kernel_filter, *common, *checked.args,
              *options.command]
    steps.append(Step("ncu", target, samples=dirs["ncu"] / "nvml-samples.csv" if sampling else None))
    exports = [Step("export-raw", [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"],
                    stdout=dirs["ncu"] / f"{stem}.raw.csv"),
               Step("export-details", [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "details"],
                    stdout=dirs["ncu"] / f"{stem}.details.csv")]
    steps += exports
    ingest_sources = [dirs["ncu"]] + ([dirs["discovery"]] if method in TIMELINE_DISCOVERY
                                      and options.discovery_from is None and options.kernel_regex is None else [])
    estimate = _estimate(options, chosen, window, cap)
    run_facts = {"sections": checked.sections, "ncu_command": shlex.join(target),
                 "discovery": method if regex and chosen else "none (--kernel-regex)",
                 "kernel_regex": shown_regex, "kernel_filter": shlex.join(kernel_filter), "estimate": estimate}
    if chosen is not None:
        run_facts["selection"] = chosen.as_json()
    if window is not None:
        run_facts["launch_window"] = window.as_json()
    if options.dry_run:
        return Result(out, steps, chosen, shown_regex, _manifest(options, model, facts, state.run_facts | run_facts),
                      notes, ingest_sources, True, window, estimate)

    if chosen is not None:
        _write_json(out / "selection.json", chosen.as_json())
    progress(estimate_line(estimate))
    state.update("ncu", **run_facts)
    ncu_step = next(s for s in steps if s.name == "ncu")
    try:
        state.update("ncu", **_run(ncu_step, dirs["logs"], out, progress, nothing_profiled=shown_regex,
                                   expected=estimate.get("launches")))
    except NothingProfiled:
        if options.launch_skip is not None or not skip:
            raise
        # The window came from discovery's launch order, which a later run need not repeat: on the H100 a
        # torch.compile MLP launched 643 matching kernels under the PyTorch profiler (compiling, autotuning)
        # and fewer than 628 under ncu (the compile caches were warm), so --launch-skip 628 matched nothing.
        # Once more from the first matching launch, capped as before.
        kernel_filter = _kernel_filter(options, shown_regex, None, count)
        ncu_step.argv = [ncu, "--force-overwrite", "--export", str(report), *kernel_filter, *common, *checked.args,
                         *options.command]
        notes.append(f"the launch window (--launch-skip {skip}) lay past the launches the command made under ncu "
                     "(its launch order differed from discovery's: compile caches, autotuning); profiled from the "
                     "first matching launch instead")
        progress(f"nothing matched after --launch-skip {skip}: once more without it")
        state.update("ncu", window_dropped=f"--launch-skip {skip} matched nothing under ncu",
                     ncu_command=shlex.join(ncu_step.argv), kernel_filter=shlex.join(kernel_filter))
        window = None
        state.update("ncu", **_run(ncu_step, dirs["logs"], out, progress, nothing_profiled=shown_regex,
                                   expected=estimate.get("launches")))
    for step in exports:
        state.update(step.name)
        _run(step, dirs["logs"], out, progress)
    version = environment.ncu_version(ncu)
    if version:
        (dirs["ncu"] / "ncu_version.txt").write_text(version, encoding="utf-8")
        state.run_facts["ncu_version"] = next((l.split("Version", 1)[1].strip().split(" ")[0]
                                               for l in version.splitlines() if "Version" in l), None)
    profiled = _profiled(dirs["logs"] / "ncu.log", dirs["ncu"] / f"{stem}.raw.csv")
    state.run_facts["profiled_kernels"] = profiled
    if chosen is not None and options.invocation is None:
        notes += _compare(chosen, profiled, state.run_facts, window, cap, options)
    state.finish("complete")
    (out / "commands.sh").write_text("#!/bin/sh\n# kwh profile: every command it ran, in order\n"
                                     + "".join(s.shell() + "\n" for s in steps), encoding="utf-8")
    manifest = _manifest(options, model, facts, state.run_facts | {"profile_status": "complete"})
    return Result(out, steps, chosen, shown_regex, manifest, notes, ingest_sources, False, window, estimate)


def _estimate(options: Options, chosen: selection.Selection | None, window: selection.LaunchWindow | None,
              cap: int | None) -> dict:
    """Launches the targeted pass will profile and what they cost at the preset's prior seconds per launch
    (presets.toml, measured on an H100): {"launches", "matching_launches", "seconds_per_launch", "seconds",
    "basis"}; launches None where nothing says (a --kernel-regex without a cap)."""
    chosen_preset = presets.preset(options.preset)
    if options.invocation is not None and chosen is not None:
        launches, matching = len(chosen.kernels), None         # the N-th launch of each function
    elif window is not None:
        launches, matching = window.profiled, window.matching
    elif chosen is not None:
        matching = sum(k.launches for k in chosen.kernels)
        launches = matching if cap is None else min(cap, matching)
    else:
        launches, matching = cap, None
    per_launch = chosen_preset.seconds_per_launch_h100
    return {"launches": launches, "matching_launches": matching, "launch_count": cap,
            "default_cap": options.launch_count is None and options.invocation is None,
            "seconds_per_launch": per_launch, "basis": f"prior for preset {options.preset} (H100, presets.toml)",
            "seconds": round(launches * per_launch, 1) if launches is not None and per_launch else None}


def estimate_line(estimate: dict) -> str:
    """The estimate as one line: printed before the targeted pass, and by `kwh profile --dry-run`."""
    launches, matching, cap = estimate["launches"], estimate["matching_launches"], estimate["launch_count"]
    per_launch = estimate["seconds_per_launch"]
    if launches is None:
        return (f"estimate: every launch the regex matches (no --launch-count), ~{per_launch:g} s each "
                f"({estimate['basis']})")
    line = f"estimate: {launches:,} launch(es) x ~{per_launch:g} s ({estimate['basis']}) = about {_duration(estimate['seconds'])}"
    if cap is not None and matching is not None and matching > cap:
        which = f"the default cap is --launch-count {cap}" if estimate["default_cap"] else f"--launch-count {cap}"
        line += (f"; discovery saw {matching:,} matching launches (about {_duration(matching * per_launch)} for all): "
                 f"{which}, raise it with --launch-count N or --launch-count all")
    elif cap is not None and matching is None:
        line += f" at most (--launch-count {cap}; --launch-count all for every matching launch)"
    return line


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _discover(options: Options, method: str, model: str, facts: dict, ncu: str, common: list[str], dirs: dict,
              sampling: bool, progress: Callable[[str], None], state: _State,
              given: tuple[str, list[tuple]] | None = None) -> tuple[selection.Selection | None, list[Step], list[tuple] | None]:
    """The selection (None with --kernel-regex), the discovery steps (run unless dry_run; none with
    --discovery-from) and discovery's launches in launch order (None where its output has no order: an
    nsys summary). A torch or nsys discovery gets its manifest, written first so that it is kept should
    discovery fail, and again after with the pass's window."""
    if options.kernel_regex is not None:
        return None, [], None
    if options.discovery_from is not None:
        method, launches = given or discovery.read_any(options.discovery_from)
        return (_select(launches, options, str(options.discovery_from)), [],
                launches if discovery.in_launch_order(method) else None)
    out = options.out
    steps, output = _discovery_steps(method, options, ncu, common, dirs["discovery"])
    if sampling:
        steps[0].samples = dirs["discovery"] / "nvml-samples.csv"
    if options.dry_run:
        return None, steps, None
    manifest = {"torch": ("manifest.torchprof.json", "discovery (PyTorch profiler)"),
                "nsys": ("manifest.nsys.json", "discovery (nsys)")}.get(method)
    if manifest:
        state.discovery_manifest = (dirs["discovery"] / manifest[0], {"pass": manifest[1]})
        state.write_discovery()
    windows = []
    for step in steps:
        state.update(step.name)
        windows.append(_run(step, dirs["logs"], out, progress))
    launches, trace_facts = _read_discovery(method, output, out)
    if manifest:
        state.write_discovery(**windows[0], **trace_facts)
    return (_select(launches, options, str(output.relative_to(out))), steps,
            launches if discovery.in_launch_order(method) else None)


TIMER = Path(__file__).with_name("timed_run.py")
# Discovery passes whose output is a timeline run of its own (ingested beside the ncu exports): the un-profiled
# timing goes with them, as launch_bound compares it with their idle time.
TIMELINE_DISCOVERY = ("torch", "nsys")
UNPROFILED_TIMING = "unprofiled-timing.json"       # OUT/, beside selection.json: not an export, never ingested


def _unprofiled_timing(options: Options, dirs: dict, progress: Callable[[str], None], notes: list[str],
                       state: _State) -> list[Step]:
    """With a timeline discovery run here (TIMELINE_DISCOVERY) of a cudaProfilerStart/Stop region
    (--no-profile-from-start), one plain run of the command, no profiler attached, timed by timed_run.py over the
    same region. Its time goes into both manifests as the tags launch_bound reads (unprofiled_seconds,
    unprofiled_iterations, profiled_iterations: the same command, so the same iterations) with unprofiled_timed
    saying what was timed. Where discovery records the whole run there is no timing (a note says how to get one):
    the whole script's time includes its start-up (imports, model loading), which the trace's GPU span leaves
    out, so it could not bound the idle time, and an extra run of the command would be spent for nothing. Why a
    plain run and not the workload's own iteration timing: workloads report none in any one form, and the plain
    run times exactly the region the trace recorded. The timing is a bonus: a run that fails is a note."""
    if not options.unprofiled_timing:
        return []
    if _discovery_whole_run(options):
        notes.append("no un-profiled timing: discovery recorded the whole run, whose wall time includes start-up; "
                     "bracket the measured iterations with torch.cuda.profiler.start()/stop() and pass "
                     "--no-profile-from-start for the idle estimate to use one (--no-unprofiled-timing silences this)")
        return []
    if not discovery.is_python(options.command):
        notes.append("no un-profiled timing: kwh times a Python command (timed_run.py patches its "
                     "torch/CuPy profiler start/stop); --no-unprofiled-timing silences this")
        return []
    timing = dirs["logs"].parent / UNPROFILED_TIMING
    step = Step("unprofiled-timing", discovery.wrapped_command(options.command, TIMER, ["--out", str(timing)],
                                                               options.python))
    if options.dry_run:
        return [step]
    state.update(step.name)
    try:
        _run(step, dirs["logs"], options.out, progress)
        measured = json.loads(timing.read_text(encoding="utf-8"))
    except ProfileError as exc:
        notes.append(f"no un-profiled timing: {exc}")
        return [step]
    except (OSError, ValueError) as exc:
        notes.append(f"no un-profiled timing: {timing.name} unreadable ({exc})")
        return [step]
    seconds = measured.get("seconds") if isinstance(measured, dict) else None
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        notes.append("no un-profiled timing: the command never called torch.cuda.profiler.start()/stop() (or "
                     "CuPy's) in its plain run, so no region was timed")
        return [step]
    tags = {"unprofiled_seconds": round(seconds, 6),
            "unprofiled_timed": f"wall time between torch.cuda.profiler.start() and stop() ({measured.get('regions')} "
                                "region(s), GPU synchronized at both ends) in one plain run of the same command without "
                                "a profiler (kwh profile's timing run)"}
    iterations = options.metadata.get("iterations")
    if iterations is not None:
        tags |= {"unprofiled_iterations": iterations, "profiled_iterations": iterations}
    progress(f"un-profiled: {seconds:.4f} s between cudaProfilerStart and cudaProfilerStop")
    state.update(step.name, **tags)
    state.write_discovery(**tags)
    return [step]


def _check_machine(options: Options, ncu: str | None) -> None:
    """No GPU and no ncu are one line each, before anything runs."""
    if ncu is None:
        raise ProfileError(f"{options.ncu}: ncu (Nsight Compute) not found on PATH: install Nsight Compute or add "
                           "its folder (e.g. /usr/local/cuda/bin or /opt/nvidia/nsight-compute/<version>) to PATH, "
                           "or pass --ncu PATH; kwh profile --dry-run lists the commands without it")
    found, said = environment.gpus()
    if not found:
        raise ProfileError(f"no GPU: nvidia-smi -L found none ({said}); run kwh profile on a machine with an NVIDIA "
                           "GPU and driver, or --dry-run to list the commands")


def _discovery_method(options: Options) -> str:
    if options.discovery != "auto":
        return options.discovery
    if shutil.which(options.nsys):
        return "nsys"
    return "torch" if discovery.is_python(options.command) else "ncu"


def _common_ncu_args(options: Options) -> list[str]:
    """What both ncu passes share: replay mode, clock control, profiling range, NVTX."""
    args = ["--replay-mode", options.replay_mode, "--clock-control", options.clock_control]
    if not options.profile_from_start:
        args += ["--profile-from-start", "off"]
    if options.nvtx:
        args.append("--nvtx")
    return args


def _kernel_filter(options: Options, regex: str, skip: int | None = None, count: int | None = None) -> list[str]:
    """--kernel-name-base function --kernel-name regex:^(f|g)$ for a regex kwh built (a selection, kwh
    hot-kernels), --kernel-name-base demangled --kernel-name regex:R for any other (+ --launch-skip/--launch-count:
    `skip`, `count`), or with --invocation N: --kernel-id ::regex:R:N on function names. --kernel-id's fields
    are separated by colons, which the demangled regex holds (`at::`), so that form matches function names
    (`--kernel-name-base function`: `^(f|g)$`)."""
    limits = []
    if skip is not None:
        limits += ["--launch-skip", str(skip)]
    if count is not None:
        limits += ["--launch-count", str(count)]
    if options.invocation is not None:
        functions = selection.functions_in(regex)
        if functions is None and ":" in regex:
            raise ProfileError(f"--invocation matches function names (ncu --kernel-id, whose fields are colon-separated), "
                               f"and regex:{regex} holds a colon: give --kernel-regex as function names (^(f|g)$), "
                               "or one kwh profile / kwh hot-kernels built")
        pattern = selection.function_regex(functions) if functions else regex
        return ["--kernel-name-base", "function", "--kernel-id", f"::regex:{pattern}:{options.invocation}", *limits]
    functions = selection.functions_in(regex)
    if functions:
        # A selection's regex is given to ncu as its function names: on the H100 (ncu 2025.3.1) the demangled
        # form missed every cuDNN implicit-GEMM convolution of the conv net although the names were spelled
        # exactly as ncu's raw page writes them (the alternation held ATen kernels and the scope prefix;
        # `^(sm90_..._cudnn)$` alone, or the same list on --kernel-name-base function, matched them all), so
        # this form is the one the pass can be checked against (tools/device/ncu_regex_bisect2.sh).
        pattern = selection.function_regex(functions)
        return ["--kernel-name-base", "function", "--kernel-name", f"regex:{pattern}", *limits]
    return ["--kernel-name-base", "demangled", "--kernel-name", f"regex:{regex}", *limits]


def _discovery_steps(method: str, options: Options, ncu: str, common: list[str], folder: Path) -> tuple[list[Step], Path]:
    if method == "torch":
        trace = folder / "trace.json"
        return [Step("discovery", discovery.torch_command(options.command, trace, _discovery_whole_run(options),
                                                          options.python))], trace
    if method == "nsys":
        base = folder / "report"
        commands = discovery.nsys_commands(shutil.which(options.nsys) or options.nsys, options.command, base,
                                           _discovery_whole_run(options))
        return ([Step("discovery", commands[0]), Step("discovery-sqlite", commands[1]),
                 Step("discovery-stats", commands[2])], discovery.nsys_summary_path(base))
    report = folder / "durations"
    raw = folder / "durations.raw.csv"
    if options.discovery_from_start:
        common = [arg for i, arg in enumerate(common) if arg != "--profile-from-start"
                  and not (arg == "off" and common[i - 1] == "--profile-from-start")]
    return [Step("discovery", discovery.ncu_durations_command(ncu, options.command, report, common)),
            Step("discovery-export", [ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"], stdout=raw)], raw


def _discovery_whole_run(options: Options) -> bool:
    """Discovery records the whole run: always with --profile-from-start, and with --discovery-from-start
    for a command whose range the PyTorch profiler cannot see (JAX's ctypes cudaProfilerStart)."""
    return options.profile_from_start or options.discovery_from_start


def _same_range(options: Options) -> bool:
    """Whether discovery's launches are the ones the pass's --launch-skip/--launch-count count: not when
    discovery saw the whole run and the pass a cudaProfilerStart/Stop range (or when it cannot be told)."""
    return options.profile_from_start or not (options.discovery_from_start or options.discovery_from)


def _select(launches: list[tuple], options: Options, where: str) -> selection.Selection:
    kernels = selection.aggregate(launches)
    if not kernels:
        raise ProfileError(f"discovery saw no kernels ({where}): the command launched no CUDA kernel"
                           + ("" if _discovery_whole_run(options) else " between cudaProfilerStart and cudaProfilerStop"))
    return selection.select(kernels, options.top, options.cover_pct)


def _read_discovery(method: str, path: Path, out: Path) -> tuple[list[tuple], dict]:
    """Discovery's launches, and what the discovery run's manifest learns from its output: the median interval
    between the CPU calls that launched the kernels (cpu_launch_interval_ns, from a PyTorch trace)."""
    if not path.is_file():
        raise ProfileError(f"discovery ({method}) wrote no {path.relative_to(out)}; see {out / 'logs'}; kept: "
                           f"{_kept(out)}")
    try:
        if method == "torch":
            launches, cpu_interval = discovery.torch_trace_launches(path)
            return launches, ({"cpu_launch_interval_ns": cpu_interval} if cpu_interval is not None else {})
        return discovery.read(method, path), {}
    except KwhError as exc:
        raise ProfileError(f"discovery ({method}): {exc}; kept: {_kept(out)}") from None


def _installed(ncu: str) -> tuple[set[str] | None, set[str] | None]:
    """The sections and metric base names the installed ncu lists (None where it cannot say)."""
    if shutil.which(ncu) is None:
        return None, None
    status, text = environment.run_text([ncu, "--list-sections"])
    sections = presets.parse_sections(text) if status == 0 else None
    metrics: set[str] = set()
    for collection in presets.METRIC_COLLECTIONS:
        status, text = environment.run_text([ncu, "--query-metrics", "--query-metrics-collection", collection])
        if status == 0:
            metrics |= presets.parse_metrics(text)
    return sections or None, metrics or None


def _facts(options: Options, ncu: str) -> dict:
    facts = environment.host_facts() | environment.gpu_facts()
    if discovery.is_python(options.command):
        python = options.command[0] if not options.command[0].endswith(".py") else (options.python or sys.executable)
        facts |= environment.python_facts(python)
    return facts


def _manifest(options: Options, model: str, facts: dict, run: dict) -> dict:
    """Manifest keys as kwh reads them (runmeta.RUN_FIELDS, VERSION_KEYS; the rest become tags)."""
    manifest = {"model": model} | facts | {k: v for k, v in options.metadata.items() if v is not None} | run
    manifest["command"] = shlex.join(options.command)
    manifest["profiled_by"] = "kwh profile"
    return manifest


def _can_sample(notes: list[str]) -> bool:
    """NVML samples need pynvml (nvidia-ml-py) in kwh's Python."""
    import importlib.util
    if importlib.util.find_spec("pynvml") is None:
        notes.append("no NVML telemetry: pynvml is not installed (pip install nvidia-ml-py); --no-telemetry "
                     "silences this")
        return False
    return True


def _run(step: Step, logs: Path, out: Path, progress: Callable[[str], None],
         nothing_profiled: str | None = None, expected: int | None = None) -> dict:
    """Run one step (with its NVML sampler alongside); its failure becomes one ProfileError line.
    Returns the step's window, {"start_ns", "end_ns"} (what joins telemetry samples to the run), and for
    an ncu pass with `expected` launches the seconds per launch measured on its first ones."""
    log = logs / f"{step.name}.log"
    progress(f"running {step.name}: {step.shell()}")
    sampler = _start_sampler(step, logs)
    start_ns = time.time_ns()
    partial = step.stdout.with_name(step.stdout.name + PARTIAL_SUFFIX) if step.stdout else None
    clock = _LaunchClock(expected, progress)
    with log.open("w", encoding="utf-8") as log_file:
        try:
            status = _execute(step.argv, log_file, partial, clock)
        except OSError as exc:
            raise ProfileError(f"{step.name}: cannot start {step.argv[0]} ({exc.strerror or exc}); kept: {_kept(out)}") from None
        finally:
            end_ns = time.time_ns()
            _stop_sampler(sampler)
    text = log.read_text(encoding="utf-8", errors="replace")
    if partial is not None and partial.is_file():
        text += partial.read_text(encoding="utf-8", errors="replace")[:65536]
    where = f"see {log.relative_to(out.parent) if out.parent in log.parents else log}"
    if "ERR_NVGPUCTRPERM" in text:
        raise ProfileError(f"{step.name}: {PERMISSION_HELP}; {where}; kept: {_kept(out)}")
    if any(marker in text for marker in _NO_DEVICE):
        raise ProfileError(f"{step.name}: no GPU the command can use (the CUDA driver found no device); {where}; "
                           f"kept: {_kept(out)}")
    if "torch_discovery: the profiler never started" in text:
        raise ProfileError(f"{step.name}: the command never called torch.cuda.profiler.start(), which "
                           "--no-profile-from-start waits for: bracket its measured region with "
                           "torch.cuda.profiler.start()/stop(), or use --discovery ncu (a JAX step bracketed "
                           "with cudaProfilerStart/Stop: --discovery-from-start; README, JAX); "
                           f"{where}; kept: {_kept(out)}")
    crashed = signal_name(status)
    if crashed is not None:
        raise ProfileError(f"{step.name}: {_crash(step, crashed, status)}; {where}; kept: {_kept(out)}")
    if status != 0:
        raise ProfileError(f"{step.name}: the command failed (exit status {status}); {where}; kept: {_kept(out)}")
    if nothing_profiled is not None and _NOTHING_PROFILED in text:
        # ncu lists what ran after "Available Kernels:" ("1. saxpy")
        seen = re.findall(r"^\d+\. (.+)$", text.split("Available Kernels:", 1)[-1], re.M)
        launched = f"; the command launched {', '.join(seen[:8])}" + (" ..." if len(seen) > 8 else "") if seen else ""
        raise NothingProfiled(f"{step.name}: the kernel regex matched no launch, nothing was profiled "
                           f"(regex:{nothing_profiled}){launched}; {where}; kept: {_kept(out)}")
    if partial is not None:
        partial.replace(step.stdout)          # complete: the export takes its name
    return {"start_ns": start_ns, "end_ns": end_ns} | clock.facts()


def _execute(argv: list[str], log_file, partial: Path | None, clock: "_LaunchClock") -> int:
    """Run argv: stdout into `partial` (an export) or, with stderr, line by line into the log (the clock
    times ncu's ==PROF== lines as they come). A KeyboardInterrupt stops the child first (it may not have
    had the SIGINT: kwh's own process group may differ) and goes on up."""
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    if partial is not None:
        with partial.open("w", encoding="utf-8") as stdout:
            child = subprocess.Popen(argv, stdout=stdout, stderr=log_file, text=True, env=env)
            try:
                return child.wait()
            except BaseException:
                _stop(child)
                raise
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                             encoding="utf-8", errors="replace", bufsize=1)
    try:
        for line in child.stdout:
            log_file.write(line)
            clock.line(line)
        return child.wait()
    except BaseException:
        _stop(child)
        raise
    finally:
        child.stdout.close()


def _stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


class _LaunchClock:
    """Times ncu's `==PROF== Profiling "f" - N: ... - P passes` lines (one per profiled launch, printed when
    the launch is done) and, after the first MEASURED_LAUNCHES, prints the rate and the time left."""

    def __init__(self, expected: int | None, progress: Callable[[str], None]):
        self.expected, self.progress, self.times = expected, progress, []
        self.seconds_per_launch: float | None = None

    def line(self, line: str) -> None:
        if not line.startswith("==PROF== Profiling ") or " pass" not in line:
            return
        self.times.append(time.monotonic())
        done = len(self.times)
        if done == MEASURED_LAUNCHES or (self.expected is not None and done == self.expected and done > 1
                                         and self.seconds_per_launch is None):
            self.seconds_per_launch = (self.times[-1] - self.times[0]) / (done - 1)
            left = None if self.expected is None else max(self.expected - done, 0)
            self.progress(f"measured: {self.seconds_per_launch:.2f} s per launch over the first {done} launches"
                          + (f"; about {_duration(left * self.seconds_per_launch)} more for the other {left:,}"
                             if left else ""))

    def facts(self) -> dict:
        if self.seconds_per_launch is None:
            return {}
        return {"seconds_per_launch_measured": round(self.seconds_per_launch, 3), "launches_timed": len(self.times)}


def signal_name(status: int) -> str | None:
    """The signal an exit status says the process died of: -N from Python's subprocess, or 128+N as shells
    and ncu report a child's death (ncu on a JAX step: 139, SIGSEGV); None for an ordinary exit.

    >>> signal_name(139), signal_name(-11), signal_name(1), signal_name(0)
    ('SIGSEGV', 'SIGSEGV', None, None)
    """
    number = -status if status < 0 else status - 128 if 128 < status < 128 + 65 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def _crash(step: Step, name: str, status: int) -> str:
    """What a death by signal says: who died, and what to try."""
    who = "ncu" if step.runs_ncu() else "the command"
    if name in ("SIGINT", "SIGTERM", "SIGHUP"):
        return f"{who} was stopped by {name} (exit status {status})"
    if name == "SIGKILL":
        return f"{who} was killed (SIGKILL, exit status {status}): out of memory? (dmesg tells)"
    advice = f": narrow the pass and run it again: {NARROW_NCU}" if step.runs_ncu() else ""
    return f"{who} crashed with {name} (exit status {status}){advice}"


def _start_sampler(step: Step, logs: Path) -> subprocess.Popen | None:
    command = step.sampler()
    if command is None:
        return None
    with (logs / f"{step.name}-nvml.log").open("w", encoding="utf-8") as log:
        try:
            return subprocess.Popen(command, stdout=log, stderr=log)
        except OSError:
            return None       # telemetry is a bonus: a profile never fails for it


def _stop_sampler(sampler: subprocess.Popen | None) -> None:
    """SIGTERM: the sampler finishes its file and exits; killed if it does not within 10 s."""
    if sampler is None:
        return
    sampler.terminate()
    try:
        sampler.wait(timeout=10)
    except subprocess.TimeoutExpired:
        sampler.kill()
        sampler.wait()


def _profiled(log: Path, raw: Path | None = None) -> list[dict]:
    """The launches ncu profiled, from its `==PROF== Profiling "NAME" - N: 0%....100% - P passes` lines, each
    named as the raw page names it where that page holds the same number of launches: ncu's progress lines
    can name a launch after the one before it (on the H100, with --kernel-name-base demangled, cuDNN's
    convolutions came out as [first_layer, first_layer, gemm64, gemm64] where the report of the same run
    held first_layer, gemm64, gemm64, gemm64 by grid: tests/data/profile-h100/ncu_log_names_shifted)."""
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []:
        # `"saxpy" - 0: 0%...100% - 10 passes`, or with --kernel-id `"1:7:saxpy:2": ...` (context:stream:name:invocation)
        match = re.match(r'==PROF== Profiling "(.*?)"(?: - (\d+))?.*- (\d+) pass', line)
        if match:
            name, launch = match.group(1), match.group(2)
            parts = name.split(":")
            if launch is None and len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
                name = ":".join(parts[2:-1])
            found.append({"kernel": name, "function": selection.function_name(name),
                          "launch": int(launch) if launch else None, "passes": int(match.group(3))})
    names = _raw_page_names(raw) if raw is not None else None
    if names is not None and len(names) == len(found):
        for launch, name in zip(found, names):
            launch["kernel"], launch["function"] = name, selection.function_name(name)
    return found


def _raw_page_names(raw: Path) -> list[str] | None:
    """The Kernel Name of each launch of an ncu raw CSV page, in ID order (None when unreadable)."""
    import csv
    try:
        with raw.open(encoding="utf-8", newline="") as handle:
            rows = [row for row in csv.DictReader(handle) if (row.get("ID") or "").isdigit()]
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows or any(row.get("Kernel Name") is None for row in rows):
        return None
    return [row["Kernel Name"] for row in sorted(rows, key=lambda row: int(row["ID"]))]


def _compare(chosen: selection.Selection, profiled: list[dict], run_facts: dict,
             window: selection.LaunchWindow | None = None, cap: int | None = None,
             options: Options | None = None) -> list[str]:
    """Notes when the ncu pass did not profile what discovery saw, each naming its reason: the launch cap
    (the function's launches fall outside the window of --launch-skip/--launch-count, or ncu reached the
    cap first), the profiled range (--no-profile-from-start over a discovery that recorded the whole run),
    or the filter and the workload (the regex missed names it should match, as the demangled regex
    skipped the conv net's cuDNN convolutions; or the command picks kernels per run: cudnn.benchmark,
    torch.compile's or XLA's autotuning)."""
    got = {p["function"] for p in profiled}
    missing = [f for f in chosen.functions if f not in got]
    extra = sorted(got - set(chosen.functions))
    run_facts["selected_not_profiled"] = missing
    reasons: dict[str, list[str]] = {}
    for function in missing:
        reasons.setdefault(_not_profiled_reason(function, len(profiled), window, cap, options), []).append(function)
    run_facts["not_profiled_reasons"] = {function: reason for reason, functions in reasons.items()
                                         for function in functions}
    notes = []
    for reason, functions in reasons.items():
        share = sum(k.gpu_time_ns for k in chosen.kernels if k.function in functions) / chosen.total_ns * 100 \
            if chosen.total_ns else 0.0
        notes.append(f"ncu profiled no launch of {len(functions)} selected kernel function(s) ({share:.1f} % of the "
                     f"discovery GPU time): {', '.join(functions)}: {reason} (manifest: selected_not_profiled)")
    if extra:
        notes.append(f"ncu profiled kernel functions discovery did not select: {', '.join(extra)}")
    return notes


def _not_profiled_reason(function: str, profiled: int, window: selection.LaunchWindow | None, cap: int | None,
                         options: Options | None) -> str:
    raise_cap = "raise --launch-count (N, or all) or set --launch-skip"
    if window is not None and window.launches.get(function) and not window.in_window.get(function):
        return (f"launch cap: none of its {window.launches[function]:,} launches is among the {window.profiled:,} "
                f"profiled (--launch-skip {window.skip} --launch-count {window.count} of {window.matching:,} "
                f"matching launches); {raise_cap}")
    if cap is not None and profiled >= cap:
        return (f"launch cap: ncu reached --launch-count {cap} before its launch (the pass launched kernels in "
                f"another order than discovery saw); {raise_cap}")
    if options is not None and not options.profile_from_start and (options.discovery_from or options.discovery_from_start):
        return ("range: discovery recorded the whole run and the pass only the launches between cudaProfilerStart "
                "and cudaProfilerStop (--no-profile-from-start): it may run outside them")
    return ("the filter did not match it in the ncu pass, or the command launched other kernels this time "
            "(cudnn.benchmark, torch.compile or XLA autotuning pick kernels per run)")


def _kept(out: Path) -> str:
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.stat().st_size)
    return ", ".join(files[:12]) + (f" and {len(files) - 12} more" if len(files) > 12 else "") if files else "nothing"


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
