"""kwh profile and kwh hot-kernels (issue 24), without a GPU.

Real inputs throughout: the H100 runs of tests/data/profile-h100 (made by examples/workloads/run_on_gpu.sh),
the corpus's PyTorch traces and kernel-name pairs, nsys kernel summaries from public reports. Failures
are provoked with stand-in executables on PATH (an nvidia-smi that finds no GPU, an ncu that prints what
ncu prints): they replay real ncu output where there is one, and never write an export.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import DATA, rows
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.cli import main
from kwarehouse.collect import discovery, presets, profiling, selection
from kwarehouse.store.warehouse import Warehouse

RUNS = DATA / "profile-h100"
TRACES = [DATA / f"torch-trace-{m}" / "trace.json" for m in ("gpt2", "gpt2_train", "compiled_mlp", "custom_cupy")]
NSYS_SUMMARIES = sorted(DATA.glob("nsys-stats-*/*.csv"))
PROFILES = ("transformer_quick", "transformer_roofline", "conv_quick", "conv_roofline")
WORKLOAD = ["python3", "examples/workloads/transformer_block.py"]


def _installed_ncu() -> tuple[set[str], set[str]]:
    sections = presets.parse_sections((RUNS / "ncu_list_sections.txt").read_text())
    metrics = presets.parse_metrics(gzip.decompress((RUNS / "ncu_query_metrics_profiling.txt.gz").read_bytes()).decode())
    metrics |= presets.parse_metrics((RUNS / "ncu_query_metrics_launch.txt").read_text())
    metrics |= presets.parse_metrics((RUNS / "ncu_query_metrics_device.txt").read_text())
    return sections, metrics


# --- selection and the regex -------------------------------------------------------------------------------

def test_function_names_agree_across_tools():
    """ncu's name, its mangled name and the PyTorch trace's name of the same launch give one function
    name (455 launches of the six corpus models), and it is the last part of kwh's kernel_base."""
    from kwarehouse.normalize.identity import kernel_base
    pairs = list(csv.DictReader((DATA / "kernel-names" / "pairs.csv").open(encoding="utf-8")))
    assert len(pairs) == 455
    for pair in pairs:
        function = selection.function_name(pair["trace_name"])
        assert selection.function_name(pair["ncu_name"]) == function, pair
        if pair["ncu_mangled"]:
            assert selection.function_name(pair["ncu_mangled"]) == function, pair
        base = kernel_base(pair["trace_name"]).split("::")[-1]
        # kwh's kernel_base drops torch.compile's per-graph counter (signature_rules.csv)
        assert function == base or re.fullmatch(re.escape(base) + r"_\d+", function), pair


def test_regex_from_trace_names_matches_exactly_ncus_names_of_those_kernels():
    """The regex built from the trace's spelling matches ncu's spelling of the same kernels and nothing
    else: for every function of the corpus, over all 455 ncu names."""
    pairs = list(csv.DictReader((DATA / "kernel-names" / "pairs.csv").open(encoding="utf-8")))
    ncu_names = {p["ncu_name"] for p in pairs}
    for function in {selection.function_name(p["trace_name"]) for p in pairs}:
        pattern = re.compile(selection.kernel_regex([function]))
        matched = {n for n in ncu_names if pattern.search(n)}
        assert matched == {n for n in ncu_names if selection.function_name(n) == function}, function


def test_regex_escapes_and_anchors():
    pattern = re.compile(selection.kernel_regex(["elementwise_kernel"]))
    assert pattern.search("void at::elementwise_kernel<128, 4, void at::gpu_kernel_impl<T>(int)>(int, T3)")
    assert not pattern.search("void at::vectorized_elementwise_kernel<4, at::FillFunctor<float>>(int, T2)")
    assert not pattern.search("void at::foo<at::elementwise_kernel<1>>(int)")     # only as a template argument
    # a name with regex metacharacters is escaped, not interpreted
    odd = re.compile(selection.kernel_regex(["a+b.c"]))
    assert odd.search("a+b.c(int)") and not odd.search("aab_c(int)")
    # kwh's kernel_base drops torch.compile's counter: the regex takes any counter
    triton = re.compile(selection.kernel_regex(["triton_poi_fused_add"]))
    assert triton.search("triton_poi_fused_add_3") and not triton.search("triton_poi_fused_add_mul_3")


