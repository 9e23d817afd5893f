"""FLOPs of a framework op from its input shapes (and, where the trace records them, its scalar
arguments): the fallback where ncu's tensor counters were not collected.

Which formula applies to which op is data: op_flops_rules.csv (op name pattern -> formula, the op
class of the kernel that receives the FLOPs, positions of the inputs and arguments). The formulas:

  gemm       2·M·N·K × batch. mm [M, K] x [K, N]; addmm/baddbmm skip the bias (input 0); bmm and
             matmul broadcast the leading dims into a batch; a 2-D right operand folds the left one's
             leading dims into M (what matmul does).
  linear     x [..., K], W [N, K]: M = the product of x's leading dims.
  grouped_gemm  3-D x 3-D: G groups of the same GEMM. Ragged (2-D) operands need the group offsets,
             whose values no trace records: NULL, with that reason.
  conv       2·N·K·(C/groups)·R·S·P·Q (any number of spatial dims; weight [K, C/groups, R, S]);
             P, Q from stride/padding/dilation where the trace recorded them ("Concrete Inputs"), else
             the same-size assumption (output spatial = input spatial: stride 1, 'same' padding), said
             in the note. Transposed: 2·N·C_in·(C_out/groups)·R·S·H·W over the input's spatial size.
  conv_backward  the forward FLOPs once per gradient computed (input grad and weight grad each cost one
             forward: two GEMMs of the same size); output_mask says which, else both are assumed.
  attention  2·B·H·Sq·Sk·D (Q·Kᵀ) + 2·B·H·Sq·Sk·Dv (P·V) = 4·B·H·Sq·Sk·D forward, H the query heads
             (GQA shares K/V heads, the work follows the queries); halved when is_causal. The ideal half:
             flash kernels compute the diagonal blocks whole, so ncu's counters read more (3/4 on GPT-2's
             256-token causal SDPA, GPU-PERF-NOTES.md).
  attention_backward  2.5 × the forward: recomputing S = Q·Kᵀ and the four GEMMs dV, dP, dQ, dK (five
             GEMMs of the forward's two-GEMM size).

FLOPs are math FLOPs of the op (a multiply-add is two); work padded to whole tiles is not counted.
"""

from __future__ import annotations

import ast
import csv
import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources

CONV_BACKWARD_GRADS = 2          # input grad + weight grad when output_mask is not recorded
ATTENTION_BACKWARD_FACTOR = 2.5  # 5 GEMMs of the forward's 2
SAME_SIZE = "P,Q assumed equal to the input's spatial size (stride 1, same padding): stride/padding not recorded"
# flops_source of shape FLOPs; a conv whose output size had to be assumed says so (a stride-2 conv reads 4x)
SOURCE = "op shapes"
SOURCE_ASSUMED = "op shapes (output size assumed)"
# attention whose causal flag no source recorded (emit_nvtx keeps no scalars): the full work is counted, an
# upper bound of the useful work (a causal mask halves it), so it is no useful_flops (derived.py)
CAUSAL_UNKNOWN = "is_causal not recorded: the full (non-causal) work counted"
SOURCE_CAUSAL_UNKNOWN = "op shapes (causal not recorded)"
SOURCES = {SAME_SIZE: SOURCE_ASSUMED, CAUSAL_UNKNOWN: SOURCE_CAUSAL_UNKNOWN}


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern
    formula: str
    op_class: str
    params: dict[str, str]


@dataclass(frozen=True)
class OpFlops:
    flops: float | None
    op_class: str                 # the kernel class that receives the FLOPs
    formula: str
    m: int | None = None          # GEMM dims (gemm, linear, grouped_gemm)
    n: int | None = None
    k: int | None = None
    batch: int | None = None
    note: str | None = None       # an assumption made, or why flops is None


def _data(name: str) -> list[dict[str, str]]:
    text = resources.files("kwarehouse.normalize").joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader([line for line in text.splitlines() if line.strip() and not line.startswith("#")]))


@functools.cache
def rules() -> tuple[Rule, ...]:
    return tuple(Rule(re.compile(row["op"]), row["formula"], row["op_class"],
                      dict(p.split("=", 1) for p in row["params"].split(";") if p))
                 for row in _data("op_flops_rules.csv"))


@functools.cache
def input_dtypes() -> dict[str, str]:
    return {row["input_type"]: row["math_dtype"] for row in _data("op_input_dtypes.csv")}


def rule_for(framework_op: str | None) -> Rule | None:
    if not framework_op:
        return None
    return next((r for r in rules() if r.pattern.fullmatch(framework_op.strip())), None)


def parse_list(text: str | None) -> list | None:
    """A list as the tools print it: op_shapes "[[4, 256], [], [768]]" (Python/JSON literal), op_args
    and op_dtypes (JSON lists of strings). None where absent or unreadable.

    >>> parse_list("[[768], [1024, 768], [768, 768], [], []]")
    [[768], [1024, 768], [768, 768], [], []]
    """
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, list) else None


