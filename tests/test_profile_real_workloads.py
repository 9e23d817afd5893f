"""kwh profile on real workloads (issue 31, part 4), without a GPU: stdlib shadowing, the estimate and the
launch cap, the interrupted folder, deaths by signal, XLA's autotuning kernels.

Real inputs: the H100 runs of tests/data/profile-h100 (jax_step and compiled_mlp_cprofile were made by
tools/device/profile_real_workloads.sh). ncu is the stand-in of test_profile.py (replaying a real run's
output); torch is a stand-in package whose profiler exports a real H100 trace, so the wrapper runs here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DATA, rows
from kwarehouse.jobs import ingest as ingest_job
from kwarehouse.collect import discovery, profiling, selection
from kwarehouse.store.warehouse import Warehouse
from test_profile import RUNS, TRACES, WORKLOAD, _one_error_line, _profile, fake_tools  # noqa: F401 (fixture)

SRC = Path(profiling.__file__).parents[2]
JAX = RUNS / "jax_step"
MLP = RUNS / "compiled_mlp_cprofile"
REAL_TRACE = RUNS / "transformer_quick" / "discovery" / "trace.json"

# A stand-in for torch: the profiler API torch_discovery.py uses, exporting a real trace of the H100.
STANDIN_TORCH = {
    "torch/__init__.py": """
        from torch import autograd, cuda, profiler, version
        __version__ = "0+stand-in"
    """,
    "torch/version.py": "cuda = None\n",
    "torch/cuda/__init__.py": "from torch.cuda import profiler\ndef synchronize():\n    pass\n",
    "torch/cuda/profiler.py": "def start():\n    pass\ndef stop():\n    pass\n",
    "torch/autograd/__init__.py": "from torch.autograd import profiler\n",
    "torch/autograd/profiler.py": "class emit_nvtx:\n    pass\n",
    "torch/profiler.py": f"""
        import shutil
        class ProfilerActivity:
            CPU, CUDA = "cpu", "cuda"
        class profile:
            def __init__(self, **kwargs):
                pass
            def start(self):
                pass
            def stop(self):
                pass
            def export_chrome_trace(self, path):
                shutil.copyfile({str(REAL_TRACE)!r}, path)
    """,
}
# A workload as transformers and torch.compile are: cProfile at import, and a package that imports its
# modules lazily on attribute access (transformers' _LazyModule), one of which needs pstats and profile.
WORKLOAD_FILES = {
    "train.py": """
        import cProfile
        import lazy_models
        assert cProfile.run.__module__ == "cProfile", cProfile.run
        print("workload ok:", lazy_models.modeling.profiled())
    """,
    "lazy_models/__init__.py": """
        import importlib
        def __getattr__(name):
            return importlib.import_module(f".{name}", __name__)
    """,
    "lazy_models/modeling.py": """
        import profile, pstats
        def profiled():
            return profile.run.__module__ + "/" + pstats.Stats.__name__
    """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


@pytest.fixture
def standin_torch(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _write(site, STANDIN_TORCH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(SRC)]))
    return site


# --- 1. no module of kwarehouse.collect stands in for the standard library ---------------------------------

def test_no_collect_module_is_named_like_a_standard_library_module():
    """torch_discovery.py and nvml_sampler.py run as files, with this folder first on sys.path: a
    collect/profile.py shadowed the standard library's profile there (cProfile: "module 'profile' has no
    attribute 'run'")."""
    folder = Path(profiling.__file__).parent
    names = {path.stem for path in folder.glob("*.py")} | {path.name for path in folder.iterdir() if path.is_dir()}
    assert "torch_discovery" in names and not names & sys.stdlib_module_names - {"__init__", "__main__"}


def test_wrapper_runs_a_workload_importing_cprofile(tmp_path, standin_torch):
    """The discovery wrapper runs a script that imports cProfile, and a lazily imported module that
    imports profile and pstats; the script's own folder is on the path, the wrapper's is not."""
    _write(tmp_path / "work", WORKLOAD_FILES)
    trace = tmp_path / "trace.json"
    command = discovery.torch_command([sys.executable, str(tmp_path / "work" / "train.py")], trace, True)
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "workload ok: profile/Stats" in done.stdout
    assert discovery.read_torch_trace(trace) == discovery.read_torch_trace(REAL_TRACE)


