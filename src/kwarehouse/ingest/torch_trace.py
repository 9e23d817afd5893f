"""PyTorch profiler Chrome trace (`prof.export_chrome_trace(...)`, Kineto JSON): the GPU timeline.

GPU work is the `kernel`, `gpu_memcpy` and `gpu_memset` events only: torch.compile's Triton launcher
records carry a `stream` argument too, but they are CPU events. Each GPU event is linked to the CPU op
that launched it through its "External id" (framework_op_id; the op's input dims become op_shapes,
its input element types op_dtypes, its scalar arguments, "Concrete Inputs", op_args) and to the CUDA
runtime call through its "correlation" (the call's thread gives the enclosing CPU op and
user-annotation stack, nvtx_path). Timestamps are microseconds with nanosecond decimals: they are
parsed as decimals and converted to integer ns exactly (no rounding to whole microseconds).

Traces run to hundreds of MB, and a whole trace parsed into Python dicts takes ~8x its size in memory
(users report 800 MB traces needing 6 GB in other tools). So the traceEvents array is read in pieces
of whole events (about PIECE_BYTES each), each decoded by msgspec into small typed records that hold
only the fields used here, and only what the join needs is kept between pieces: memory is bounded by
one piece plus the GPU events, CUDA calls and CPU ranges themselves, not by the file. A piece is cut
at a "}, {" between events and kept only if it decodes whole, so a cut that falls inside a string or
a nested object just makes the piece longer. Anything this fast path does not expect (malformed JSON,
a BOM-less other encoding, an event that is not an object, a value of an odd type) sends the file to
the plain path, json.loads of the whole file, which words the error exactly as before.

A trace saved with program output before it (a warning the script printed into the same file) is
read from the first line that opens its JSON object; the lines before are one warning, never data.
Text inside the JSON document cannot be parsed exactly: that file is refused in one line.
"""

from __future__ import annotations

import gc
import json
import re
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import polars as pl

from kwarehouse.errors import InputError, NothingToStore
from kwarehouse.ingest import base, cells
from kwarehouse.ingest.base import TIMELINE_COLUMNS, ReadResult

GPU_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
                  "memcpy": "memcpy", "memset": "memset"}   # older Kineto wrote Kernel/Memcpy/Memset
CPU_OP_CATEGORIES = {"cpu_op", "operator"}
RANGE_CATEGORIES = CPU_OP_CATEGORIES | {"user_annotation"}
PATH_SEPARATOR = " > "
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime", "driver"}

# Bytes of the traceEvents array decoded at a time by the streaming path.
PIECE_BYTES = 8 << 20
# Above this size a file the streaming path cannot read is refused with msgspec's words, not re-read
# whole by json.loads (which would need ~8x the file in memory just to word the error).
WHOLE_PARSE_LIMIT = 256 << 20