def _dims(shapes: list, i: str | int | None) -> list[int] | None:
    if i is None:
        return None
    i = int(i)
    if i >= len(shapes) or not isinstance(shapes[i], list) or not shapes[i]:
        return None
    return shapes[i] if all(isinstance(d, int) and d >= 0 for d in shapes[i]) else None


def _arg(args: list | None, i: str | None) -> str | None:
    if args is None or i is None or not i.isdigit() or int(i) >= len(args):
        return None
    value = args[int(i)]
    return value.strip() if isinstance(value, str) and value.strip() else None


def _ints(text: str | None, n: int) -> list[int] | None:
    """"[2, 2]" or "2" -> n ints; None when absent or not integers."""
    if text is None:
        return None
    value = parse_list(text) if text.startswith("[") else [text]
    try:
        values = [int(v) for v in value]
    except (TypeError, ValueError):
        return None
    return values * n if len(values) == 1 else values if len(values) == n else None


def op_flops(framework_op: str | None, op_shapes: str | None, op_args: str | None = None) -> OpFlops | None:
    """The op's FLOPs and GEMM dims, or None when no rule knows the op or its shapes are absent.

    >>> op_flops("aten::mm", "[[4096, 2048], [2048, 8192]]").flops == 2 * 4096 * 8192 * 2048
    True
    """
    rule = rule_for(framework_op)
    shapes = parse_list(op_shapes)
    if rule is None or shapes is None:
        return None
    return FORMULAS[rule.formula](shapes, parse_list(op_args), rule)


def _missing(rule: Rule, why: str) -> OpFlops:
    return OpFlops(None, rule.op_class, rule.formula, note=why)


def _gemm_dims(a: list[int], b: list[int]) -> tuple[int, int, int, int] | None:
    """(M, N, K, batch) of matmul(a, b) with torch.matmul's rules; None when K disagrees."""
    if len(a) == 1:
        a = [1, a[0]]
    if len(b) == 1:
        b = [b[0], 1]
    if a[-1] != b[-2]:
        return None
    k, n = a[-1], b[-1]
    if len(b) == 2:                       # leading dims of a fold into M
        return math.prod(a[:-1]), n, k, 1
    lead_a, lead_b = a[:-2], b[:-2]
    width = max(len(lead_a), len(lead_b))
    lead_a, lead_b = [1] * (width - len(lead_a)) + lead_a, [1] * (width - len(lead_b)) + lead_b
    batch = math.prod(max(x, y) for x, y in zip(lead_a, lead_b))
    return a[-2], n, k, batch


def _gemm_result(rule: Rule, dims: tuple[int, int, int, int] | None, note: str | None = None) -> OpFlops:
    if dims is None:
        return _missing(rule, "operand shapes disagree (K of A differs from K of B)")
    m, n, k, batch = dims
    return OpFlops(2.0 * m * n * k * batch, rule.op_class, rule.formula, m, n, k, batch, note)