def test_profile_with_torch_discovery_of_a_cprofile_workload(tmp_path, standin_torch, fake_tools):
    """The whole kwh profile (discovery through the wrapper, ncu replaying the H100 run) on that workload."""
    _write(tmp_path / "work", WORKLOAD_FILES)
    out = tmp_path / "p"
    result = _profile("-o", str(out), "--discovery", "torch", "--top", "6", "--no-telemetry", "--",
                      sys.executable, str(tmp_path / "work" / "train.py"))
    assert result.exit_code == 0, result.output
    assert "workload ok: profile/Stats" in (out / "logs" / "discovery.log").read_text()
    manifest = json.loads((out / "ncu" / "manifest.json").read_text())
    assert manifest["profile_status"] == "complete" and manifest["model"] == "train"


def test_cprofile_workload_ran_under_kwh_profile_on_the_h100():
    """tools/device/profile_real_workloads.sh: discovery and the ncu pass of a torch.compile MLP importing
    cProfile both ran it to the end (it prints cProfile.run's module last)."""
    for log in ("discovery.log", "ncu.log"):
        assert "cProfile.run is cProfile" in (MLP / "logs" / log).read_text()
    manifest = json.loads((MLP / "ncu" / "manifest.json").read_text())
    assert manifest["profile_status"] == "complete" and len(manifest["profiled_kernels"]) == 6


# --- 2. cost: the estimate, the default cap, the window, the reasons ----------------------------------------

def _target(lines: list[str]) -> str:
    return next(line for line in lines if " --kernel-name-base " in line)


