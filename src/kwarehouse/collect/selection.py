"""Which kernels the targeted ncu pass profiles, and the kernel-name regex that tells ncu.

Kernels are chosen by **function name**: the demangled name without return type, namespaces,
template arguments and parameters (`void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`
-> `vectorized_elementwise_kernel`). That is the only part of a name every tool spells alike: ncu's
demangler prints `at::` for `at::native::`, `<unnamed>` for `(anonymous namespace)`, `char *` for
`char*` and template parameters as `T2` (tests/data/kernel-names/pairs.csv), so a name copied from a
PyTorch trace or an nsys summary never equals ncu's. Every instantiation of a selected template
function is therefore profiled; the manifest lists the selected function names and the full names
discovery saw.

The regex (kwh hot-kernels prints it; kwh profile hands ncu the same functions as function_regex, on
--kernel-name-base function: profiling._kernel_filter says why) anchors each function name
at the start of the demangled name, after an optional return type and namespace qualifiers, and before
its template arguments or parameters (it reads the same as a full or a partial match), so `elementwise_kernel` never matches `vectorized_elementwise_kernel`
nor a kernel that merely takes it as a template argument. Names are escaped with re.escape, and the
pattern uses only constructs ECMAScript, POSIX ERE and Python regexes share (groups, alternation, `*`,
`?`, bracket expressions, `^`, `$`).
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Namespace spellings a demangled kernel name may start with: plain identifiers, ncu's `<unnamed>`,
# CUPTI's `(anonymous namespace)` (brackets instead of backslashes: every regex dialect reads them).
_SCOPE = r"([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::"
# What precedes the qualified name: `void `, or cuBLAS's SFINAE return type
# (`std::enable_if<!T7, void>::type internal::gemvx::kernel<...>`, tests/data/nsys-stats-rtx5090).
_RETURN_TYPE = r"void |std::enable_if<.*>::type "
_ANONYMOUS = re.compile(r"\(anonymous namespace\)::|<unnamed>::")
_MANGLED_PART = re.compile(r"(\d+)")
_TRITON_WITHOUT_COUNTER = re.compile(r"triton_\w*[A-Za-z]$")
_TRITON_COUNTER = "(_[0-9]+)?"
_NOT_A_KERNEL = re.compile(r"\[CUDA |Memcpy |Memset\b|Memcpy$")
# kwh's op class rules (read as a file: importing kwarehouse.normalize would need polars); the rows of op
# class `autotune` say which kernels are a framework's compile-time autotuning, not the workload's work
OP_CLASS_RULES = Path(__file__).parents[1] / "normalize" / "op_class_rules.csv"
AUTOTUNE = "autotune"


@dataclass(frozen=True)
class KernelTime:
    """GPU time of every launch of one kernel function in a discovery pass."""
    function: str             # the function name the regex matches
    gpu_time_ns: int
    launches: int
    names: tuple[str, ...]    # the full names discovery printed, longest-running first
    # per instance (full name, as `names`): (launches, GPU time ns); a template function's instances
    # (a GELU and a fill of vectorized_elementwise_kernel) differ by orders of magnitude per launch
    instances: tuple[tuple[int, int], ...] = ()
    autotune: bool = False    # op class autotune (op_class_rules.csv): kept out of every selection


@dataclass
class Selection:
    kernels: list[KernelTime]             # selected, by GPU time, longest first
    total_ns: int                         # GPU time of every kernel discovery saw
    seen: int                             # kernel functions discovery saw
    top: int | None = None
    cover_pct: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def functions(self) -> list[str]:
        return [k.function for k in self.kernels]

    @property
    def covered_pct(self) -> float:
        return 100.0 * sum(k.gpu_time_ns for k in self.kernels) / self.total_ns if self.total_ns else 0.0

    @property
    def regex(self) -> str:
        return kernel_regex(self.functions)

    def as_json(self) -> dict:
        """What the manifest and selection.json record."""
        return {
            "rule": ({"top": self.top} if self.top else {}) | ({"cover_pct": self.cover_pct} if self.cover_pct else {}),
            "regex": self.regex, "covered_pct": round(self.covered_pct, 2), "total_gpu_time_ns": self.total_ns,
            "kernel_functions_seen": self.seen,
            "kernels": [{"function": k.function, "gpu_time_ns": k.gpu_time_ns, "launches": k.launches,
                         "pct": round(100.0 * k.gpu_time_ns / self.total_ns, 2) if self.total_ns else None,
                         "names": list(k.names[:3])} for k in self.kernels],
        }


def function_name(name: str) -> str:
    """The kernel's function name, from a demangled or Itanium-mangled name of any tool.

    >>> function_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2)")
    'vectorized_elementwise_kernel'
    >>> function_name("void <unnamed>::softmax_warp_forward<c10::BFloat16, float, 8>(T2 *, const T1 *, int)")
    'softmax_warp_forward'
    >>> function_name("_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb")
    'vectorized_gather_kernel'
    >>> function_name("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTT")
    'nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTT'
    """
    text = name.strip()
    if text.startswith("_Z"):
        return _mangled_function(text) or text
    return qualified_name(text).split("::")[-1] or text


def qualified_name(name: str) -> str:
    """The kernel's name with its namespaces, without return type, template arguments, parameters and
    anonymous namespaces: what kwh's kernel_base keeps of a demangled name, which op_class_rules.csv's
    `base` rules match.

    >>> qualified_name("void stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*, unsigned long)")
    'stream_executor::gpu::RedzoneAllocatorKernelImpl'
    """
    text = _ANONYMOUS.sub("", name.strip())
    head, depth = [], 0
    for ch in text:
        if ch == "(" and depth == 0 and "".join(head).strip():
            break                                   # the parameter list: the name is complete
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            head.append(ch)
    return "".join(head).strip().split(" ")[-1]     # drops the return type (`void `)


def _mangled_function(name: str) -> str | None:
    """The last source name of an Itanium nested name (`_ZN2at6native3fooI...` -> `foo`), or of a
    plain one (`_Z5saxpyifPfS_` -> `saxpy`); None when the name is not of that shape."""
    pos = 3 if name.startswith("_ZN") else 2
    last = None
    while pos < len(name):
        while pos < len(name) and name[pos] in "LKV":        # internal linkage, const, volatile
            pos += 1
        found = _MANGLED_PART.match(name, pos)
        if not found:
            break
        length = int(found.group(1))
        start = found.end()
        last = name[start:start + length]
        pos = start + length
        if pos >= len(name) or name[pos] in "IE" or not name.startswith("_ZN"):
            break
    if last and last.startswith("_GLOBAL__N"):
        return None
    return last


def aggregate(launches: Iterable[tuple]) -> list[KernelTime]:
    """(kernel name, duration ns) per launch, or (kernel name, total ns, launches) per line of a
    summary -> GPU time per kernel function, longest first."""
    by_name: dict[str, dict[str, list[int]]] = {}       # function -> name -> [launches, ns]
    for name, duration, *instances in launches:
        function = function_name(name)
        if not is_kernel(function) or not is_kernel(name):
            continue
        entry = by_name.setdefault(function, {}).setdefault(name, [0, 0])
        entry[0] += int(instances[0]) if instances else 1
        entry[1] += int(duration)
    kernels = []
    for function, names in by_name.items():
        ordered = sorted(names, key=lambda n: (-names[n][1], n))
        kernels.append(KernelTime(function, sum(v[1] for v in names.values()), sum(v[0] for v in names.values()),
                                  tuple(ordered), tuple((names[n][0], names[n][1]) for n in ordered),
                                  autotune=any(is_autotune(n) for n in ordered)))
    return sorted(kernels, key=lambda k: (-k.gpu_time_ns, k.function))


def select(kernels: list[KernelTime], top: int | None = None, cover_pct: float | None = None) -> Selection:
    """The longest-running kernel functions: the first `top`, or as many as cover `cover_pct` % of the
    GPU time (with both, whichever set is smaller); the top 10 when neither is given."""
    autotuning = [k for k in kernels if k.autotune]
    ranked = sorted((k for k in kernels if not k.autotune), key=lambda k: (-k.gpu_time_ns, k.function))
    total = sum(k.gpu_time_ns for k in ranked)
    limit = top if top is not None else (len(ranked) if cover_pct is not None else 10)
    chosen: list[KernelTime] = []
    for kernel in ranked[:limit]:
        if cover_pct is not None and total and 100.0 * sum(k.gpu_time_ns for k in chosen) / total >= cover_pct:
            break
        chosen.append(kernel)
    selection = Selection(chosen, total, len(ranked), top=top if top is not None or cover_pct is None else None,
                          cover_pct=cover_pct)
    if top is None and cover_pct is None:
        selection.top = 10
    if autotuning:
        spent = sum(k.gpu_time_ns for k in autotuning)
        selection.notes.append(
            f"left out {len(autotuning)} autotuning kernel function(s) ({_share(spent, spent + total)} of the GPU "
            f"time, op class autotune: compile-time tuning, not the workload's steady work): "
            f"{', '.join(k.function for k in autotuning[:4])}" + (" ..." if len(autotuning) > 4 else ""))
    if cover_pct is not None and selection.covered_pct + 1e-9 < cover_pct and top is not None:
        selection.notes.append(f"the top {top} kernel functions cover {selection.covered_pct:.1f} % of the GPU "
                               f"time, less than --cover {cover_pct:g}")
    return selection


@dataclass
class LaunchWindow:
    """Which of the selected functions' launches the targeted pass profiles: ncu's --launch-skip and
    --launch-count count the launches its kernel filter matches, in launch order, so the window is
    chosen on discovery's launches in that order (a torch trace, an ncu durations page)."""
    skip: int                          # --launch-skip
    count: int | None                  # --launch-count (None: every launch)
    matching: int                      # launches of the selected functions discovery saw
    in_window: dict[str, int]          # function -> its launches inside the window
    launches: dict[str, int]           # function -> all its launches discovery saw
    instances_in_window: int           # distinct instances (full names) with a launch inside
    instances: int                     # distinct instances of the selected functions
    covered_pct: float                 # share of the selected GPU time whose instance has a launch inside

    @property
    def profiled(self) -> int:
        """The launches the pass profiles, if it launches what discovery saw."""
        return sum(self.in_window.values())

    def as_json(self) -> dict:
        return {"launch_skip": self.skip, "launch_count": self.count, "matching_launches": self.matching,
                "launches_in_window": self.profiled, "instances_in_window": self.instances_in_window,
                "instances": self.instances, "instance_time_in_window_pct": round(self.covered_pct, 2),
                "per_function": {f: {"launches": self.launches[f], "in_window": self.in_window.get(f, 0)}
                                 for f in self.launches}}


