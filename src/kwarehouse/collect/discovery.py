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
import itertools
import json
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from kwarehouse.errors import InputError

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


def wrapped_command(argv: list[str], wrapper: Path, flags: list[str], python: str | None = None) -> list[str]:
    """A Python command run through one of kwh's wrapper scripts (timed_run.py) by the command's interpreter."""
    interpreter, rest = (argv[0], argv[1:]) if _PYTHON.match(Path(argv[0]).name) else (python or sys.executable, argv)
    return [interpreter, str(wrapper), *flags, "--", *rest]


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


# Discovery outputs are read in bounded memory: a file larger than this is refused before it is read (kwh
# ingest refuses the same size, ingest.base.MAX_READ_BYTES), a line or one trace event longer than
# LINE_LIMIT is refused where it is met, and only what the selection needs is kept per launch. A whole-file
# read of a 3 GB file once ended in a csv traceback at 6.3 GB RSS, and /dev/zero was read forever (issue 32).
SIZE_LIMIT = 2 << 30
LINE_LIMIT = 1 << 20
# One trace event (or another top-level value of a trace) may be longer: a CPU op's shapes and stack.
EVENT_LIMIT = 16 << 20
READ_BYTES = 1 << 20
# The CUDA calls that submit GPU work, as the PyTorch profiler names them (runtime and driver API)
_LAUNCH_CALL = re.compile(r"^(cuda|cu)(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy\w*Async|Memset\w*Async)")


