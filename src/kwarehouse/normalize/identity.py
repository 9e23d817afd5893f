"""Kernel identity: one name for one kernel, whichever tool printed it.

ncu and the CUPTI-based tools (PyTorch profiler, nsys) demangle the same symbol differently:
ncu drops some namespaces (`at::native::` becomes `at::` or `native::`), writes `<unnamed>` for
`(anonymous namespace)`, `[lambda(int) (instance 1)]` for `{lambda(int)#1}`, `char *` for `char*`,
`0` for `false`, `3` for `3ul`, and names parameters by template position (`T2`). So identity is not
the printed name but a canonical signature built from it by the rules below, applied in order:

  1. anonymous namespaces are dropped (`(anonymous namespace)::`, `<unnamed>::`, `_GLOBAL__N_...::`);
  2. lambdas become `lambda#N` (their argument lists vary in spelling, their number does not);
  3. namespace qualifiers are dropped (`at::native::X` -> `X`): tools disagree on them, and the
     kernel's functor, dtypes and tile shape - what tells kernels apart - are all kept;
  4. `operator()` becomes `operator_call`; every parameter list and C cast is dropped: parameters
     follow from the template arguments, and ncu prints them as `T2`;
  5. `const` and return types (`void `) are dropped; integer literal suffixes (`3ul`) and booleans
     (`true`/`false` -> `1`/`0`) take one spelling; whitespace is removed except between words;
  6. the rules of signature_rules.csv (data) drop what is noise, e.g. the Triton kernel counter.

kernel_display is a readable name for tables and reports, made from kernel_signature alone (so one
identity has one display, whichever tool named it): the signature with dtypes short (`BFloat16` ->
`bf16`), cuBLAS's `Kernel2<cutlass_...>` wrapper and the `std::array<char*, N>` argument of ATen's
elementwise kernels dropped (the functor decides the arity), `::operator_call` between nested lambdas
dropped (`f::lambda#1::operator_call::lambda#4` -> `f::lambda#1.4`: the numbers stay, they tell the
dtype branches apart), a space after each comma, and a name longer than DISPLAY_MAX_CHARS cut with its
kernel_id's first 8 digits appended. Everything dropped follows from what is kept, so displays stay as
unique as identities (tests check it over every kernel name of the corpus and tests/data).

kernel_base is the qualified function name without return type, template arguments or parameters,
with anonymous and versioned inline namespaces dropped (`cub::CUB_300102_SM_...::`), completed to
its full namespace from kernel_scopes.toml where a tool abbreviated it. kernel_id is a short hash of
kernel_signature.

Every step is linear in the name's length, so a hostile or broken export cannot stall an ingest.
A name longer than MAX_IDENTITY_CHARS (far beyond real kernels: the test corpus's longest is under
1,000 characters, CUTLASS templates run to a few thousand) is neither demangled nor canonicalized: kernel_name keeps it as printed,
kernel_base comes from its first LONG_NAME_HEAD characters, and kernel_signature is that base
with the name's length and sha256, so two different long names never share an identity.
An empty name (a launch the tool printed without one) is UNNAMED_KERNEL in every column.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

# `(?<!\w)`: a run of `_GLOBAL__N_` repeats is tried once, not once per repeat (quadratic).
ANONYMOUS_NAMESPACE = re.compile(r"\(anonymous namespace\)::|<unnamed>::|(?<!\w)_GLOBAL__N_\w*::")
LAMBDA = re.compile(
    r"\{lambda\((?:[^(){}]|\([^()]*\))*\)#(\d+)\}"           # libstdc++ / CUPTI: {lambda(int)#1}
    r"|\[lambda\((?:[^()\[\]]|\([^()]*\))*\) \(instance (\d+)\)\]")  # ncu: [lambda(int) (instance 1)]
# A namespace or class qualifier: a plain identifier directly followed by `::`. Scopes that are
# functions (`f(int)::`) or templates (`C<T>::`) are not matched, so enclosing functions survive.
# The PyTorch profiler's memory operations, "Memcpy DtoH (Device -> Pinned)", "Memset (Device)": the
# "->" of the memory kinds is no template bracket, so the name is taken whole, not parsed as C++.
MEMORY_OPERATION = re.compile(r"^(Memcpy [A-Za-z]+|Memset) \([^()]*\)$")
QUALIFIER = re.compile(r"\b(?!const::)[A-Za-z_]\w*::")
CALL_OPERATOR = re.compile(r"\boperator\s*\(\)")
CONST = re.compile(r"\bconst\b")
RETURN_VOID = re.compile(r"\bvoid\s+(?=[A-Za-z_])")
INTEGER_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
SPACE_AROUND_PUNCTUATION = re.compile(r"\s*([<>,*&\[\]:#])\s*")
SPACES = re.compile(r"\s+")
KERNEL_ID_LENGTH = 16
# Longer names get the cheap identity described in the module docstring.
MAX_IDENTITY_CHARS = 32768
LONG_NAME_HEAD = 1024
# What a launch without a name is called.
UNNAMED_KERNEL = "(unnamed kernel)"


def _data(name: str) -> str:
    return resources.files("kwarehouse.normalize").joinpath(name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class SignatureRule:
    pattern: re.Pattern
    replacement: str


@functools.cache
def signature_rules() -> tuple[SignatureRule, ...]:
    rows = csv.DictReader(line for line in _data("signature_rules.csv").splitlines()
                          if line.strip() and not line.startswith("#"))
    return tuple(SignatureRule(re.compile(r["pattern"]), r["replacement"]) for r in rows)


@dataclass(frozen=True)
class Scopes:
    """kernel_scopes.toml: inline namespaces to drop, full names of known kernels, prefix fixes."""
    inline_namespace: re.Pattern
    known: dict[str, tuple[str, ...]]      # unqualified name -> full qualified names
    prefixes: tuple[tuple[str, str], ...]  # abbreviated prefix -> full prefix


@functools.cache
def scopes() -> Scopes:
    spec = tomllib.loads(_data("kernel_scopes.toml"))
    known: dict[str, list[str]] = {}
    for full in spec["known"]["kernels"]:
        known.setdefault(full.rsplit("::", 1)[-1], []).append(full)
    prefixes = tuple(sorted(spec["prefixes"].items(), key=lambda kv: -len(kv[0])))
    return Scopes(re.compile(spec["inline_namespaces"]["pattern"]),
                  {k: tuple(v) for k, v in known.items()}, prefixes)


def demangle(name: str) -> str:
    """Itanium-ABI mangled (`_Z...`) to demangled, through the C++ runtime's own demangler;
    anything else, a name the demangler rejects, or one over MAX_IDENTITY_CHARS comes back unchanged."""
    if not name.startswith("_Z") or len(name) > MAX_IDENTITY_CHARS:
        return name
    # imported at the first mangled name: loading the C++ runtime costs 0.02 CPU-s, and a PyTorch trace
    # carries none
    import cxxfilt
    try:
        return cxxfilt.demangle(name, external_only=False)
    except cxxfilt.InvalidName:
        return name


def _apply_rules(text: str) -> str:
    for rule in signature_rules():
        text = rule.pattern.sub(rule.replacement, text)
    return text


def declaration(text: str) -> str:
    """The function name with its template arguments: a trailing parameter list (and `const`) and
    any return type before the name are cut off, at bracket depth 0, so a return type such as
    `std::enable_if<!T7, void>::type` (cuBLAS gemvx) is no part of the name."""
    text = text.strip()
    if text.endswith(" const"):
        text = text[: -len(" const")].rstrip()
    end = len(text)
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            depth += text[i] in ")]>" and 1 or (-1 if text[i] in "([<" else 0)
            if depth == 0:
                end = i
                break
    head, depth, cut = text[:end], 0, 0
    for i, ch in enumerate(head):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == " " and depth == 0 and head[i + 1:i + 2] not in ("", "<", "(", "[", "{"):
            cut = i + 1
    return head[cut:].strip() or head.strip() or text


def kernel_signature(name: str) -> str:
    """The canonical form of a kernel name (rules in the module docstring)."""
    if memory := MEMORY_OPERATION.match(name):
        return _apply_rules(memory[1])
    text = ANONYMOUS_NAMESPACE.sub("", demangle(name))
    text = LAMBDA.sub(lambda m: f"lambda#{m.group(1) or m.group(2)}", text)
    text = declaration(text)
    text = QUALIFIER.sub("", text)
    text = CALL_OPERATOR.sub("operator_call", text)
    text = drop_parenthesized(text)
    text = RETURN_VOID.sub("", CONST.sub("", text))
    text = INTEGER_SUFFIX.sub(r"\1", text)
    text = re.sub(r"\btrue\b", "1", re.sub(r"\bfalse\b", "0", text))
    text = SPACES.sub(" ", SPACE_AROUND_PUNCTUATION.sub(r"\1", text)).strip()
    return _apply_rules(text)


@functools.lru_cache(maxsize=65536)
def type_evidence(name: str) -> str:
    """The part of a kernel name that shows its types alike in every tool: the function name with its template
    arguments (lambdas with their argument types), and the parameter list only where there are no template
    arguments. ncu prints a template kernel's parameters by template position (`(T4 *, const T2 *, int)`) where
    the PyTorch profiler and nsys print the types (`(float*, float const*, int)`), so a dtype read from them
    would differ between the ncu and the trace rows of one identity; a plain function's parameters read alike.
    A name cut short by its tool (brackets left open) is taken whole: no parameter list can be told apart in it.

    >>> type_evidence("void cunn_SoftMaxForward<4, float, float, float, Epilogue>(T4 *, const T2 *, int)")
    'cunn_SoftMaxForward<4, float, float, float, Epilogue>'
    >>> type_evidence("saxpy(double *, double *, double *, double, int)")
    'saxpy(double *, double *, double *, double, int)'
    """
    text = demangle(name).strip()
    if text.count("(") != text.count(")") or text.count("<") != text.count(">"):
        return text
    head = declaration(text)
    return head if "<" in head else text


def drop_parenthesized(text: str) -> str:
    """`text` without its balanced parenthesized groups, nested ones included, in one pass; a `(`
    or `)` without its partner stays.

    >>> drop_parenthesized("f<(char)1>(g(int), h)) x(")
    'f<1>) x('
    """
    kept: list[str] = []
    opened: list[int] = []        # where in `kept` each unclosed `(` is
    for ch in text:
        if ch == "(":
            opened.append(len(kept))
            kept.append(ch)
        elif ch == ")" and opened:
            del kept[opened.pop():]
        else:
            kept.append(ch)
    return "".join(kept)


def _split_top_level(text: str) -> str:
    """The qualified function name: text before the first `<` or `(` outside brackets."""
    for i, ch in enumerate(text):
        if ch in "<(":
            return text[:i]
    return text


def kernel_base(name: str, complete: bool = True) -> str:
    """`void at::native::f<8, T>(int)` -> `at::native::f`, completed from kernel_scopes.toml
    unless `complete` is false."""
    if memory := MEMORY_OPERATION.match(name):
        return _apply_rules(memory[1])
    text = ANONYMOUS_NAMESPACE.sub("", demangle(name)).strip()
    qualified = _split_top_level(declaration(LAMBDA.sub("lambda", text))).strip()
    parts = [p for p in qualified.split("::") if p and not scopes().inline_namespace.fullmatch(p)]
    if not parts:
        return _apply_rules(qualified)
    return _apply_rules(_complete_scope(parts) if complete else "::".join(parts))


def _complete_scope(parts: list[str]) -> str:
    """A tool may abbreviate a namespace (ncu prints `at::X` for `at::native::X`): when a known
    full name ends in the same function and contains the given qualifiers in order, use it."""
    table = scopes()
    for full in table.known.get(parts[-1], ()):
        full_parts = full.split("::")
        if _is_subsequence(parts[:-1], full_parts[:-1]):
            return full
    qualified = "::".join(parts)
    for short, long in table.prefixes:
        # Only `prefix::function`: a deeper name (`at::cuda::f`) is no abbreviation.
        if qualified.startswith(short) and "::" not in qualified[len(short):]:
            return long + qualified[len(short):]
    return qualified


def _is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(part in it for part in needle)


def kernel_id(signature: str) -> str:
    """A short stable id: the first 16 hex digits of the signature's sha256."""
    return _sha256(signature)[:KERNEL_ID_LENGTH]