def test_doctests():
    import doctest
    assert doctest.testmod(selection).failed == 0


def test_invocation_takes_the_functions_of_a_built_regex(tmp_path):
    built = selection.kernel_regex(["saxpy", "sgemm_tiled"])
    lines = _dry_run("-o", str(tmp_path), "--kernel-regex", built, "--invocation", "1", "--", "./app")
    assert "--kernel-name-base function --kernel-id '::regex:^(saxpy|sgemm_tiled)$:1'" in lines[0]
    result = CliRunner().invoke(main, ["profile", "--dry-run", "--kernel-regex", "^at::foo", "--invocation", "1",
                                       "--", "./app"])
    assert _one_error_line(result).startswith("Error: --invocation matches function names")


def test_regex_matched_ncus_names_on_the_gpu():
    """On the H100 (ncu 2025.3.1) ncu took the regex as written: 2 launches of the two CuPy kernels."""
    lines = (RUNS / "regex_dialect.txt").read_text().splitlines()
    built = selection.kernel_regex(["saxpy", "sgemm_tiled"]).replace("|std::enable_if<.*>::type ", "")
    assert f"regex:{built} -> 2 launches" in lines


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name)
def test_selection_on_real_traces(trace):
    kernels = selection.aggregate(discovery.read_torch_trace(trace))
    top3 = selection.select(kernels, top=3)
    assert len(top3.kernels) == min(3, len(kernels))
    assert [k.gpu_time_ns for k in top3.kernels] == sorted((k.gpu_time_ns for k in top3.kernels), reverse=True)
    covering = selection.select(kernels, cover_pct=50)
    assert covering.covered_pct >= 50
    assert selection.select(kernels, cover_pct=50, top=1).kernels == covering.kernels[:1]
    # the fewest kernels: without the last one the rest fall short
    assert 100 * sum(k.gpu_time_ns for k in covering.kernels[:-1]) / covering.total_ns < 50
    pattern = re.compile(covering.regex)
    for kernel in covering.kernels:
        assert all(pattern.search(name) for name in kernel.names)


def test_torch_trace_durations_are_exact():
    launches = discovery.read_torch_trace(RUNS / "transformer_quick" / "discovery" / "trace.json")
    trace = json.loads((RUNS / "transformer_quick" / "discovery" / "trace.json").read_text())
    first = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    assert launches[0] == (first["name"], round(first["dur"] * 1000))
    assert len(launches) == 10