def launch_window(launches: list[tuple[str, int]], chosen: Selection, count: int | None,
                  skip: int | None = None) -> LaunchWindow:
    """The window of `count` consecutive launches (of those the selection's filter matches, in launch
    order) that holds the most of the selection's GPU time by **instance**: each full kernel name with a
    launch inside counts with all its GPU time, once. A cap therefore goes to the hot instances (a GEMM,
    a GELU) and not to the thousands of cheap casts and fills that share a template function with them
    and come first (model loading); ties go to the later window (after warm-up and autotuning). With
    `skip` (--launch-skip) the window is the user's.

    >>> chosen = select(aggregate([("fill(int)", 1), ("fill(int)", 1), ("gemm(int)", 50), ("fill(int)", 1)]))
    >>> window = launch_window([("fill(int)", 1), ("fill(int)", 1), ("gemm(int)", 50), ("fill(int)", 1)], chosen, 2)
    >>> (window.skip, window.count, window.in_window)
    (2, 2, {'gemm': 1, 'fill': 1})
    """
    selected = set(chosen.functions)
    order = [(name, function_name(name), int(duration)) for name, duration in launches
             if is_kernel(name) and function_name(name) in selected]
    instance_ns: dict[str, int] = {}
    for name, _, duration in order:
        instance_ns[name] = instance_ns.get(name, 0) + duration
    size = len(order) if count is None else count
    if skip is not None or size >= len(order):
        start = skip or 0
    else:
        start = _best_window(order, instance_ns, size)
    inside = order[start:start + size]
    in_window: dict[str, int] = {}
    for _, function, _ in inside:
        in_window[function] = in_window.get(function, 0) + 1
    launches_per: dict[str, int] = {f: 0 for f in chosen.functions}
    for _, function, _ in order:
        launches_per[function] += 1
    names_inside = {name for name, _, _ in inside}
    total = sum(instance_ns.values())
    return LaunchWindow(start, count, len(order), in_window, launches_per, len(names_inside), len(instance_ns),
                        100.0 * sum(instance_ns[n] for n in names_inside) / total if total else 0.0)