def _dry(*args: str) -> list[str]:
    from click.testing import CliRunner
    from kwarehouse.cli import main
    result = CliRunner().invoke(main, ["profile", "--dry-run", "--no-telemetry", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_default_cap_and_estimate(tmp_path):
    conv = RUNS / "conv_quick" / "discovery" / "trace.json"
    lines = _dry("-o", str(tmp_path), "--top", "6", "--discovery-from", str(conv), "--", "python3", "conv_net.py")
    assert f"--launch-count {profiling.DEFAULT_LAUNCH_COUNT}" in _target(lines) and "--launch-skip" not in _target(lines)
    assert "# estimate: 34 launch(es) x ~0.9 s (prior for preset quick (H100, presets.toml)) = about 31 s" in lines
    lines = _dry("-o", str(tmp_path), "--top", "6", "--launch-count", "5", "--preset", "roofline",
                 "--discovery-from", str(conv), "--", "python3", "conv_net.py")
    assert "--launch-skip 2 --launch-count 5" in _target(lines)
    estimate = next(line for line in lines if line.startswith("# estimate"))
    assert estimate.startswith("# estimate: 5 launch(es) x ~1.5 s") and "discovery saw 34 matching launches" in estimate
    assert "raise it with --launch-count N or --launch-count all" in estimate
    assert "--launch-count" not in _target(_dry("-o", str(tmp_path), "--launch-count", "all", "--discovery-from",
                                                str(conv), "--", "python3", "conv_net.py"))
    # --kernel-regex: no discovery, the cap alone bounds the pass
    lines = _dry("-o", str(tmp_path), "--kernel-regex", "^gemm", "--", "./app")
    assert _target(lines).startswith("ncu --force-overwrite") and f"--launch-count {profiling.DEFAULT_LAUNCH_COUNT}" in lines[0]


@pytest.mark.parametrize("trace", TRACES + [REAL_TRACE, RUNS / "conv_quick" / "discovery" / "trace.json"],
                         ids=lambda p: p.parent.name if p.parent.name != "discovery" else p.parents[1].name)
def test_launch_window_holds_the_most_instance_time(trace):
    """Against every window of every size: the window chosen holds the most of the selection's GPU time by
    instance (an instance counted once, with all its time), so a cap never goes first to cheap launches."""
    launches = discovery.read_torch_trace(trace)
    chosen = selection.select(selection.aggregate(launches), top=5)
    order = [(n, d) for n, d in launches if selection.is_kernel(n) and selection.function_name(n) in chosen.functions]
    total = {}
    for name, duration in order:
        total[name] = total.get(name, 0) + duration
    for cap in range(1, len(order) + 1):
        window = selection.launch_window(launches, chosen, cap)
        best = max(sum(total[n] for n in {n for n, _ in order[i:i + cap]}) for i in range(len(order) - cap + 1))
        held = sum(total[n] for n in {n for n, _ in order[window.skip:window.skip + cap]})
        assert held == best and window.profiled == min(cap, len(order)), cap


def test_cap_goes_to_the_hot_instances_not_the_first_launches():
    """The conv net's first matching launches are cheap elementwise ones; 3 launches from the start hold
    less of the selection's time than the window kwh profile picks."""
    launches = discovery.read_torch_trace(RUNS / "conv_quick" / "discovery" / "trace.json")
    chosen = selection.select(selection.aggregate(launches), top=6)
    window = selection.launch_window(launches, chosen, 3)
    first = selection.launch_window(launches, chosen, 3, skip=0)
    assert window.skip > 0 and window.covered_pct > first.covered_pct


def test_rate_is_measured_on_the_first_launches(tmp_path, fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "slow")
    result = _profile("-o", str(tmp_path / "p"), "--top", "6", "--no-telemetry", "--discovery-from", str(REAL_TRACE),
                      "--", *WORKLOAD)
    assert result.exit_code == 0, result.output
    measured = re.search(r"measured: ([\d.]+) s per launch over the first 3 launches; about \d+ s more for the other 7",
                         result.output)
    assert measured and 0.25 < float(measured.group(1)) < 2, result.output
    assert result.output.index("estimate: 10 launch(es)") < result.output.index("measured:")
    manifest = json.loads((tmp_path / "p" / "ncu" / "manifest.json").read_text())
    assert 0.25 < manifest["seconds_per_launch_measured"] < 2 and manifest["estimate"]["launches"] == 10


def test_not_profiled_note_names_the_launch_cap(tmp_path, fake_tools, monkeypatch):
    """ncu profiled 2 launches (--launch-count 2): the other selected functions are blamed on the cap,
    not on cudnn.benchmark."""
    monkeypatch.setenv("FAKE_NCU_MODE", "cap")
    result = _profile("-o", str(tmp_path / "p"), "--top", "6", "--launch-count", "2", "--no-telemetry",
                      "--discovery-from", str(REAL_TRACE), "--", *WORKLOAD)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("Note: ncu profiled no launch")]
    assert notes and all(": launch cap: " in note and "raise --launch-count" in note for note in notes), notes
    assert "cudnn.benchmark" not in result.output
    manifest = json.loads((tmp_path / "p" / "ncu" / "manifest.json").read_text())
    assert set(manifest["not_profiled_reasons"]) == set(manifest["selected_not_profiled"]) != set()


def test_window_past_the_end_is_dropped(tmp_path, fake_tools, monkeypatch):
    """As on the H100 (compiled_mlp_cprofile/logs/ncu_roofline_window_past_the_end.log): under ncu the command
    made fewer matching launches than discovery saw, so --launch-skip matched nothing; the pass runs once
    more from the first matching launch."""
    assert "No kernels were profiled" in (MLP / "logs" / "ncu_roofline_window_past_the_end.log").read_text()
    monkeypatch.setenv("FAKE_NCU_MODE", "skip-past-end")
    result = _profile("-o", str(tmp_path / "p"), "--top", "6", "--launch-count", "3", "--no-telemetry",
                      "--discovery-from", str(REAL_TRACE), "--", *WORKLOAD)
    assert result.exit_code == 0, result.output
    assert "Note: the launch window (--launch-skip " in result.output and "profiled 7 launch(es)" in result.output
    manifest = json.loads((tmp_path / "p" / "ncu" / "manifest.json").read_text())
    assert "--launch-skip" not in manifest["ncu_command"] and "--launch-count 3" in manifest["ncu_command"]
    assert manifest["window_dropped"].endswith("matched nothing under ncu") and manifest["profile_status"] == "complete"


def test_range_is_the_reason_for_a_bracketed_jax_step():
    """The JAX step on the H100: discovery from the start, the pass inside cudaProfilerStart/Stop; the
    functions that only ran while jax.jit compiled are named as outside the range."""
    manifest = json.loads((JAX / "ncu" / "manifest.json").read_text())
    assert manifest["selected_not_profiled"] and all(
        reason.startswith("range: ") for reason in manifest["not_profiled_reasons"].values())


# --- 3. the manifest first, an interrupted folder -----------------------------------------------------------

def test_interrupted_profile_leaves_an_ingestible_folder(tmp_path, fake_tools):
    """Ctrl-C while ncu writes the details page (the stand-in sends kwh SIGINT half-way): the manifest says
    where it stopped, the cut page keeps its .part name, and the raw page ingests under the model."""
    out = tmp_path / "p"
    env = os.environ | {"FAKE_NCU_MODE": "interrupt-details", "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "kwarehouse.collect", "-o", str(out), "--top", "6", "--no-telemetry",
                           "--discovery-from", str(REAL_TRACE), "--", *WORKLOAD], capture_output=True, text=True,
                          env=env, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert errors[0].startswith("Error: export-details: interrupted (Ctrl-C); ")
    manifest = json.loads((out / "ncu" / "manifest.json").read_text())
    assert manifest["profile_status"] == "interrupted: export-details" and manifest["model"] == "transformer_block"
    assert (out / "ncu" / "transformer_block.details.csv.part").stat().st_size > 0
    assert not (out / "ncu" / "transformer_block.details.csv").exists()
    # what the old kwh profile left: an empty details page under its real name; it fails alone
    (out / "ncu" / "transformer_block.details.csv").write_text("")
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([out / "ncu"], warehouse)
    (run,) = report.runs
    assert run.model == "transformer_block" and run.kernels == 7
    assert any("partial kwh profile" in note and "interrupted: export-details" in note for note in run.notes)
    tags = dict(rows(warehouse, "SELECT tags FROM runs")[0][0])
    assert tags["profile_status"] == "interrupted: export-details"
    assert rows(warehouse, "SELECT DISTINCT model FROM kernels") == [("transformer_block",)]


def test_manifest_is_written_before_the_pass_and_says_a_failure(tmp_path, fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "fail")
    _one_error_line(_profile("-o", str(tmp_path / "p"), "--kernel-regex", "^x", "--no-telemetry", "--", *WORKLOAD))
    manifest = json.loads((tmp_path / "p" / "ncu" / "manifest.json").read_text())
    assert manifest["profile_status"] == "failed: ncu: the command failed (exit status 1); see p/logs/ncu.log; " \
                                         "kept: logs/ncu.log, ncu/manifest.json"
    assert manifest["model"] == "transformer_block" and "--kernel-name 'regex:^x'" in manifest["ncu_command"]


# --- 4. a death by signal says which -------------------------------------------------------------------------

@pytest.mark.parametrize("mode, status", [("segv", -11), ("exit139", 139)])
def test_ncu_crash_names_the_signal(tmp_path, fake_tools, monkeypatch, mode, status):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    line = _one_error_line(_profile("-o", str(tmp_path / "p"), "--kernel-regex", "^x", "--no-telemetry", "--",
                                    *WORKLOAD))
    assert line.startswith(f"Error: ncu: ncu crashed with SIGSEGV (exit status {status}): narrow the pass and run it "
                           "again: fewer sections (--preset quick), fewer launches (--launch-count 10)")
    assert "or a newer ncu; see p/logs/ncu.log" in line


# --- 5. XLA's autotuning kernels -----------------------------------------------------------------------------

def test_xla_autotuning_kernels_are_left_out_of_the_selection():
    """The JAX step's trace (PyTorch profiler from the start, H100): XLA's redzone checks, delay kernels and
    buffer comparisons took most of its GPU time; the selection leaves them out and says so."""
    kernels = selection.aggregate(discovery.read_torch_trace(JAX / "discovery" / "trace.json"))
    autotune = {k.function for k in kernels if k.autotune}
    assert autotune == {"RedzoneAllocatorKernelImpl", "DelayKernel", "xla_fp_comparison", "RepeatBufferKernelImpl"}
    chosen = selection.select(kernels, top=4)
    assert not autotune & set(chosen.functions) and chosen.functions[:2] == ["gemm_fusion_dot_2", "gemm_fusion_dot_1"]
    assert chosen.notes[0].startswith("left out 4 autotuning kernel function(s) (91.")
    assert json.loads((JAX / "selection.json").read_text())["kernels"][0]["function"] == "gemm_fusion_dot_2"


def test_autotune_op_class_in_the_warehouse_and_hot_kernels(tmp_path):
    """Ingested, the same kernels get op class autotune (op_class_rules.csv, as the selection reads it), and
    kwh hot-kernels and kwh summary's top kernels leave them out."""
    from kwarehouse.collect.hot_kernels import hot_kernels
    from kwarehouse.answers.summary import summary_tables
    warehouse = Warehouse(tmp_path / "wh")
    report = ingest_job.ingest([JAX / "discovery", JAX / "ncu"], warehouse)
    assert report.ok and not report.failed, report.failed
    found = rows(warehouse, "SELECT DISTINCT kernel_base FROM kernel_launches WHERE op_class = 'autotune' ORDER BY 1")
    assert [selection.function_name(base) for (base,) in found] == \
        ["DelayKernel", "RedzoneAllocatorKernelImpl", "RepeatBufferKernelImpl", "xla_fp_comparison"]
    for (base,) in found:
        assert selection.is_autotune(base)
    fleet = hot_kernels(warehouse, top=5).selections["all models"]
    assert fleet.functions and not {"RedzoneAllocatorKernelImpl", "DelayKernel"} & set(fleet.functions)
    columns, top = summary_tables(warehouse, top=50)[1]
    assert top and all(row[columns.index("op_class")] != "autotune" for row in top)