@pytest.mark.parametrize("path", NSYS_SUMMARIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_nsys_kernel_summaries(path):
    """Every variant of nsys's kernel summary (file, stdout with several reports, old header, usec,
    GridXYZ columns) gives the same totals."""
    launches = discovery.read_nsys_kernel_summary(path)
    assert launches and all(total > 0 and count > 0 for _, total, count in launches)
    if "a100" in path.parent.name:
        assert launches == [("saxpy(double *, double *, double *, double, int)", 88573480, 5)]
    chosen = selection.select(selection.aggregate(launches), top=2)
    assert all(re.search(chosen.regex, name) for k in chosen.kernels for name in k.names)


def test_nsys_summary_with_a_sfinae_return_type():
    """cuBLAS's gemv kernels print `std::enable_if<!T7, void>::type internal::gemvx::kernel<...>`."""
    launches = discovery.read_nsys_kernel_summary(DATA / "nsys-stats-rtx5090" / "summary_cuda_gpu_kern_sum.csv")
    gemv = [name for name, _, _ in launches if name.startswith("std::enable_if")]
    assert gemv and selection.function_name(gemv[0]) == "kernel"
    assert re.search(selection.kernel_regex(["kernel"]), gemv[0])


def test_ncu_duration_pass_on_the_gpu():
    """The non-Python discovery (one metric, every launch) of the CuPy workload: 3 iterations x 2 kernels."""
    launches = discovery.read_ncu_durations(RUNS / "custom_invocation" / "discovery" / "durations.raw.csv")
    assert [name for name, _ in launches] == ["saxpy", "sgemm_tiled"] * 3
    chosen = selection.select(selection.aggregate(launches), top=10)
    assert chosen.as_json() == json.loads((RUNS / "custom_invocation" / "selection.json").read_text())


def test_read_any_recognises_each_discovery_output():
    assert discovery.read_any(TRACES[0])[0] == "torch"
    assert discovery.read_any(RUNS / "custom_invocation" / "discovery" / "durations.raw.csv")[0] == "ncu"
    assert discovery.read_any(NSYS_SUMMARIES[0])[0] == "nsys"


def test_python_commands():
    assert discovery.is_python(["python3", "x.py"]) and discovery.is_python(["python3.12", "-m", "m"])
    assert discovery.is_python(["./train.py"]) and not discovery.is_python(["./app", "x.py"])


# --- presets and ncu commands -----------------------------------------------------------------------------

def test_installed_ncu_knows_every_preset_section():
    sections, metrics = _installed_ncu()
    assert {"SpeedOfLight", "SpeedOfLight_HierarchicalTensorRooflineChart", "WarpStateStats"} <= sections
    assert len(metrics) > 1000 and "launch__grid_size" in metrics and "dram__bytes_read" in metrics
    for name in presets.PRESET_NAMES:
        checked = presets.check(presets.preset(name), sections, metrics)
        assert checked.notes == [], name


def test_unknown_section_or_metric_is_dropped_with_a_note():
    sections, metrics = _installed_ncu()
    fake = presets.Preset("x", "", None, ("SpeedOfLight", "NoSuchSection"), None, ("gpu__time_duration.sum", "no__such.sum"))
    checked = presets.check(fake, sections, metrics)
    assert checked.args == ["--section", "SpeedOfLight", "--metrics", "gpu__time_duration.sum"]
    assert checked.notes == ["this ncu has no section NoSuchSection: dropped from preset x",
                             "this ncu lists no metric no__such.sum: dropped from preset x"]
    unchecked = presets.check(fake, None, None)
    assert "--section" in unchecked.args and len(unchecked.notes) == 2


def test_preset_passes_are_the_measured_ones():
    """presets.toml's passes_h100 are what ncu printed on the H100 (passes.txt)."""
    measured = {}
    for line in (RUNS / "passes.txt").read_text().splitlines():
        name, *rest = line.split(" ", 1)
        counts = set(re.findall(r"- (\d+) passes", rest[0]))
        assert len(counts) == 1, line          # both kernels took the same number
        measured[name] = int(counts.pop())
    assert measured == {n: presets.preset(n).passes_h100 for n in presets.PRESET_NAMES}


def test_portable_preset_names_what_kwh_reads():
    """Every headline metric kwh's kernels table reads first is in the portable list, unless ncu
    computes it in a section (theoretical occupancy) and lists no such metric."""
    import tomllib
    from importlib import resources
    headline = tomllib.loads(resources.files("kwarehouse.normalize").joinpath("headline_metrics.toml").read_text())
    portable = set(presets.preset("portable").metrics)
    sections, metrics = _installed_ncu()
    for column in ("duration_ns", "sm_pct", "dram_pct", "mem_pct", "l1_hit_pct", "l2_hit_pct",
                   "achieved_occupancy_pct", "tensor_pipe_pct", "registers_per_thread", "grid_size", "block_size"):
        first = headline[column]["metrics"][0]
        assert all(m.strip() in portable for m in first.split("+")), column
    assert "sm__maximum_warps_per_active_cycle_pct" not in metrics


def _dry_run(*args: str, ncu_missing_ok=True) -> list[str]:
    result = CliRunner().invoke(main, ["profile", "--dry-run", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@pytest.mark.parametrize("name", presets.PRESET_NAMES)
def test_dry_run_commands_per_preset(name, tmp_path):
    trace = RUNS / "transformer_quick" / "discovery" / "trace.json"
    lines = _dry_run("--preset", name, "--top", "4", "--discovery-from", str(trace), "-o", str(tmp_path),
                     "--no-profile-from-start", "--", *WORKLOAD)
    target = next(line for line in lines if " --kernel-name-base " in line)
    chosen = presets.preset(name)
    # a selection goes to ncu as function names (the demangled form missed cuDNN's convolutions on the H100)
    assert "--kernel-name-base function --kernel-name 'regex:^(" in target
    assert "--replay-mode kernel --clock-control base --profile-from-start off --nvtx" in target
    for section in chosen.sections:
        assert f"--section {section}" in target
    if chosen.section_set:
        assert f"--set {chosen.section_set}" in target
    if chosen.metrics:
        assert "--metrics " + ",".join(chosen.metrics) in target
    assert target.endswith(" ".join(WORKLOAD))
    # the regex on the command line names the functions the real run selected from the same discovery output
    manifest = json.loads((RUNS / "transformer_quick" / "ncu" / "manifest.json").read_text())
    functions = selection.functions_in(manifest["kernel_regex"])
    assert f"'regex:{selection.function_regex(functions)}'" in target
    assert any(line.endswith("--csv --page raw > " + str(tmp_path / "ncu" / "transformer_block.raw.csv")) for line in lines)
    assert any("--page details" in line for line in lines)
    assert not (tmp_path / "ncu").exists()      # a dry run writes nothing


def test_dry_run_lists_the_discovery_pass(tmp_path):
    lines = _dry_run("-o", str(tmp_path), "--", *WORKLOAD)
    assert "torch_discovery.py --trace" in lines[0] and lines[0].endswith("--from-start -- examples/workloads/transformer_block.py")
    assert "regex:<regex of the kernels discovery selects>" in lines[1]
    # with a cudaProfilerStart/Stop region, the plain timed run of the same command comes after discovery
    lines = _dry_run("-o", str(tmp_path), "--no-profile-from-start", "--", *WORKLOAD)
    assert "--profiler-api" in lines[0] and "timed_run.py --out" in lines[1]
    assert lines[1].endswith("unprofiled-timing.json -- examples/workloads/transformer_block.py")
    lines = _dry_run("-o", str(tmp_path), "--discovery", "ncu", "--clock-control", "none", "--", "./app", "--n", "3")
    assert lines[0].startswith("ncu --force-overwrite --export") and "--metrics gpu__time_duration.sum" in lines[0]
    assert "--clock-control none" in lines[0] and lines[0].endswith("./app --n 3")
    lines = _dry_run("-o", str(tmp_path), "--discovery", "nsys", "--no-profile-from-start", "--", "./app")
    assert lines[0].startswith("nsys profile --trace=cuda,nvtx --capture-range=cudaProfilerApi")
    assert lines[1].startswith("nsys export --type sqlite") and lines[2].startswith("nsys stats --report cuda_gpu_kern_sum")


def test_the_commands_own_options_stay_its_own(tmp_path):
    """Everything from the command's first word on is the command's, with or without `--`."""
    lines = _dry_run("-o", str(tmp_path), "--discovery", "ncu", "python3", "x.py", "--batch", "8", "--top", "2")
    assert lines[0].endswith("python3 x.py --batch 8 --top 2")


def test_instance_limits(tmp_path):
    lines = _dry_run("-o", str(tmp_path), "--kernel-regex", "^gemm", "--launch-skip", "2", "--launch-count", "5",
                     "--", "./app")
    assert "--kernel-name 'regex:^gemm' --launch-skip 2 --launch-count 5" in lines[0]
    lines = _dry_run("-o", str(tmp_path), "--invocation", "2", "--discovery-from",
                     str(RUNS / "custom_invocation" / "discovery" / "durations.raw.csv"), "--", "./app")
    target = next(line for line in lines if "--kernel-id" in line)
    manifest = json.loads((RUNS / "custom_invocation" / "ncu" / "manifest.json").read_text())
    assert "--kernel-name-base function --kernel-id '::regex:^(saxpy|sgemm_tiled)$:2'" in target
    assert "--kernel-id '::regex:^(saxpy|sgemm_tiled)$:2'" in manifest["ncu_command"]


def test_python_module_entry_point_runs_without_the_warehouse(tmp_path):
    """python3 -m kwarehouse.collect: the same command where polars and DuckDB are not installed."""
    import subprocess
    code = ("import sys; sys.modules['polars'] = sys.modules['duckdb'] = sys.modules['pyarrow'] = None; "
            "sys.argv = ['kwarehouse.collect', '--dry-run', '-o', sys.argv[1], '--', 'python3', 'x.py']; "
            "import runpy; runpy.run_module('kwarehouse.collect', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "torch_discovery.py" in done.stdout


def test_nvml_sampler_writes_kwhs_sample_format():
    """The sampler kwh profile runs writes exactly the columns kwh's NVML sample reader knows."""
    import ast
    from kwarehouse.ingest import nvml_samples
    tree = ast.parse((Path(profiling.__file__).with_name("nvml_sampler.py")).read_text())
    written = next(ast.literal_eval(node.value) for node in tree.body
                   if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COLUMNS")
    assert written == nvml_samples.COLUMNS
    assert profiling.SAMPLE_INTERVAL_MS == nvml_samples.DEFAULT_INTERVAL_MS


def test_sampler_runs_beside_discovery_and_the_ncu_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(profiling, "_can_sample", lambda notes: True)
    result = profiling.profile(profiling.Options(WORKLOAD, tmp_path, dry_run=True))
    sampled = {s.name: s.sampler() for s in result.steps if s.samples}
    assert sorted(sampled) == ["discovery", "ncu"]
    assert sampled["ncu"][1:5] == ["-P", str(profiling.SAMPLER), str(tmp_path / "ncu" / "nvml-samples.csv"), "--interval-ms"]
    lines = _dry_run("-o", str(tmp_path), "--", *WORKLOAD)
    assert sum(line.startswith("#   while it runs: ") for line in lines) == 2
    assert not any(s.samples for s in profiling.profile(profiling.Options(WORKLOAD, tmp_path, dry_run=True,
                                                                      telemetry=False)).steps)


# --- failures: one line each -------------------------------------------------------------------------------

FAKE_NCU = textwrap.dedent('''\
    #!{python}
    """Stands in for ncu: answers --version/--list-sections/--query-metrics/--import with the H100's real
    output (tests/data/profile-h100) and a profiling run as FAKE_NCU_MODE says."""
    import gzip, os, sys
    from pathlib import Path
    runs = Path({runs!r})
    replay = runs / os.environ.get("FAKE_NCU_RUN", "transformer_quick")
    args = sys.argv[1:]
    if args == ["--version"]:
        print((replay / "ncu" / "ncu_version.txt").read_text(), end="")
    elif "--list-sections" in args:
        print((runs / "ncu_list_sections.txt").read_text(), end="")
    elif "--query-metrics" in args:
        collection = args[args.index("--query-metrics-collection") + 1]
        path = runs / f"ncu_query_metrics_{{collection}}.txt"
        print(gzip.decompress(Path(str(path) + ".gz").read_bytes()).decode() if collection == "profiling"
              else path.read_text(), end="")
    elif "--import" in args:
        page = args[args.index("--page") + 1]
        text = next((replay / "ncu").glob(f"*.{{page}}.csv")).read_text()
        if page == "details" and os.environ.get("FAKE_NCU_MODE") == "interrupt-details":
            import signal, time        # Ctrl-C while the details page is half written
            print(text[:len(text) // 2], end="", flush=True)
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(30)
        print(text, end="")
    else:
        mode = os.environ.get("FAKE_NCU_MODE", "replay")
        if mode == "perm":
            print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                  "Counters on the target device 0. For instructions on enabling permissions and to get more "
                  "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
            sys.exit(1)
        if mode == "fail":
            print("==ERROR== The application returned an error code (1).", file=sys.stderr)
            sys.exit(1)
        if mode == "nothing" or (mode == "skip-past-end" and "--launch-skip" in args):
            print((runs / "custom_nothing" / "logs" / "ncu.log").read_text(), end="")
            sys.exit(0)
        if mode == "segv":
            import signal
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "exit139":
            sys.exit(139)
        lines = (replay / "logs" / "ncu.log").read_text().splitlines(keepends=True)
        if mode == "cap":          # ncu honouring --launch-count: only the first N launches are profiled
            cap = int(args[args.index("--launch-count") + 1])
            profiled = [i for i, line in enumerate(lines) if line.startswith("==PROF== Profiling")]
            lines = [line for i, line in enumerate(lines) if i not in profiled[cap:]]
        for line in lines:
            print(line, end="", file=sys.stderr, flush=True)
            if mode == "slow" and line.startswith("==PROF== Profiling"):
                import time
                time.sleep(0.3)
    ''')
FAKE_SMI = "#!/bin/sh\n[ \"$FAKE_GPUS\" = none ] && { echo 'No devices were found'; exit 6; }\n" \
           "[ \"$1\" = -L ] && { echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'; exit 0; }\nexit 9\n"


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """A PATH holding only stand-ins for ncu and nvidia-smi (and sh/python for them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ncu", FAKE_NCU.format(python=sys.executable, runs=str(RUNS))), ("nvidia-smi", FAKE_SMI)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/bin{os.pathsep}/usr/bin")
    return bin_dir


def _profile(*args: str):
    return CliRunner().invoke(main, ["profile", *args], catch_exceptions=False)


def _one_error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    return errors[0]


def test_ncu_missing(tmp_path, fake_tools):
    (fake_tools / "ncu").unlink()
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--", *WORKLOAD))
    assert line.startswith("Error: ncu: ncu (Nsight Compute) not found on PATH: install Nsight Compute or add its folder")
    assert not (tmp_path / "p").exists()


def test_no_gpu(tmp_path, fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", "none")
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--", *WORKLOAD))
    assert line == ("Error: no GPU: nvidia-smi -L found none (No devices were found); run kwh profile on a machine "
                    "with an NVIDIA GPU and driver, or --dry-run to list the commands")
    (fake_tools / "nvidia-smi").unlink()
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--", *WORKLOAD))
    assert "nvidia-smi not found on PATH (no NVIDIA driver?)" in line


def test_counter_permission(tmp_path, fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--kernel-regex", "^x", "--", *WORKLOAD))
    assert line.startswith("Error: ncu: ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): run kwh "
                           "profile as root")
    assert "NVreg_RestrictProfilingToAdminUsers=0" in line and line.endswith("kept: logs/ncu.log, ncu/manifest.json")


def test_command_failing(tmp_path, fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "fail")
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--kernel-regex", "^x", "--", *WORKLOAD))
    assert line == "Error: ncu: the command failed (exit status 1); see p/logs/ncu.log; kept: logs/ncu.log, ncu/manifest.json"


def test_discovery_command_failing_keeps_what_it_wrote(tmp_path, fake_tools):
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--discovery", "torch", "--",
                                    sys.executable, "-c", "import sys; sys.exit(4)"))
    assert line.startswith("Error: discovery: the command failed (exit status ")
    assert line.endswith("kept: discovery/manifest.torchprof.json, logs/discovery.log, ncu/manifest.json")


def test_regex_matching_nothing(tmp_path, fake_tools, monkeypatch):
    """ncu's real output when the filter matched nothing (the CuPy workload on the H100)."""
    monkeypatch.setenv("FAKE_NCU_MODE", "nothing")
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--kernel-regex", "^no_such_kernel$", "--", *WORKLOAD))
    assert line == ("Error: ncu: the kernel regex matched no launch, nothing was profiled (regex:^no_such_kernel$); "
                    "the command launched saxpy, sgemm_tiled; see p/logs/ncu.log; kept: logs/ncu.log, ncu/manifest.json")


def test_no_kernels_in_discovery(tmp_path):
    empty = tmp_path / "trace.json"
    empty.write_text('{"traceEvents": []}')
    result = CliRunner().invoke(main, ["profile", "--dry-run", "--discovery-from", str(empty), "--", "./app"])
    assert _one_error_line(result) == f"Error: discovery saw no kernels ({empty}): the command launched no CUDA kernel"


# --- the whole pipeline, replaying a real run --------------------------------------------------------------

def test_profile_replaying_the_h100_run_writes_and_ingests(tmp_path, fake_tools):
    """kwh profile through the same discovery output as the real run, with ncu replaying that run's output:
    the same regex, exports, a manifest kwh reads, and --ingest."""
    out, warehouse = tmp_path / "p", tmp_path / "wh"
    trace = RUNS / "transformer_quick" / "discovery" / "trace.json"
    result = _profile("-o", str(out), "--top", "6", "--no-profile-from-start", "--dtype", "bf16", "--batch", "8",
                      "--seq-len", "512", "--task", "inference", "--seed", "0", "--warmup", "3", "--iterations", "1",
                      "--discovery-from", str(trace), "--ingest", "-w", str(warehouse), "--", *WORKLOAD)
    assert result.exit_code == 0, result.output
    assert "profiled 7 launch(es) of 4 kernel function(s) with preset quick" in result.output
    real = json.loads((RUNS / "transformer_quick" / "ncu" / "manifest.json").read_text())
    manifest = json.loads((out / "ncu" / "manifest.json").read_text())
    assert manifest["kernel_regex"] == real["kernel_regex"]
    assert manifest["selection"] == real["selection"]
    assert manifest["selected_not_profiled"] == []
    assert 0 < manifest["end_ns"] - manifest["start_ns"] < 60e9     # the ncu pass's window, for telemetry
    assert (out / "commands.sh").read_text().count("\n") == 5
    assert (out / "ncu" / "transformer_block.raw.csv").read_text() == \
        (RUNS / "transformer_quick" / "ncu" / "transformer_block.raw.csv").read_text()
    (run,) = rows(Warehouse(warehouse), "SELECT model, tool, dtype, batch, seq_len, task FROM runs")
    assert run == ("transformer_block", "ncu", "bf16", 8, 512, "inference")


# --- the real H100 runs ------------------------------------------------------------------------------------

MANIFEST_FIELDS = ("model", "task", "dtype", "batch", "gpu", "sm_arch", "driver", "cuda", "torch", "python",
                   "ncu_version", "sm_clock_mhz", "max_sm_clock_mhz", "power_limit_w", "pstate", "clock_control",
                   "ncu_command", "preset", "selection", "seed", "warmup", "iterations", "host", "date")


@pytest.mark.parametrize("name", PROFILES)
def test_real_run_manifest_is_filled(name):
    manifest = json.loads((RUNS / name / "ncu" / "manifest.json").read_text())
    for key in MANIFEST_FIELDS:
        assert manifest.get(key) not in (None, ""), key
    assert manifest["gpu"] == "NVIDIA H100 80GB HBM3" and manifest["sm_arch"] == "9.0" and manifest["sm_count"] == 132
    assert manifest["ncu_version"] == "2025.3.1.0" and manifest["torch"] == "2.11.0+cu130"
    assert manifest["clock_control"] == "base" and "--clock-control base" in manifest["ncu_command"]
    assert (manifest["seq_len"] == 512) if name.startswith("transformer") else (manifest["image_size"] == "224")
    assert manifest["preset"] == name.split("_")[1]


@pytest.mark.parametrize("name", PROFILES)
def test_real_run_profiled_the_selected_kernels(name):
    """What ncu profiled (its ==PROF== lines, and the kernels of the raw page) is exactly the selection.
    The conv runs were re-made after kwh profile gave ncu the selection as function names
    (--kernel-name-base function): with the demangled regex, ncu 2025.3.1 on the H100 profiled none of
    the conv net's cuDNN implicit-GEMM convolutions, whose names the regex spelled exactly."""
    manifest = json.loads((RUNS / name / "ncu" / "manifest.json").read_text())
    selected = {k["function"] for k in manifest["selection"]["kernels"]}
    profiled = {selection.function_name(p["kernel"]) for p in manifest["profiled_kernels"]}
    assert profiled == selected
    # (the transformer runs were made before kwh profile recorded selected_not_profiled)
    assert manifest.get("selected_not_profiled", []) == []
    raw = next((RUNS / name / "ncu").glob("*.raw.csv"))
    with raw.open(encoding="utf-8") as handle:
        names = [row["Kernel Name"] for row in csv.DictReader(handle) if row["ID"].isdigit()]
    assert names and {selection.function_name(n) for n in names} <= selected
    assert all(re.search(manifest["kernel_regex"], n) for n in names)
    if name.startswith("transformer"):
        assert len(manifest["profiled_kernels"]) == 7
    else:
        # the trimmed raw page still holds a launch of every selected function, the convolutions included
        assert {selection.function_name(n) for n in names} == selected
        assert any(f.startswith("sm90_xmma_fprop_implicit_gemm") for f in selected)
        assert "--kernel-name-base function --kernel-name 'regex:^(" in manifest["ncu_command"]


def test_real_run_nvml_samples_ingest(tmp_path):
    """The NVML sampler ran inside kwh profile on the H100 (conv_quick's ncu pass): its samples ingest as
    telemetry of the GPU that ran the pass, GPM values included."""
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([RUNS / "conv_quick" / "ncu" / "nvml-samples.csv"], warehouse)
    assert report.ok and not report.failed
    lines = (RUNS / "conv_quick" / "ncu" / "nvml-samples.csv").read_text().splitlines()
    found = rows(warehouse, "SELECT count(DISTINCT line), min(gpu_name), max(value) FILTER (WHERE field = 'sm_active') > 0, "
                            "count(DISTINCT field) FILTER (WHERE field IN ('sm_active', 'tensor_active')) FROM gpu_samples")
    assert found == [(len(lines) - 1, "NVIDIA H100 80GB HBM3", True, 2)]


@pytest.fixture(scope="module")
def profiled_warehouse(tmp_path_factory):
    """Each real run's ncu folder and its PyTorch-profiler discovery trace (what --ingest reads)."""
    warehouse = Warehouse(tmp_path_factory.mktemp("profiled") / "wh")
    sources = [RUNS / n / part for n in PROFILES for part in ("ncu", "discovery")] + [RUNS / "custom_invocation" / "ncu"]
    report = ingest_job.ingest(sources, warehouse)
    assert report.ok and not report.failed
    return warehouse


def test_real_runs_ingest(profiled_warehouse):
    found = rows(profiled_warehouse, "SELECT model, tool, count(*), count(*) FILTER (WHERE r.tags['preset'] = 'roofline' "
                                     "AND run_id IN (SELECT run_id FROM kernels WHERE tensor_flops > 0)) "
                                     "FROM runs r GROUP BY 1, 2 ORDER BY 1, 2")
    # the roofline preset's tensor counters reached the kernels table of both models; conv_quick's NVML
    # samples (discovery and ncu pass) are two telemetry runs
    assert found == [("conv_net", "ncu", 2, 1), ("conv_net", "telemetry", 2, 0), ("conv_net", "torch", 2, 0),
                     ("custom_kernel", "ncu", 1, 0),
                     ("transformer_block", "ncu", 2, 1), ("transformer_block", "torch", 2, 0)]


# --- kwh hot-kernels ---------------------------------------------------------------------------------------

def test_hot_kernels_regex_is_profiles_regex(profiled_warehouse):
    """From the warehouse, the transformer's top 4 by timeline time are what kwh profile selected from its
    discovery trace, and the regex is the same."""
    result = CliRunner().invoke(main, ["-w", str(profiled_warehouse.root), "hot-kernels", "--model", "transformer_block",
                                       "--top", "4", "--regex-only"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((RUNS / "transformer_quick" / "ncu" / "manifest.json").read_text())
    assert result.output.strip() == manifest["kernel_regex"]


def test_hot_kernels_fleet_and_per_model(profiled_warehouse):
    """Merged over the fleet (kernel_popularity) and per model (kernel_time): the same selection rule."""
    from kwarehouse.collect.hot_kernels import hot_kernels
    con = profiled_warehouse.connect()
    fleet = hot_kernels(profiled_warehouse, cover_pct=50, con=con).selections["all models"]
    assert fleet.covered_pct >= 50 and fleet.regex.startswith("^(void ")
    per_model = hot_kernels(profiled_warehouse, top=30, per_model=True, con=con).selections
    assert sorted(per_model) == ["conv_net", "custom_kernel", "transformer_block"]
    assert per_model["custom_kernel"].functions == ["sgemm_tiled", "saxpy"]
    merged = hot_kernels(profiled_warehouse, ("conv_net", "transformer_block"), top=30, con=con).selections
    assert set(merged["conv_net, transformer_block"].functions) == \
        set(per_model["conv_net"].functions) | set(per_model["transformer_block"].functions)
    con.close()
    result = CliRunner().invoke(main, ["-w", str(profiled_warehouse.root), "hot-kernels", "--model", "nope"])
    assert _one_error_line(result) == "Error: no kernels of model nope in the warehouse; kwh summary lists the models"


def test_profiled_launches_are_named_by_the_raw_page():
    """ncu's progress lines named cuDNN's convolutions one launch late (--kernel-name-base demangled, H100,
    regex:^(first_layer|gemm64)$); the raw page of the same report names them by what ran (grids agree)."""
    folder = RUNS / "ncu_log_names_shifted"
    short = lambda name: "first_layer" if "image_first_layer" in name else "gemm64"  # noqa: E731
    from_log = profiling._profiled(folder / "ncu.log")
    assert [short(p["kernel"]) for p in from_log] == ["first_layer", "first_layer", "gemm64", "gemm64"]
    named = profiling._profiled(folder / "ncu.log", folder / "conv_net.raw.csv")
    assert [short(p["function"]) for p in named] == ["first_layer", "gemm64", "gemm64", "gemm64"]
    assert [p["passes"] for p in named] == [1, 1, 1, 1]
    with (folder / "conv_net.raw.csv").open(encoding="utf-8") as handle:
        grids = [row["Grid Size"] for row in csv.DictReader(handle) if row["ID"].isdigit()]
    assert grids == ["(2, 7, 32)", "(15, 8, 1)", "(15, 8, 1)", "(110, 1, 1)"]