def _sha256(text: str) -> str:
    # surrogatepass: a name with a lone surrogate still gets an id (valid text hashes as UTF-8).
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# Short spellings of element types in kernel_display (whole template arguments or words only).
DISPLAY_DTYPES = {"BFloat16": "bf16", "bfloat16_t": "bf16", "__nv_bfloat16": "bf16", "Half": "fp16",
                  "half_t": "fp16", "__half": "fp16", "Float8_e4m3fn": "fp8_e4m3", "Float8_e5m2": "fp8_e5m2",
                  "float_e4m3_t": "fp8_e4m3", "float_e5m2_t": "fp8_e5m2", "__nv_fp8_e4m3": "fp8_e4m3",
                  "__nv_fp8_e5m2": "fp8_e5m2"}
DISPLAY_DTYPE = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, DISPLAY_DTYPES)) + r")(?![\w])")
# ATen's elementwise kernels take their operands as std::array<char*, N>: N is the functor's arity.
DISPLAY_ARRAY_ARG = re.compile(r",array<char\*,\d+>(?=[,>])")
# cuBLAS wraps its CUTLASS-built kernels: Kernel2<cutlass_75_tensorop_...> is that kernel.
DISPLAY_CUBLAS_WRAPPER = re.compile(r"^Kernel2<(cutlass_\w+)>$")
# f::lambda#1::operator_call::lambda#4::operator_call::lambda#1 -> f::lambda#1.4.1
DISPLAY_LAMBDA_CHAIN = re.compile(r"lambda#(\d+)((?:::operator_call::lambda#\d+)+)")
DISPLAY_MAX_CHARS = 160