def _best_window(order: list[tuple[str, str, int]], instance_ns: dict[str, int], size: int) -> int:
    """Start of the window of `size` launches with the most instance time (then launch time; then later)."""
    inside: dict[str, int] = {}
    covered = window_ns = 0
    best = (-1, -1, 0)
    for end, (name, _, duration) in enumerate(order):
        inside[name] = inside.get(name, 0) + 1
        covered += instance_ns[name] if inside[name] == 1 else 0
        window_ns += duration
        if end >= size:
            old, _, old_ns = order[end - size]
            inside[old] -= 1
            covered -= instance_ns[old] if inside[old] == 0 else 0
            window_ns -= old_ns
        if end >= size - 1:
            best = max(best, (covered, window_ns, end - size + 1))
    return best[2]


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "0 %"


@functools.cache
def _autotune_rules() -> tuple[tuple[str, re.Pattern], ...]:
    """op_class_rules.csv's rows of op class autotune on `base` (the qualified name) or `name`."""
    rules = []
    with OP_CLASS_RULES.open(encoding="utf-8", newline="") as handle:
        for row in csv.reader(line for line in handle if line.strip() and not line.lstrip().startswith("#")):
            if len(row) == 3 and row[2].strip() == AUTOTUNE and row[0].strip() in ("base", "name"):
                rules.append((row[0].strip(), re.compile(row[1].strip())))
    return tuple(rules)