def check_readable(path: Path) -> int:
    """The size of a discovery output kwh may read: a regular file within SIZE_LIMIT, else one line saying what
    to do (a device or a pipe never ends: /dev/zero was read forever)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise InputError(path, f"cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(path, "not a regular file (a device, pipe or folder); give --discovery-from the trace.json, "
                         "ncu raw page or nsys kernel summary CSV a discovery pass wrote")
    if info.st_size > SIZE_LIMIT:
        raise InputError(path, f"{_size(info.st_size)} is more than kwh profile reads as a discovery output "
                         f"({_size(SIZE_LIMIT)}); trim it (profile fewer iterations or steps, or record a "
                         "cudaProfilerStart/Stop range with --no-profile-from-start) and select from that")
    return info.st_size


def _size(size: int) -> str:
    """
    >>> _size(3_221_225_472), _size(2 << 30), _size(65536)
    ('3.2 GB', '2.1 GB', '66 KB')
    """
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} KB"


def _bounded_lines(path: Path, handle) -> Iterator[str]:
    """The lines of a text file, each at most LINE_LIMIT characters (a longer one is refused, naming its line)."""
    number = 0
    while True:
        line = handle.readline(LINE_LIMIT + 1)
        if not line:
            return
        number += 1
        if len(line) > LINE_LIMIT and not line.endswith("\n"):
            raise InputError(path, f"a line longer than {LINE_LIMIT:,} characters: not a discovery output (trace.json, "
                             "ncu raw page, nsys kernel summary CSV)?", line=number)
        yield line


def _open_text(path: Path):
    check_readable(path)
    return path.open(encoding="utf-8", errors="replace", newline="")


def read_torch_trace(path: Path) -> list[tuple[str, int]]:
    """(kernel name, duration ns) of every kernel event of a PyTorch profiler Chrome trace."""
    return torch_trace_launches(path)[0]


def torch_trace_launches(path: Path) -> tuple[list[tuple[str, int]], int | None]:
    """The trace's kernels as read_torch_trace gives them, and the median interval in ns between the CPU calls
    that launched them (cudaLaunchKernel, cuLaunchKernelEx, ...: the CPU side of the launches; None without
    them). The trace is streamed event by event (_TraceEvents), keeping per kernel its name, duration and order."""
    names: dict[str, str] = {}
    kernels: list[tuple[int | None, float, str, int]] = []
    calls: dict[int, float] = {}
    with _open_text(path) as handle:
        for event in _TraceEvents(path, handle):
            if not isinstance(event, dict):
                continue
            category, args = event.get("cat"), event.get("args")
            correlation = args.get("correlation") if isinstance(args, dict) else None
            correlation = correlation if isinstance(correlation, int) else None
            if category == "kernel" and event.get("ph") == "X":
                name = str(event.get("name", ""))
                kernels.append((correlation, _number(event.get("ts")), names.setdefault(name, name),
                                round(_number(event.get("dur")) * 1000)))   # dur: us with ns decimals ("dur": 14.464)
            elif category in ("cuda_runtime", "cuda_driver") and correlation is not None \
                    and _LAUNCH_CALL.match(str(event.get("name", ""))):
                calls[correlation] = _number(event.get("ts"))
    # in launch order, the order ncu's --launch-skip/--launch-count count in: by the CUDA API call's
    # correlation id where every event has one (kernels of several streams start out of call order), else by start
    if all(k[0] is not None for k in kernels):
        kernels.sort(key=lambda k: k[0])
    else:
        kernels.sort(key=lambda k: k[1])
    launch_times = sorted(calls[k[0]] for k in kernels if k[0] in calls)
    return [(k[2], k[3]) for k in kernels], _median_interval_ns(launch_times)


def _median_interval_ns(times_us: list[float]) -> int | None:
    """The median spacing of sorted timestamps in microseconds, as whole ns (None for fewer than two)."""
    if len(times_us) < 2:
        return None
    import statistics
    return round(statistics.median(b - a for a, b in zip(times_us, times_us[1:])) * 1000)


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


class _TraceEvents:
    """The objects of a Chrome trace's "traceEvents" array, decoded one at a time from a stream (json's
    raw_decode over a buffer refilled READ_BYTES at a time), so memory holds one event, not the file. Other
    top-level values are decoded and dropped; any one value longer than EVENT_LIMIT is refused."""

    def __init__(self, path: Path, handle):
        self.path, self.handle, self.buffer, self.pos, self.eof = path, handle, "", 0, False
        self.offset = 0                     # characters of the file before the buffer
        self.decoder = json.JSONDecoder()

    def __iter__(self):
        if self._next_char() == "\ufeff":
            self.pos += 1
        self._expect("{", "a JSON object")
        found = False
        if self._next_char() == "}":
            self.pos += 1
        else:
            while True:
                key = self._value()
                if not isinstance(key, str):
                    raise self._error("not a JSON object (a key that is not a string)")
                self._expect(":", "':'")
                if key == "traceEvents":
                    found = True
                    self._expect("[", "the traceEvents list")
                    if self._next_char() == "]":
                        self.pos += 1
                    else:
                        while True:
                            yield self._value()
                            if self._expect(",]", "',' or ']'") == "]":
                                break
                else:
                    self._value()
                if self._expect(",}", "',' or '}'") == "}":
                    break
        if not found:
            raise InputError(self.path, 'no "traceEvents" list; expected prof.export_chrome_trace() output')

    def _fill(self) -> bool:
        chunk = self.handle.read(READ_BYTES)
        if not chunk:
            self.eof = True
            return False
        self.offset += self.pos
        self.buffer = self.buffer[self.pos:] + chunk
        self.pos = 0
        return True

    def _next_char(self) -> str | None:
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buffer):
                return self.buffer[self.pos]
            if not self._fill():
                return None

    def _expect(self, chars: str, what: str) -> str:
        found = self._next_char()
        if found is None or found not in chars:
            raise self._error(f"expected {what}" + (" but the file ended; is the trace complete?" if found is None
                                                    else f", found {found!r}"))
        self.pos += 1
        return found

    def _value(self):
        self._next_char()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer, self.pos)
                if end < len(self.buffer) or self.eof:      # a number at the buffer's end may go on in the next chunk
                    self.pos = end
                    return value
            except json.JSONDecodeError as exc:
                cut = exc.pos >= len(self.buffer) - 1 or exc.msg.startswith("Unterminated string")
                if not cut or self.eof:
                    raise self._error(f"not valid JSON ({exc.msg}){'; is the trace complete?' if self.eof else ''}",
                                      exc.pos) from None
            if len(self.buffer) - self.pos > EVENT_LIMIT:
                raise self._error(f"one value is longer than {EVENT_LIMIT:,} characters; not a PyTorch profiler "
                                  "trace? (trim it, or export it again)")
            self._fill()

    def _error(self, message: str, at: int | None = None) -> InputError:
        where = self.offset + (self.pos if at is None else at)
        return InputError(self.path, f"not a readable PyTorch profiler trace at character {where:,}: {message}")


def read_ncu_durations(path: Path) -> list[tuple[str, int]]:
    """(kernel name, gpu__time_duration ns) per launch of an ncu raw page (`--csv --page raw`), streamed."""
    with _open_text(path) as handle:
        lines = _bounded_lines(path, handle)
        # ==PROF== and ==WARNING== lines come before the page when ncu's output went to the same file
        header_line = next((line for line in lines if line.startswith('"ID"')), None)
        if header_line is None:
            raise InputError(path, 'no ncu raw page (no "ID" header line); expected ncu --csv --page raw output')
        rows = csv.reader(itertools.chain([header_line], lines))
        try:
            header, units = next(rows), next(rows, [])
            try:
                name_col, time_col = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
            except ValueError:
                raise InputError(path, "no Kernel Name or gpu__time_duration.sum column in the raw page") from None
            scale = _NCU_TIME_UNIT_NS.get(units[time_col].strip(), 1) if len(units) > time_col else 1
            launches = []
            for row in rows:
                if len(row) <= max(name_col, time_col):
                    continue
                value = row[time_col].replace(",", "").strip()     # ncu prints thousands separators: "1,123"
                try:
                    launches.append((row[name_col], round(float(value) * scale)))
                except (ValueError, OverflowError):
                    continue                                         # "n/a": a launch ncu could not time
        except csv.Error as exc:
            raise InputError(path, f"not CSV ({exc}); expected ncu --csv --page raw output",
                             line=rows.line_num) from None
    return launches


def _nsys_rows(path: Path, header: list[str], total: str, lines) -> list[tuple[str, int, int]]:
    unit = re.search(r"\((\w+)\)", total)
    scale = _UNIT_NS.get(unit.group(1) if unit else "ns", 1)
    name_col, total_col, count_col = header.index("Name"), header.index(total), header.index("Instances")
    out = []
    for row in csv.reader(lines):
        if not row or row[0].startswith("Processing [") or len(row) <= max(name_col, total_col, count_col):
            break
        try:
            out.append((row[name_col], round(float(row[total_col].replace(",", "")) * scale),
                        int(row[count_col].replace(",", ""))))
        except (ValueError, OverflowError):
            raise InputError(path, f"a kernel line whose Total Time or Instances is not a number ({row[total_col]!r}, "
                             f"{row[count_col]!r}); expected an nsys cuda_gpu_kern_sum CSV") from None
    return out


def read_nsys_kernel_summary(path: Path) -> list[tuple[str, int, int]]:
    """(kernel name, total ns, instances) per line of an nsys cuda_gpu_kern_sum (or old gpukernsum) CSV, a file of
    its own or stdout of `nsys stats` holding several reports (the first kernel summary is read), streamed."""
    with _open_text(path) as handle:
        lines = _bounded_lines(path, handle)
        try:
            for line in lines:
                header = next(csv.reader([line]), [])
                total = next((c for c in header if c.startswith("Total Time")), None)
                if "Name" in header and total and ("Instances" in header):
                    return _nsys_rows(path, header, total, lines)
        except csv.Error as exc:
            raise InputError(path, f"not CSV ({exc}); expected an nsys cuda_gpu_kern_sum CSV") from None
    raise InputError(path, "no cuda_gpu_kern_sum table (a header with Name, Total Time and Instances)")


def kind_of(path: Path) -> str:
    """Which discovery output a file is, from its first bytes: "torch" (a PyTorch profiler trace),
    "ncu" (an ncu raw page with gpu__time_duration.sum) or "nsys" (an nsys kernel summary CSV)."""
    check_readable(path)
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