class TorchTrace:
    name: ClassVar[str] = "torch-trace"

    def sniff(self, path: Path, head: bytes) -> bool:
        start = document_start(head)
        return start is not None and b'"traceEvents"' in head[start:]

    def read(self, path: Path) -> ReadResult:
        base.refuse_oversized(path)
        try:
            with _gc_paused():
                timeline, preamble, warnings = _Streamed.timeline(path)
        except _NotStreamable as exc:
            if path.stat().st_size > WHOLE_PARSE_LIMIT:
                raise InputError(path, f"not a readable PyTorch profiler trace ({exc}); is the trace complete? "
                                 "Wait for the copy to finish, or export it again") from None
            return self._read_whole(path)
        if timeline.height == 0:
            raise NothingToStore(path, "no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace; was the "
                             "profiler run with ProfilerActivity.CUDA?")
        return ReadResult(path=path, format=self.name, page="timeline", tool="torch", timeline=timeline,
                          gpu_name=base.most_used(timeline["device_name"].to_list()),
                          warnings=_preamble_warnings(path, preamble) + warnings)

    def _read_whole(self, path: Path) -> ReadResult:
        """The plain path: json.loads of the whole file (Decimal floats), dicts all the way."""
        raw = path.read_bytes()
        start = document_start(raw[:_HEAD_LIMIT])
        preamble, raw = (raw[:start], raw[start:]) if start else (b"", raw)
        skipped = preamble.count(b"\n")
        try:
            trace = json.loads(raw, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            if not raw.rstrip().endswith(b"}"):
                # a trace is one JSON object: text that does not end with its closing brace was cut short
                raise InputError(path, f"not valid JSON ({exc.msg}); is the trace complete? It ends before its "
                                 "closing brace: wait for the copy to finish, or export it again",
                                 line=exc.lineno) from None
            raise InputError(path, f"not valid JSON ({exc.msg}); is the trace complete? A line of other output "
                             "written into it (a warning printed to the same file) cannot be read around: "
                             "remove it, or export the trace again", line=exc.lineno + skipped) from None
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
            raise NothingToStore(path, "no GPU events (kernel, gpu_memcpy, gpu_memset) in the trace; was the "
                             "profiler run with ProfilerActivity.CUDA?")
        columns = {"_order": pl.Int64, **TIMELINE_COLUMNS}
        warnings = _preamble_warnings(path, preamble)
        timeline = (cells.checked_frame(path, [tuple(row[c] for c in columns) for row in rows], columns, 0,
                                        REQUIRED, _event_where, warnings)
                    .sort("start_ns", "_order").drop("_order"))
        if timeline.height == 0:
            raise InputError(path, f"no GPU event has a usable time: {warnings[-1].partition(': ')[2]}")
        used = timeline["device_name"].drop_nulls().mode()
        return ReadResult(path=path, format=self.name, page="timeline", tool="torch", timeline=timeline,
                          gpu_name=used.sort()[0] if used.len() else None, warnings=warnings)


# A line that opens the trace's JSON object: "{" first on its line (after a BOM or blanks).
_DOCUMENT_START = re.compile(rb"^(?:\xef\xbb\xbf)?[ \t\r]*\{", re.MULTILINE)


def document_start(head: bytes) -> int | None:
    """Where the trace's JSON object starts in `head`: 0 when the file opens with it, the start of
    the first line that opens it when program output was written before it, None when no line does."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return 0
    found = _DOCUMENT_START.search(head)
    return found.start() if found else None


# A GPU event without a usable start or duration is left out (a timeline row needs both).
REQUIRED = ("start_ns", "duration_ns")


def _event_where(row: tuple) -> tuple[None, str]:
    """Where a timeline row came from, for a warning: its place among traceEvents (a trace is JSON,
    often one line: its events, not lines, are what an editor finds)."""
    return None, f"traceEvents[{row[0]}] ({row[KERNEL_NAME]!r:.80})"


def _preamble_warnings(path: Path, preamble: bytes) -> list[str]:
    """One warning for the lines of other output before the JSON object (left out: they hold no events)."""
    lines = preamble.count(b"\n")
    if not lines:
        return []
    first = preamble.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return [str(InputError(path, f"{lines} line(s) before the trace's JSON object are not part of it (left out; "
                           f"other output saved into the same file?): {first[:120]!r}", line=1))]


def _int(value) -> int | None:
    if value.__class__ is int:    # what nearly every value is (a bool is not int here)
        return value
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
        x, y, z = value
        return (_int(x), _int(y), _int(z))
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


# -- the streaming path ------------------------------------------------------------------------------

class _NotStreamable(Exception):
    """The streaming path met something it does not read; the plain path reads (or refuses) the file."""


NOT_GIVEN = msgspec.Raw()


class _Args(msgspec.Struct, gc=False):
    """The args of an event that this reader uses; the rest are skipped unparsed. Values are what
    json.loads(parse_float=Decimal) gives (the decoders' float_hook), so both paths compute alike."""
    external_id: Any = msgspec.field(default=None, name="External id")
    correlation: Any = None
    device: Any = None
    context: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers_per_thread: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    bytes: Any = None
    # an op's lists, kept as their JSON text (a copy of a few hundred bytes) and decoded only for the
    # ops that launched GPU work: as Python lists they would be most of the memory a trace takes
    input_dims: msgspec.Raw = msgspec.field(default=NOT_GIVEN, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NOT_GIVEN, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NOT_GIVEN, name="Concrete Inputs")


NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    # defaults are what the plain path's event.get(...) gives for a missing key
    ph: Any = None
    cat: Any = ""
    name: Any = msgspec.UNSET   # event.get("name", "") for GPU events and ranges, event.get("name") for ops
    pid: Any = None
    tid: Any = None
    ts: Any = msgspec.UNSET     # the plain path indexes event["ts"] for ranges and calls
    dur: Any = None
    args: _Args | None = None


class _Head(msgspec.Struct):
    """The keys before the traceEvents array (the array itself decoded empty)."""
    traceEvents: list
    deviceProperties: Any = msgspec.UNSET
    baseTimeNanoseconds: Any = msgspec.UNSET


class _Tail(msgspec.Struct):
    """The last events and the keys after the array."""
    traceEvents: list[_Event]
    deviceProperties: Any = msgspec.UNSET
    baseTimeNanoseconds: Any = msgspec.UNSET


_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError)
_HEAD = msgspec.json.Decoder(_Head, float_hook=Decimal)
_EVENTS = msgspec.json.Decoder(list[_Event], float_hook=Decimal)
_TAIL = msgspec.json.Decoder(_Tail, float_hook=Decimal)
_ARRAY_KEY = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[')
START = 1 + list(TIMELINE_COLUMNS).index("start_ns")   # in a row of _Streamed.rows
KERNEL_NAME = 1 + list(TIMELINE_COLUMNS).index("kernel_name")
_BETWEEN_EVENTS = re.compile(rb'\}[ \t\r\n]*,[ \t\r\n]*\{')
# how far into the file the traceEvents key is looked for (Kineto writes it after a few KB of header)
_HEAD_LIMIT = 64 << 20


@contextmanager
def _gc_paused():
    """Millions of small records make the cyclic GC rescan them over and over (it doubles the parse
    time); none of them form cycles, so collection waits until reading is done."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _utf8(data: bytes | bytearray) -> None:
    """json.loads refuses a file that is not UTF-8 anywhere; msgspec only checks the strings it keeps."""
    if not data.isascii():
        data.decode("utf-8")


# What _Streamed keeps of an event, by its category: a GPU activity's name (GPU_CATEGORIES) or one of these.
_OTHER, _OP, _ANNOTATION, _RUNTIME = 0, 1, 2, 3


def _kind(category: str):
    if category in GPU_CATEGORIES:
        return GPU_CATEGORIES[category]
    if category in CPU_OP_CATEGORIES:
        return _OP
    if category == "user_annotation":
        return _ANNOTATION
    return _RUNTIME if category in RUNTIME_CATEGORIES else _OTHER


class _Streamed:
    """What the join of GPU events to CPU ops, CUDA calls and CPU ranges needs, gathered piece by piece."""

    def __init__(self):
        # GPU events as compact records (_gpu_record): their decoded events held 900 bytes each
        self.gpu: list[tuple] = []
        # External id -> (duration, name, Input Dims, Input type, Concrete Inputs) of the shortest op
        # (the innermost) of that id, the lists as their JSON text
        self.ops: dict[int, tuple[Decimal, Any, bytes, bytes, bytes]] = {}
        self.calls: dict[int, tuple] = {}  # correlation -> (pid, tid, ts) of the first CUDA call
        self.ranges: dict[tuple, list[tuple[Decimal, Decimal, str, bool]]] = {}
        self.count = 0
        self.kinds: dict[str, Any] = {}   # "cat" as written -> _kind of its lower case
        # one copy of each op name and op list text: a trace repeats the same few hundred op names and
        # shapes over and over, and as many copies they were a third of the memory a big trace took
        self.kept: dict = {}
        self.devices: dict = {}
        self.base_ns = 0
        self.preamble = b""     # text before the JSON object (document_start)

    @classmethod
    def timeline(cls, path: Path) -> tuple[pl.DataFrame, bytes]:
        """The timeline (TIMELINE_COLUMNS, by start) and the text before the JSON object (b"" when the
        file opens with it); _NotStreamable for anything the plain path should read or word (its errors,
        polars' included, stay as they were)."""
        try:
            with open(path, "rb") as handle:
                streamed = cls()._read(handle)
                rows = streamed.rows()
            warnings: list[str] = []
            rows.sort(key=lambda row: (row[START], row[0]))     # by start_ns, then place in the trace
            try:
                frame = base.frame_of_rows(rows, TIMELINE_COLUMNS, first=1)
                if not cells.has_negative_duration(frame):
                    return frame, streamed.preamble, warnings
            except (OverflowError, TypeError, ValueError, pl.exceptions.PolarsError):
                pass          # a value no column holds (beyond 64 bits, a time past 2262): checked cell by cell
            columns = {"_order": pl.Int64, **TIMELINE_COLUMNS}
            rows = cells.checked_rows(path, rows, columns, 0, REQUIRED, _event_where, warnings)
            if not rows:
                raise _NotStreamable("no GPU event has a usable time")
            return base.frame_of_rows(rows, TIMELINE_COLUMNS, first=1), streamed.preamble, warnings
        except _NotStreamable:
            raise
        except _DECODE_ERRORS as exc:
            raise _NotStreamable(str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from None
        except Exception as exc:   # noqa: BLE001 - the plain path words whatever this was
            raise _NotStreamable(f"{type(exc).__name__}: {exc}"[:200]) from None

    def _read(self, handle) -> "_Streamed":
        buffer = bytearray()
        while not (found := _ARRAY_KEY.search(buffer)):
            block = handle.read(base.CHUNK_BYTES)
            if not block or len(buffer) > _HEAD_LIMIT:
                raise _NotStreamable('no "traceEvents" array')
            buffer += block
        head = bytes(buffer[:found.end()])
        start = document_start(head)
        if start is None:
            raise _NotStreamable("no line opens a JSON object before the traceEvents array")
        self.preamble, head = head[:start], head[start:].removeprefix(b"\xef\xbb\xbf")
        del buffer[:found.end()]
        _utf8(head)
        top = _HEAD.decode(head + b"]}")
        want, at_end = PIECE_BYTES, False
        while True:
            while not at_end and len(buffer) <= want:
                block = handle.read(max(base.CHUNK_BYTES, want + 1 - len(buffer)))
                at_end = not block
                buffer += block
            if at_end and len(buffer) <= want:
                break                     # the rest is the tail
            cut = _BETWEEN_EVENTS.search(buffer, want)
            if cut is None:
                want = len(buffer)        # no gap between events in what was read: read on
                continue
            piece = buffer[:cut.start() + 1]
            try:
                _utf8(piece)
                events = _EVENTS.decode(b"[" + piece + b"]")
            except _DECODE_ERRORS:
                # the cut fell inside a string or a nested object (or the piece is malformed):
                # try a longer piece; a malformed file ends in the tail, which fails for good
                want = 2 * len(piece)
                continue
            self._take(events)
            del events
            del buffer[:cut.end() - 1]    # keep the next event's "{"
            want = PIECE_BYTES
        _utf8(buffer)
        tail = _TAIL.decode(b'{"traceEvents":[' + buffer)
        del buffer
        self._take(tail.traceEvents)
        properties = _last(tail.deviceProperties, top.deviceProperties)
        self.devices = {_int(d.get("id")): d.get("name") for d in properties or [] if isinstance(d, dict)}
        self.base_ns = _int(_last(tail.baseTimeNanoseconds, top.baseTimeNanoseconds)) or 0
        return self

    def _take(self, events: list[_Event]) -> None:
        """Keep what the join needs from one piece's events, in the plain path's terms."""
        gpu, ops, calls, ranges = self.gpu, self.ops, self.calls, self.ranges
        kinds, kept = self.kinds, self.kept
        for order, event in enumerate(events, self.count):
            cat = event.cat
            kind = kinds.get(cat) if cat.__class__ is str else _kind(str(cat).lower())
            if kind is None:
                kind = kinds[cat] = _kind(cat.lower())
            if not kind:
                continue          # flows, Python functions, overhead: nothing the join uses
            if kind.__class__ is str:
                if event.ph == "X":
                    gpu.append(self._gpu_record(order, kind, event))
            elif kind != _RUNTIME:
                if kind == _OP:
                    args = event.args or NO_ARGS
                    external = args.external_id
                    external = external if external.__class__ is int else _int(external)
                    if external is not None:
                        duration = event.dur
                        if duration.__class__ is not Decimal:   # the decoder's Decimals are used as they are
                            duration = Decimal(duration or 0)
                        op = ops.get(external)
                        if op is None or duration < op[0]:
                            name, dims, types, scalars = (_get(event.name), bytes(args.input_dims),
                                                          bytes(args.input_type), bytes(args.concrete_inputs))
                            if name.__class__ is str:
                                name = kept.setdefault(name, name)
                            ops[external] = (duration, name, kept.setdefault(dims, dims),
                                             kept.setdefault(types, types), kept.setdefault(scalars, scalars))
                duration = event.dur
                if event.ph == "X" and duration is not None:
                    start = event.ts
                    if start.__class__ is not Decimal:
                        start = _decimal(start)
                    name = event.name
                    if name.__class__ is not str:
                        name = _name(event)
                    thread = (event.pid, event.tid)
                    spans = ranges.get(thread)
                    if spans is None:
                        spans = ranges[thread] = []
                    spans.append((start, start + (duration if duration.__class__ is Decimal else Decimal(duration)),
                                  kept.setdefault(name, name), kind == _ANNOTATION))
            else:
                correlation = _int((event.args or NO_ARGS).correlation)
                if correlation is not None and correlation not in calls:
                    start = event.ts
                    calls[correlation] = (event.pid, event.tid, start if start.__class__ is Decimal else _decimal(start))
        self.count += len(events)

    def _gpu_record(self, order: int, activity: str, event: _Event) -> tuple:
        """What a timeline row needs of a GPU event, in the plain path's terms: (order, activity, device,
        context, stream, correlation, External id, start ns, duration ns, grid, block, registers, shared
        memory, bytes, name). The name and the dims are kept once for all events that share them."""
        args, kept = event.args or NO_ARGS, self.kept
        grid, block, name = _dims(args.grid), _dims(args.block), _name(event)
        return (order, activity, _int(args.device), _int(args.context), _int(args.stream), _int(args.correlation),
                _int(args.external_id), _ns_of(event, event.ts, "ts"), _ns_of(event, event.dur, "dur"),
                kept.setdefault(grid, grid), kept.setdefault(block, block), _int(args.registers_per_thread),
                _int(args.shared_memory), _int(args.bytes), kept.setdefault(name, name))

    def rows(self) -> list[tuple]:
        """The timeline's rows, (_order, *TIMELINE_COLUMNS), computed as the plain path computes them."""
        rows = []
        stacks = self._stacks()
        ops, calls, devices, base_ns = self.ops, self.calls, self.devices, self.base_ns
        # an op's texts by its JSON text: layer after layer repeats the same shapes and types
        shapes: dict[bytes, str | None] = {}
        listed: dict[bytes, str | None] = {}
        for (order, activity, device, context_id, stream, correlation, external, start, duration, grid, block,
             registers, shared, size, kernel) in self.gpu:
            op = ops.get(external)
            call = calls.get(correlation)
            context = stacks[correlation] if call else (None, None)   # nvtx_path, nvtx_range
            if op:
                _, name, dims, types, scalars = op
                if dims not in shapes:
                    value = _value(dims)
                    shapes[dims] = str(value) if value is not None else None
                if types not in listed:
                    listed[types] = _listed(_value(types))
                if scalars not in listed:
                    listed[scalars] = _listed(_value(scalars))
                name, dims, types, scalars = name, shapes[dims], listed[types], listed[scalars]
            else:
                name = dims = types = scalars = None
            values = (order, activity, device, devices.get(device), context_id, stream,
                      _int(call[0]) if call else None, correlation, base_ns + start, duration,
                      grid[0], grid[1], grid[2], block[0], block[1], block[2], registers, shared, size, kernel,
                      None, None, name, dims, context[0], context[1], external if op else None, types, scalars)
            rows.append(values)
        return rows

    def _stacks(self) -> dict[int, tuple[str | None, str | None]]:
        """nvtx_path and nvtx_range of each CUDA call that launched a GPU event, by correlation id: the
        ranges open on the calling thread then (the plain path's _ThreadStacks, over the calls used)."""
        wanted = {record[5] for record in self.gpu}
        queries: dict[tuple, list[tuple[Decimal, int]]] = {}
        for correlation, (pid, tid, moment) in self.calls.items():
            thread = (pid, tid)
            if correlation in wanted:
                queries.setdefault(thread, []).append((moment, correlation))
            else:
                hash(thread)     # the plain path keys every call by its thread: an odd pid fails there
        found: dict[int, tuple[str | None, str | None]] = {}
        for key, waiting in queries.items():
            spans = sorted(self.ranges.get(key, []), key=lambda s: (s[0], -s[1]))
            stack: list[tuple] = []
            i = 0
            for moment, correlation in sorted(waiting, key=lambda q: q[0]):
                while i < len(spans) and spans[i][0] <= moment:
                    stack.append(spans[i])
                    i += 1
                stack = [s for s in stack if s[1] >= moment]
                found[correlation] = (PATH_SEPARATOR.join(s[2] for s in stack) or None,
                                      next((s[2] for s in reversed(stack) if s[3]), None))
        return found


def _last(later, earlier):
    """A key's value where it may stand before and after the events: the later one wins, as in json.loads."""
    if later is not msgspec.UNSET:
        return later
    return None if earlier is msgspec.UNSET else earlier


def _get(value):
    """event.get(key): None for a missing key."""
    return None if value is msgspec.UNSET else value


def _name(event: _Event) -> str:
    """str(event.get("name", ""))"""
    return "" if event.name is msgspec.UNSET else str(event.name)


def _decimal(value) -> Decimal:
    if value is msgspec.UNSET:
        raise _NotStreamable('an event without "ts"')
    return Decimal(value)


_VALUE = msgspec.json.Decoder(float_hook=Decimal)


def _value(raw: bytes):
    """A kept JSON text as json.loads(parse_float=Decimal) gives it; None where the key was missing."""
    return _VALUE.decode(raw) if len(raw) else None


def _ns_of(event: _Event, value, key: str) -> int:
    if value.__class__ is Decimal:     # what the decoder makes of "ts": 4538165478815.317
        return int(value * 1000)
    try:
        return int(Decimal(_get(value)) * 1000)
    except (TypeError, InvalidOperation):
        # the plain path reads the file again and words this error, naming the file
        raise _NotStreamable(f'GPU event {_get(event.name)!r} has no numeric "{key}"') from None


def _listed(values) -> str | None:
    return json.dumps([str(v) for v in values]) if isinstance(values, list) else None