def is_autotune(name: str) -> bool:
    """A kernel of op class autotune: an XLA autotuner's redzone check, buffer comparison or timer delay
    kernel (op_class_rules.csv), which run at compile time and can outweigh the model in a short trace.

    >>> is_autotune("void stream_executor::gpu::RedzoneAllocatorKernelImpl(unsigned char*, unsigned char, unsigned long, unsigned int*)")
    True
    >>> is_autotune("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2)")
    False
    """
    base = qualified_name(name) if not name.startswith("_Z") else name
    return any(rule.search(base if field == "base" else name) for field, rule in _autotune_rules())


def kernel_regex(functions: Iterable[str]) -> str:
    """The regex ncu's --kernel-name-base demangled filter matches exactly these kernel functions by.

    >>> kernel_regex(["elementwise_kernel", "gemm_64x64"])
    '^(void |std::enable_if<.*>::type )?(([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::)*(elementwise_kernel|gemm_64x64)([<(].*)?$'
    """
    names = sorted(dict.fromkeys(functions))
    if not names:
        raise ValueError("no kernel functions to build a regex of")
    return f"^({_RETURN_TYPE})?({_SCOPE})*({'|'.join(_pattern(n) for n in names)})([<(].*)?$"


def functions_in(regex: str) -> list[str] | None:
    """The function names of a regex kernel_regex built (None for any other regex).

    >>> functions_in(kernel_regex(["saxpy", "triton_poi_fused_add", "a.b"]))
    ['a.b', 'saxpy', 'triton_poi_fused_add']
    """
    found = _BUILT.fullmatch(regex)
    if found is None:
        return None
    names = [part.replace(_TRITON_COUNTER, "") for part in found.group(1).split("|")]
    return [re.sub(r"\\(.)", r"\1", name) for name in names]


def function_regex(functions: Iterable[str]) -> str:
    """The regex ncu's --kernel-name-base function filter matches exactly these kernel functions by: the
    form kwh profile hands ncu (see profiling._kernel_filter for why not the demangled one).

    >>> function_regex(["saxpy", "a.b"])
    '^(saxpy|a\\\\.b)$'
    """
    return "^(" + "|".join(_pattern(f) for f in functions) + ")$"


def _pattern(function: str) -> str:
    """One function name, escaped. A Triton kernel named without its per-graph counter (kwh's
    kernel_base drops it: signature_rules.csv) matches every counter: `triton_poi_fused_add(_[0-9]+)?`."""
    if _TRITON_WITHOUT_COUNTER.match(function):
        return re.escape(function) + _TRITON_COUNTER
    return re.escape(function)


def is_kernel(function: str) -> bool:
    """False for the copies and fills timelines list among kernels (`[CUDA memset]`, `Memcpy HtoD`):
    ncu profiles kernels only."""
    return not _NOT_A_KERNEL.match(function)


# what kernel_regex writes, its function alternatives in group 1
_BUILT = re.compile(re.escape(f"^({_RETURN_TYPE})?({_SCOPE})*(") + r"(.*)" + re.escape(")([<(].*)?$"))


def per_model_regexes(functions_by_model: dict[str, list[str]]) -> dict[str, str]:
    """One regex per model (merged: kernel_regex over every model's functions)."""
    return {model: kernel_regex(functions) for model, functions in functions_by_model.items() if functions}
