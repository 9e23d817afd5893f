"""Framework-op context from the NVTX push/pop stack ncu prints for each kernel (`ncu --nvtx`).

The export cell lists the thread's open ranges, outermost first:
    743  "<default domain>:gpt2.iteration:none:none:none:none:none:none"  "<default domain>:aten::addmm, op_id = 7, sizes = [[768], [1024, 768], [768, 768], [], []], input_op_ids = [...]:none:..."
Each quoted range is Domain:Message:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg (the header of
the column says so); a registered string has Msg_Type REGISTERED and its text in Msg. PyTorch's
emit_nvtx writes framework ops as `name[, seq = N][, op_id = N][, sizes = [...]][, input_op_ids = [...]]`,
and autograd nodes as `AddmmBackward0, seq = N, ...` or
`autograd::engine::evaluate_function: AddmmBackward0, op_id = N`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

THREAD_PREFIX = re.compile(r"^\s*\d+\s+")
QUOTED_RANGE = re.compile(r'"(.*?)"(?=\s+"|\s*$)', re.DOTALL)
# The six fields after the message: PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg. Both the message
# and a registered string may contain ':' (aten::add), so the types, which come from small
# vocabularies, anchor the split.
TRAILING = re.compile(r"^(?P<text>.*):(?P<pl_type>none|[A-Z][A-Z0-9_]*):(?P<pl_value>[^:]*)"
                      r":(?P<clr_type>none|[A-Z][A-Z0-9_]*):(?P<color>[^:]*)"
                      r":(?P<msg_type>none|ASCII|UNICODE|REGISTERED):(?P<msg>.*)$", re.DOTALL)
DEFAULT_DOMAIN = "<default domain>"
OP_KEYS = re.compile(r",\s*(seq|op_id|sizes|input_op_ids)\s*=\s*")
FRAMEWORK_PREFIX = re.compile(r"^(aten|prim|c10d|_c10d_functional|torch|quantized|autograd|profiler|cudnn|triton)::"
                              r"|^autograd::engine::evaluate_function:")
PATH_SEPARATOR = " > "


@dataclass(frozen=True)
class Range:
    domain: str
    text: str


@dataclass(frozen=True)
class OpContext:
    framework_op: str | None = None
    framework_op_id: int | None = None
    framework_seq: int | None = None
    op_shapes: str | None = None
    nvtx_path: str | None = None
    nvtx_range: str | None = None   # innermost range that is not a framework op (a user range)


def split_ranges(cell: str | None) -> list[Range]:
    """The ranges of one push/pop cell, outermost first; an empty or odd cell gives []."""
    if not cell or not cell.strip():
        return []
    ranges = []
    for item in QUOTED_RANGE.findall(THREAD_PREFIX.sub("", cell.strip())):
        domain, sep, rest = item.partition(":")
        if not sep:
            continue
        fields = TRAILING.match(rest)
        text = rest if fields is None else fields["text"]
        if fields is not None and fields["msg_type"] == "REGISTERED" and fields["msg"]:
            text = fields["msg"]
        ranges.append(Range(domain, text.strip()))
    return ranges


def parse_op(text: str) -> tuple[str, dict[str, str]] | None:
    """(`aten::addmm`, {"op_id": "7", "sizes": "[[768], ...]"}) for a framework-op range, else None."""
    keys = list(OP_KEYS.finditer(text))
    name = text[:keys[0].start()].strip() if keys else text.strip()
    if not keys and not FRAMEWORK_PREFIX.search(name):
        return None
    values = {}
    for i, match in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        values[match.group(1)] = text[match.end():end].strip()
    return name, values


def _int(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None


@functools.lru_cache(maxsize=65536)
def op_context(cell: str | None) -> OpContext:
    """The columns framework_op, framework_op_id, framework_seq, op_shapes, nvtx_path, nvtx_range
    of one ncu push/pop cell."""
    return context_of_ranges(split_ranges(cell))


def context_of_ranges(ranges: list[Range]) -> OpContext:
    """The context of a stack of NVTX ranges, outermost first (from ncu or from nsys)."""
    if not ranges:
        return OpContext()
    path, innermost_op, innermost_user, seq = [], None, None, None
    for item in ranges:
        op = parse_op(item.text) if item.domain == DEFAULT_DOMAIN else None
        label = item.text if item.domain == DEFAULT_DOMAIN else f"{item.domain}:{item.text}"
        if op is None:
            innermost_user = label
            path.append(label)
            continue
        name, values = op
        path.append(name)
        innermost_op = (name, values)
        seq = _int(values.get("seq")) if "seq" in values else seq
    name, values = innermost_op if innermost_op else (None, {})
    return OpContext(name, _int(values.get("op_id")), seq, values.get("sizes"),
                     PATH_SEPARATOR.join(path), innermost_user)