def kernel_display(signature: str, kernel_id_: str | None = None) -> str:
    """A readable, unique name for the identity with this signature (rules in the module docstring)."""
    text = DISPLAY_CUBLAS_WRAPPER.sub(r"\1", signature)
    text = DISPLAY_LAMBDA_CHAIN.sub(
        lambda m: "lambda#" + ".".join([m.group(1), *re.findall(r"lambda#(\d+)", m.group(2))]), text)
    text = DISPLAY_ARRAY_ARG.sub("", text)
    text = DISPLAY_DTYPE.sub(lambda m: DISPLAY_DTYPES[m.group(1)], text)
    text = text.replace(",", ", ")
    if len(text) > DISPLAY_MAX_CHARS:
        text = f"{text[:DISPLAY_MAX_CHARS - 12]}... #{(kernel_id_ or kernel_id(signature))[:8]}"
    return text


@dataclass(frozen=True)
class Identity:
    kernel_name: str
    kernel_base: str
    kernel_signature: str
    kernel_id: str

    @property
    def kernel_display(self) -> str:
        return kernel_display(self.kernel_signature, self.kernel_id)


def identify(name: str) -> Identity:
    """Every identity column of one kernel name (mangled or demangled, any tool's spelling)."""
    if not name.strip() or name == UNNAMED_KERNEL:
        return Identity(UNNAMED_KERNEL, UNNAMED_KERNEL, UNNAMED_KERNEL, kernel_id(UNNAMED_KERNEL))
    if len(name) > MAX_IDENTITY_CHARS:
        return long_name_identity(name)
    return _identify(name)


@functools.lru_cache(maxsize=65536)
def _identify(name: str) -> Identity:
    signature = kernel_signature(name)
    return Identity(demangle(name), kernel_base(name), signature, kernel_id(signature))


def long_name_identity(name: str) -> Identity:
    """The identity of a name over MAX_IDENTITY_CHARS: the name as printed, the base of its head,
    and a signature that is the base with the name's length and hash (module docstring)."""
    base = kernel_base(name[:LONG_NAME_HEAD]) or "kernel"
    signature = f"{base}<{len(name)}-character name, sha256 {_sha256(name)[:KERNEL_ID_LENGTH]}>"
    return Identity(name, base, signature, kernel_id(signature))
