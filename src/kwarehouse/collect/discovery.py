"""The discovery pass: a cheap run of the command that says which kernels take the GPU time.

Three ways, chosen by --discovery (auto picks the first that applies):
  nsys   when nsys is on the PATH: `nsys profile --trace=cuda,nvtx`, then its SQLite export and the
         `cuda_gpu_kern_sum` report as CSV (both kept; kwh ingests them as an nsys run);
  torch  for a Python command: the PyTorch profiler (CUDA activity through CUPTI, like nsys: real
         kernel durations, no replay), its Chrome trace kept as discovery/trace.json (kwh ingests it
         as a torch run, so the model gets timeline time beside the ncu counters);
  ncu    otherwise: ncu collecting one metric, gpu__time_duration.sum, for every launch (one replay
         pass each; durations under ncu's clock control, small kernels read long).
A GPU machine with ncu and PyTorch but no nsys is common (the one these exports were made on is one), so
the torch and ncu ways are the ones tested on a GPU; nsys is built and parsed from real nsys output.

With --no-profile-from-start the command brackets its measured region with cudaProfilerStart/Stop
(torch.cuda.profiler.start()/stop()): ncu gets --profile-from-start off, nsys
--capture-range=cudaProfilerApi, and the PyTorch profiler records between the same two calls.

Parsing is standard library only: a GPU machine without polars still selects kernels.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

from kwarehouse.errors import KwhError

METHODS = ("auto", "torch", "ncu", "nsys")
NSYS_KERNEL_REPORT = "cuda_gpu_kern_sum"
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")
# nsys stats columns by unit suffix
_UNIT_NS = {"ns": 1, "nsec": 1, "us": 1e3, "usec": 1e3, "ms": 1e6, "msec": 1e6, "s": 1e9, "sec": 1e9}
# ncu units of gpu__time_duration
_NCU_TIME_UNIT_NS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
WRAPPER = Path(__file__).with_name("torch_discovery.py")


def is_python(argv: list[str]) -> bool:
    """A Python command: `python3 ...`, `python3.12 ...` or `./script.py ...`."""
    return bool(argv) and (bool(_PYTHON.match(Path(argv[0]).name)) or argv[0].endswith(".py"))


def torch_command(argv: list[str], trace: Path, from_start: bool, python: str | None = None) -> list[str]:
    """The command run under the PyTorch profiler (torch_discovery.py runs the script or module)."""
    interpreter, rest = (argv[0], argv[1:]) if _PYTHON.match(Path(argv[0]).name) else (python or sys.executable, argv)
    return [interpreter, str(WRAPPER), "--trace", str(trace), "--from-start" if from_start else "--profiler-api",
            "--", *rest]


def ncu_durations_command(ncu: str, argv: list[str], report: Path, common: list[str]) -> list[str]:
    """One metric for every launch: the cheapest ncu pass that ranks kernels by time."""
    return [ncu, "--force-overwrite", "--export", str(report), "--metrics", "gpu__time_duration.sum", *common, *argv]


def nsys_commands(nsys: str, argv: list[str], base: Path, from_start: bool) -> list[list[str]]:
    capture = [] if from_start else ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return [
        [nsys, "profile", "--trace=cuda,nvtx", *capture, "--force-overwrite=true", "--output", str(base), *argv],
        [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "--output", f"{base}.sqlite", f"{base}.nsys-rep"],
        [nsys, "stats", "--report", NSYS_KERNEL_REPORT, "--format", "csv", "--force-export=false",
         "--output", str(base), f"{base}.nsys-rep"],
    ]


def nsys_summary_path(base: Path) -> Path:
    """Where `nsys stats --report cuda_gpu_kern_sum --output BASE` writes its CSV."""
    return base.parent / f"{base.name}_{NSYS_KERNEL_REPORT}.csv"


def read_torch_trace(path: Path) -> list[tuple[str, int]]:
    """(kernel name, duration ns) of every kernel event of a PyTorch profiler Chrome trace."""
    try:
        trace = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise KwhError(f"{path}: not a readable PyTorch profiler trace ({exc})") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise KwhError(f'{path}: no "traceEvents" list; expected prof.export_chrome_trace() output')
    kernels = [e for e in events if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    # in launch order, the order ncu's --launch-skip/--launch-count count in: by the CUDA API call's
    # correlation id where every event has one (kernels of several streams start out of call order), else by start
    if all(isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), int) for e in kernels):
        kernels.sort(key=lambda e: e["args"]["correlation"])
    else:
        kernels.sort(key=lambda e: float(e.get("ts", 0)))
    # dur is in microseconds with nanosecond decimals ("dur": 14.464)
    return [(str(e.get("name", "")), round(float(e.get("dur", 0)) * 1000)) for e in kernels]


def read_ncu_durations(path: Path) -> list[tuple[str, int]]:
    """(kernel name, gpu__time_duration ns) per launch of an ncu raw page (`--csv --page raw`)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise KwhError(f"{path}: no ncu raw page (no \"ID\" header line)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units = rows[0], rows[1]
    try:
        name_col, time_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    except ValueError:
        raise KwhError(f"{path}: no Kernel Name or gpu__time_duration.sum column in the raw page") from None
    scale = _NCU_TIME_UNIT_NS.get(units[time_col].strip(), 1)
    launches = []
    for row in rows[2:]:
        if len(row) <= max(name_col, time_col):
            continue
        value = row[time_col].replace(",", "").strip()     # ncu prints thousands separators: "1,123"
        try:
            launches.append((row[name_col], round(float(value) * scale)))
        except ValueError:
            continue                                         # "n/a": a launch ncu could not time
    return launches


def read_nsys_kernel_summary(path: Path) -> list[tuple[str, int, int]]:
    """(kernel name, total ns, instances) per line of an nsys cuda_gpu_kern_sum (or old gpukernsum) CSV, a file of
    its own or stdout of `nsys stats` holding several reports (the first kernel summary is read)."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        header = next(csv.reader([line]), [])
        total = next((c for c in header if c.startswith("Total Time")), None)
        if "Name" in header and total and ("Instances" in header):
            unit = re.search(r"\((\w+)\)", total)
            scale = _UNIT_NS.get(unit.group(1) if unit else "ns", 1)
            name_col, total_col, count_col = header.index("Name"), header.index(total), header.index("Instances")
            out = []
            for row in csv.reader(lines[i + 1:]):
                if not row or row[0].startswith("Processing [") or len(row) <= max(name_col, total_col):
                    break
                out.append((row[name_col], round(float(row[total_col].replace(",", "")) * scale),
                            int(row[count_col].replace(",", ""))))
            return out
    raise KwhError(f"{path}: no cuda_gpu_kern_sum table (a header with Name, Total Time and Instances)")


def kind_of(path: Path) -> str:
    """Which discovery output a file is, from its first bytes: "torch" (a PyTorch profiler trace),
    "ncu" (an ncu raw page with gpu__time_duration.sum) or "nsys" (an nsys kernel summary CSV)."""
    with path.open("rb") as handle:
        head = handle.read(4096).lstrip()
    if head.startswith(b"{"):
        return "torch"
    if b'"ID"' in head or b"==PROF==" in head:
        return "ncu"
    return "nsys"


def read(method: str, path: Path) -> list[tuple]:
    """The launches (or summary lines) of a discovery output of `method`."""
    return {"torch": read_torch_trace, "ncu": read_ncu_durations, "nsys": read_nsys_kernel_summary}[method](path)


def in_launch_order(method: str) -> bool:
    """Whether `method`'s output lists launches in launch order (an nsys summary has one line per kernel)."""
    return method in ("torch", "ncu")


def read_any(path: Path) -> tuple[str, list[tuple]]:
    """(method, launches) from an existing discovery output (for --discovery-from)."""
    method = kind_of(path)
    return method, read(method, path)
