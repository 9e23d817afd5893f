"""PyTorch profiler Chrome trace (`prof.export_chrome_trace(...)`, Kineto JSON): the GPU timeline.

GPU work is the `kernel`, `gpu_memcpy` and `gpu_memset` events only: torch.compile's Triton launcher
records carry a `stream` argument too, but they are CPU events. Each GPU event is linked to the CPU op
that launched it through its "External id" (framework_op_id; the op's input dims become op_shapes,
its input element types op_dtypes, its scalar arguments, "Concrete Inputs", op_args) and to the CUDA
runtime call through its "correlation" (the call's thread gives the enclosing CPU op and
user-annotation stack, nvtx_path). Timestamps are microseconds with nanosecond decimals: they are
parsed as decimals and converted to integer ns exactly (no rounding to whole microseconds).
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import ClassVar

import polars as pl

from kwarehouse.errors import InputError
from kwarehouse.ingest import base
from kwarehouse.ingest.base import TIMELINE_COLUMNS, ReadResult

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                  "memcpy": "memcpy", "memset": "memset"}   # older Kineto wrote Kernel/Memcpy/Memset
CPU_OP_CATEGORIES = {"cpu_op", "operator"}
RANGE_CATEGORIES = CPU_OP_CATEGORIES | {"user_annotation"}
PATH_SEPARATOR = " > "


class TorchTrace:
    name: ClassVar[str] = "torch-trace"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        return text.startswith(b"{") and b'"traceEvents"' in text

    def read(self, path: Path) -> ReadResult:
        base.refuse_oversized(path)
        raw = path.read_bytes()
        try:
            trace = json.loads(raw, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            if not raw.rstrip().endswith(b"}"):
                # a trace is one JSON object: text that does not end with its closing brace was cut short
                raise InputError(path, f"not valid JSON ({exc.msg}); is the trace complete? It ends before its "
                                 "closing brace: wait for the copy to finish, or export it again",
                                 line=exc.lineno) from None
            raise InputError(path, f"not valid JSON ({exc.msg}); is the trace complete?", line=exc.lineno) from None
        except UnicodeDecodeError:
            raise InputError(path, "not UTF-8 JSON; expected a PyTorch profiler trace") from None
        del raw
        if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
            raise InputError(path, 'no "traceEvents" list; expected prof.export_chrome_trace() output')
        events = [e for e in trace["traceEvents"] if isinstance(e, dict)]
        devices = {_int(d.get("id")): d.get("name") for d in trace.get("deviceProperties") or []
                   if isinstance(d, dict)}
        base_ns = _int(trace.get("baseTimeNanoseconds")) or 0
        ops = _ops_by_external_id(events)
        launches = _runtime_by_correlation(events)
        stacks = _ThreadStacks(events, list(launches.values()))
        rows = []
        for order, event in enumerate(events):
            activity = GPU_CATEGORIES.get(str(event.get("cat", "")).lower())
            if activity is None or event.get("ph") != "X":
                continue
            args = event.get("args") or {}
            start, duration = _ns(path, event, "ts"), _ns(path, event, "dur")
            grid, block = _dims(args.get("grid")), _dims(args.get("block"))
            op = ops.get(_int(args.get("External id")))
            runtime = launches.get(_int(args.get("correlation")))
            device = _int(args.get("device"))
            rows.append({
                "_order": order, "activity": activity, "device_id": device, "device_name": devices.get(device),
                "context_id": _int(args.get("context")), "stream_id": _int(args.get("stream")),
                "process_id": _int(runtime.get("pid")) if runtime else None,
                "correlation_id": _int(args.get("correlation")), "start_ns": base_ns + start,
                "duration_ns": duration, "grid_x": grid[0], "grid_y": grid[1], "grid_z": grid[2],
                "block_x": block[0], "block_y": block[1], "block_z": block[2],
                "registers_per_thread": _int(args.get("registers per thread")),
                "shared_mem_bytes": _int(args.get("shared memory")), "bytes": _int(args.get("bytes")),
                "kernel_name": str(event.get("name", "")), "kernel_short_name": None, "kernel_mangled": None,
                "framework_op": op.get("name") if op else None,
                "op_shapes": _shapes(op), "nvtx_path": stacks.path(runtime) if runtime else None,
                "nvtx_range": stacks.innermost_annotation(runtime) if runtime else None,
                "framework_op_id": _int(args.get("External id")) if op else None,
                "op_dtypes": _op_list(op, "Input type"), "op_args": _op_list(op, "Concrete Inputs"),
            })
        if not rows:
            raise InputError(path, "no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace; was the "
                             "profiler run with ProfilerActivity.CUDA?")
        timeline = (pl.DataFrame(rows, schema={"_order": pl.Int64, **TIMELINE_COLUMNS})
                    .sort("start_ns", "_order").drop("_order"))
        used = timeline["device_name"].drop_nulls().mode()
        return ReadResult(path=path, format=self.name, page="timeline", tool="torch", timeline=timeline,
                          gpu_name=used.sort()[0] if used.len() else None)


def _int(value) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, InvalidOperation):
        return None


def _ns(path: Path, event: dict, key: str) -> int:
    """A microsecond value of the trace (decimal text) as exact integer nanoseconds."""
    value = event.get(key)
    try:
        return int(Decimal(value) * 1000)
    except (TypeError, InvalidOperation):
        raise InputError(path, f'GPU event {event.get("name")!r} has no numeric "{key}"') from None


def _dims(value) -> tuple:
    if isinstance(value, list) and len(value) == 3:
        return tuple(_int(v) for v in value)
    return (None, None, None)


def _shapes(op: dict | None) -> str | None:
    dims = (op or {}).get("args", {}).get("Input Dims")
    return str(dims) if dims is not None else None


def _op_list(op: dict | None, key: str) -> str | None:
    """The op's "Input type" (element types: c10::BFloat16, float, ScalarList, ...) or "Concrete Inputs"
    (scalar arguments as text: conv stride "[2, 2]", SDPA is_causal "True"; "" for tensors) as a JSON list."""
    values = (op or {}).get("args", {}).get(key)
    return json.dumps([str(v) for v in values]) if isinstance(values, list) else None


def _ops_by_external_id(events: list[dict]) -> dict[int, dict]:
    """CPU op per External id; where several share one, the innermost (shortest) launched the kernel."""
    ops: dict[int, dict] = {}
    for event in events:
        if str(event.get("cat", "")).lower() not in CPU_OP_CATEGORIES:
            continue
        external = _int((event.get("args") or {}).get("External id"))
        if external is None:
            continue
        kept = ops.get(external)
        if kept is None or Decimal(event.get("dur") or 0) < Decimal(kept.get("dur") or 0):
            ops[external] = event
    return ops


def _runtime_by_correlation(events: list[dict]) -> dict[int, dict]:
    runtime = {}
    for event in events:
        if str(event.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime", "driver"):
            correlation = _int((event.get("args") or {}).get("correlation"))
            if correlation is not None:
                runtime.setdefault(correlation, event)
    return runtime


class _ThreadStacks:
    """The CPU ops and user annotations open on a thread when each CUDA call was made, outermost
    first: one sweep per thread over ranges sorted by start, keeping the stack of open ones."""

    def __init__(self, events: list[dict], calls: list[dict]):
        ranges: dict[tuple, list[tuple[Decimal, Decimal, str, bool]]] = {}
        for event in events:
            category = str(event.get("cat", "")).lower()
            if category in RANGE_CATEGORIES and event.get("ph") == "X" and event.get("dur") is not None:
                start = Decimal(event["ts"])
                ranges.setdefault((event.get("pid"), event.get("tid")), []).append(
                    (start, start + Decimal(event["dur"]), str(event.get("name", "")), category == "user_annotation"))
        queries: dict[tuple, list[dict]] = {}
        for call in calls:
            queries.setdefault((call.get("pid"), call.get("tid")), []).append(call)
        self.open: dict[int, list[tuple]] = {}
        for key, waiting in queries.items():
            spans = sorted(ranges.get(key, []), key=lambda s: (s[0], -s[1]))
            stack: list[tuple] = []
            i = 0
            for call in sorted(waiting, key=lambda c: Decimal(c["ts"])):
                moment = Decimal(call["ts"])
                while i < len(spans) and spans[i][0] <= moment:
                    stack.append(spans[i])
                    i += 1
                stack = [s for s in stack if s[1] >= moment]
                self.open[id(call)] = list(stack)

    def path(self, call: dict) -> str | None:
        names = [s[2] for s in self.open.get(id(call), [])]
        return PATH_SEPARATOR.join(names) if names else None

    def innermost_annotation(self, call: dict) -> str | None:
        annotations = [s[2] for s in self.open.get(id(call), []) if s[3]]
        return annotations[-1] if annotations else None
