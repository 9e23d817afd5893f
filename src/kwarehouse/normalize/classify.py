"""Library, implementation, op class and math dtype of each kernel, from ordered rule files
(library_rules.csv, implementation_rules.csv, op_class_rules.csv, math_dtype_rules.csv).

A rule is (field, pattern, label): the first rule whose regular expression is found in the named
field of a kernel decides its label; no match gives `unknown` (for implementation: the library,
which wrote the kernels no implementation rule names). A warehouse may carry its own rules
in <warehouse>/normalize/<same file name>; they are tried before the built-in ones.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kwarehouse.errors import InputError
from kwarehouse.normalize import identity

UNKNOWN = "unknown"
# Kernel columns a rule may look at.
FIELD_COLUMNS = {"base": "kernel_base", "signature": "kernel_signature", "name": "kernel_name",
                 "framework_op": "framework_op", "nvtx_path": "nvtx_path"}
# Fields made from a column: `types` is the part of the name every tool prints alike (identity.type_evidence),
# what math_dtype_rules.csv reads, so the ncu and the trace rows of one kernel identity get one dtype.
DERIVED_FIELDS = {"types": ("kernel_name", identity.type_evidence)}
RULE_FIELDS = (*FIELD_COLUMNS, *DERIVED_FIELDS)
RULE_FILES = {"library": "library_rules.csv", "implementation": "implementation_rules.csv",
              "op_class": "op_class_rules.csv", "math_dtype": "math_dtype_rules.csv"}


@dataclass(frozen=True)
class Rule:
    field: str
    pattern: re.Pattern
    label: str
    origin: str   # "file:line", for error messages and `kwh kernels --explain`


def parse_rules(text: str, origin: str, label_column: str) -> tuple[Rule, ...]:
    """Rules from one CSV text; '#' lines are comments. Errors name the file and line."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return ()
    reader = csv.reader([line for _, line in lines])
    header = next(reader)
    if header != ["field", "pattern", label_column]:
        raise InputError(origin, f"header must be field,pattern,{label_column}", lines[0][0])
    rules = []
    for (number, _), row in zip(lines[1:], reader):
        if len(row) != 3:
            raise InputError(origin, "a rule has three fields: field,pattern,"
                             f"{label_column} (quote a pattern that contains a comma)", number)
        field, pattern, label = (value.strip() for value in row)
        if field not in RULE_FIELDS:
            raise InputError(origin, f"unknown field {field!r}; use one of {', '.join(RULE_FIELDS)}", number)
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise InputError(origin, f"bad regular expression {pattern!r}: {exc}", number) from None
        rules.append(Rule(field, compiled, label, f"{origin}:{number}"))
    return tuple(rules)


def builtin_rules(kind: str) -> tuple[Rule, ...]:
    name = RULE_FILES[kind]
    text = resources.files("kwarehouse.normalize").joinpath(name).read_text(encoding="utf-8")
    return parse_rules(text, f"kwarehouse/normalize/{name}", kind)


def load_rules(kind: str, extra_dir: Path | None = None) -> tuple[Rule, ...]:
    """The rules of one kind: a warehouse's own first (when it has them), then the built-in ones."""
    own: tuple[Rule, ...] = ()
    if extra_dir is not None and (extra_dir / RULE_FILES[kind]).is_file():
        path = extra_dir / RULE_FILES[kind]
        own = parse_rules(path.read_text(encoding="utf-8"), str(path), kind)
    return own + builtin_rules(kind)


def first_match(rules: tuple[Rule, ...], values: dict[str, str | None]) -> Rule | None:
    for rule in rules:
        if rule.field in DERIVED_FIELDS:
            column, derive = DERIVED_FIELDS[rule.field]
            value = derive(values[column]) if values.get(column) else None
        else:
            value = values.get(FIELD_COLUMNS[rule.field])
        if value and rule.pattern.search(value):
            return rule
    return None


def classify(rules: tuple[Rule, ...], values: dict[str, str | None]) -> str:
    rule = first_match(rules, values)
    return rule.label if rule else UNKNOWN