def gemm(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    a, b = _dims(shapes, rule.params["a"]), _dims(shapes, rule.params["b"])
    if a is None or b is None:
        return _missing(rule, "operand shapes not recorded")
    return _gemm_result(rule, _gemm_dims(a, b))


def linear(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    x, w = _dims(shapes, rule.params["x"]), _dims(shapes, rule.params["w"])
    if x is None or w is None or len(w) != 2:
        return _missing(rule, "input or weight shape not recorded")
    return _gemm_result(rule, (math.prod(x[:-1]), w[0], w[1], 1) if x[-1] == w[1] else None)


def grouped_gemm(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    a, b = _dims(shapes, rule.params["a"]), _dims(shapes, rule.params["b"])
    if a is None or b is None:
        return _missing(rule, "operand shapes not recorded")
    if len(a) == 3 and len(b) == 3 and a[0] == b[0]:
        return _gemm_result(rule, (a[1], b[2], a[2], a[0]) if a[2] == b[1] else None)
    return _missing(rule, "ragged groups: the group sizes are in the offsets tensor, whose values the trace "
                          "does not record")


def _conv_forward(x: list[int], w: list[int], args: list | None, rule: Rule) -> tuple[float, str | None] | None:
    """FLOPs of one forward convolution of input x with weight w, and the assumption made."""
    spatial = len(x) - 2
    if spatial < 1 or len(w) != len(x):
        return None
    kernel = w[2:]
    transposed = rule.params.get("transposed") == "always" or _arg(args, rule.params.get("transposed")) == "True"
    if transposed:   # weight [C_in, C_out/groups, R, S]: every input pixel scatters into the output
        return 2.0 * x[0] * w[0] * w[1] * math.prod(kernel) * math.prod(x[2:]), None
    stride = _ints(_arg(args, rule.params.get("stride")), spatial)
    padding_text = _arg(args, rule.params.get("padding"))
    dilation = _ints(_arg(args, rule.params.get("dilation")), spatial) or [1] * spatial
    note = None
    if padding_text in ("same", "'same'"):
        out = x[2:]
    elif stride is None:
        out, note = x[2:], SAME_SIZE
    else:
        padding = [0] * spatial if padding_text in ("valid", "'valid'") else _ints(padding_text, spatial)
        if padding is None:
            out, note = x[2:], SAME_SIZE
        else:
            out = [(size + 2 * p - d * (r - 1) - 1) // s + 1
                   for size, p, d, r, s in zip(x[2:], padding, dilation, kernel, stride)]
    # weight [K, C/groups, R, S]: each output pixel of each of the K filters reads C/groups x R x S inputs
    return 2.0 * x[0] * w[0] * w[1] * math.prod(kernel) * math.prod(max(o, 0) for o in out), note


def conv(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    x, w = _dims(shapes, rule.params["input"]), _dims(shapes, rule.params["weight"])
    result = _conv_forward(x, w, args, rule) if x and w else None
    if result is None:
        return _missing(rule, "input or weight shape not recorded")
    return OpFlops(result[0], rule.op_class, rule.formula, note=result[1])


def conv_backward(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    grad, x, w = (_dims(shapes, rule.params[p]) for p in ("grad_output", "input", "weight"))
    if not (grad and x and w) or len(w) != len(x):
        return _missing(rule, "grad_output, input or weight shape not recorded")
    transposed = _arg(args, rule.params.get("transposed")) == "True"
    # the forward's output is grad_output: P, Q need no stride or padding
    spatial = x[2:] if transposed else grad[2:]
    forward = 2.0 * x[0] * w[0] * w[1] * math.prod(w[2:]) * math.prod(spatial)
    mask = parse_list(_arg(args, rule.params.get("output_mask")))
    if mask is None:
        grads, note = CONV_BACKWARD_GRADS, "output_mask not recorded: input and weight gradients assumed"
    else:
        grads, note = sum(1 for flag in mask[:2] if flag is True or flag == "True"), None
    return OpFlops(grads * forward, rule.op_class, rule.formula, note=note)


def _attention_forward(shapes: list, args: list | None, rule: Rule) -> tuple[float, str | None] | None:
    q, k, v = (_dims(shapes, rule.params[p]) for p in ("q", "k", "v"))
    if not (q and k and v) or len(q) < 3:
        return None
    if rule.params.get("layout") == "bshd":        # [B, S, H, D]
        heads, sq, sk = q[0] * q[2], q[1], k[1]
    else:                                           # [B, H, S, D] or [B*H, S, D]
        heads, sq, sk = math.prod(q[:-2]), q[-2], k[-2]
    flops = 2.0 * heads * sq * sk * q[-1] + 2.0 * heads * sq * sk * v[-1]
    causal = _arg(args, rule.params.get("causal"))
    mask_type = _arg(args, rule.params.get("mask_type"))
    if causal is None and mask_type is None:
        return flops, CAUSAL_UNKNOWN
    if causal == "True" or mask_type in ("1", "2"):
        return flops / 2, None
    return flops, None


def attention(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    result = _attention_forward(shapes, args, rule)
    if result is None:
        return _missing(rule, "query, key or value shape not recorded")
    return OpFlops(result[0], rule.op_class, rule.formula, note=result[1])


def attention_backward(shapes: list, args: list | None, rule: Rule) -> OpFlops:
    result = _attention_forward(shapes, args, rule)
    if result is None:
        return _missing(rule, "query, key or value shape not recorded")
    return OpFlops(ATTENTION_BACKWARD_FACTOR * result[0], rule.op_class, rule.formula, note=result[1])


FORMULAS = {"gemm": gemm, "linear": linear, "grouped_gemm": grouped_gemm, "conv": conv,
            "conv_backward": conv_backward, "attention": attention, "attention_backward": attention_backward}


def op_dtype(op_dtypes: str | None, framework_op: str | None = None) -> str | None:
    """The math dtype of an op from its inputs' element types: that of the operands its formula reads
    (the first tensor inputs otherwise); None when they are not recorded or not known.

    >>> op_dtype('["c10::BFloat16", "c10::BFloat16", "Scalar"]', "aten::mm")
    'bf16'
    """
    types = parse_list(op_dtypes)
    if not types:
        return None
    rule = rule_for(framework_op)
    positions = [int(v) for p, v in (rule.params.items() if rule else ())
                 if p in ("a", "b", "x", "w", "input", "weight", "q", "k", "v") and v.isdigit()]
    picked = [types[i] for i in positions if i < len(types)] or types
    known = [input_dtypes()[t] for t in picked if isinstance(t, str) and t in input_dtypes()]
    # fp8 GEMMs may mix e4m3 and e5m2 operands: the first operand names it, as the name rules do
    return known[0] if known else None
